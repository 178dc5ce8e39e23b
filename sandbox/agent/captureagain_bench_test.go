package agent_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// BenchmarkCaptureAgain is the agent's side of a second snapshot: the exact capture
// of a 100 MB / 5,000-file tree with references to what the capture before sent, one
// file changed in between.
//
//	go test ./sandbox/agent -run '^$' -bench CaptureAgain -benchtime 5x
func BenchmarkCaptureAgain(b *testing.B) {
	c, dir, _ := pipeAgent(b)
	if err := benchTree(dir, 5000, 100<<20, 50); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	time.Sleep(2100 * time.Millisecond) // past the racy window
	if _, err := c.TarOut(ctx, agent.TarOutArgs{Path: ".", Exact: true, Remember: true}, io.Discard); err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		if err := os.WriteFile(filepath.Join(dir, "src", "pkg000", "file00000.go"), []byte{byte(i)}, 0o644); err != nil {
			b.Fatal(err)
		}
		out.Reset()
		b.StartTimer()
		if _, err := c.TarOut(ctx, agent.TarOutArgs{Path: ".", Exact: true, Refs: true, Remember: true}, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(out.Len()), "tar-bytes")
}
