package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// BenchmarkTTYOutput measures 100 MB of a program's output through the agent to one
// viewer that reads as fast as it can (over net.Pipe), and how much it was sent.
func BenchmarkTTYOutput(b *testing.B) {
	c, _, _ := pipeAgent(b)
	for b.Loop() {
		in, err := c.TTYOpen(context.Background(), agent.TTYOpenArgs{Argv: []string{"sh", "-c", "sleep 0.2; head -c 104857600 /dev/zero | tr '\\0' x"}})
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		var start time.Time
		_, err = c.TTYAttach(context.Background(), agent.TTYAttachArgs{ID: in.ID}, nil, func(ev string, p []byte) error {
			if start.IsZero() {
				start = time.Now()
			}
			n += int64(len(p))
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/time.Since(start).Seconds()/1e6, "MB/s")
		b.ReportMetric(float64(n)/(100<<20)*100, "%sent")
	}
}
