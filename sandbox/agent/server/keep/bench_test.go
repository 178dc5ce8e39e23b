package keep

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// BenchmarkOutput is one output call of a process with 3.9 KB of output, to a keeper
// in this process and to a keeper process.
func BenchmarkOutput(b *testing.B) {
	b.Run("in-process", func(b *testing.B) {
		dir := b.TempDir()
		serveKeeper(b, dir)
		benchOutput(b, NewClient(dir, "", nil))
	})
	b.Run("process", func(b *testing.B) {
		bin, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		dir := filepath.Join(b.TempDir(), "procs")
		b.Cleanup(func() { killKeepers(b, dir) })
		benchOutput(b, NewClient(dir, bin, nil))
	})
}

func benchOutput(b *testing.B, c *Client) {
	_, pi := adopt(b, c, "seq 1000; sleep 1000")
	for {
		o, err := c.Output(ctxT(b), agent.ProcOutputArgs{ID: pi.ID, WaitMS: 100})
		if err != nil {
			b.Fatal(err)
		}
		if o.StdoutOffset >= 3893 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for b.Loop() {
		if _, err := c.Output(b.Context(), agent.ProcOutputArgs{ID: pi.ID}); err != nil {
			b.Fatal(err)
		}
	}
}
