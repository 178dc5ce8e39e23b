package tty

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestRing writes random chunks into a small ring and a plain buffer and compares what
// each keeps from random offsets.
func TestRing(t *testing.T) {
	r := newRing(64)
	var all []byte
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		p := make([]byte, rnd.IntN(100))
		for j := range p {
			p[j] = byte(rnd.IntN(256))
		}
		r.write(p)
		all = append(all, p...)
		if r.total != int64(len(all)) {
			t.Fatalf("write %d: total %d, want %d", i, r.total, len(all))
		}
		off := rnd.Int64N(int64(len(all)) + 1)
		max := rnd.IntN(80)
		got, next := r.since(off, max)
		from := max64(off, int64(len(all))-64)
		end := int64(len(all))
		if max > 0 {
			end = min(end, from+int64(max))
		}
		if want := all[from:end]; !bytes.Equal(got, want) || next != end {
			t.Fatalf("write %d: since(%d, %d) = %d bytes to %d, want %d to %d", i, off, max, len(got), next, len(want), end)
		}
	}
}

func max64(a, b int64) int64 { return max(a, b) }
