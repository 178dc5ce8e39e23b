package keep

import (
	"context"
	"time"
)

// Ring keeps the last bytes of a stream and counts all bytes ever written: what a
// keeper keeps of each output stream (and what a terminal keeps of its scrollback).
// It is not safe for concurrent use.
type Ring struct {
	buf   []byte
	total int64 // bytes ever written; offsets are in this space
}

// NewRing returns a ring that keeps the last n bytes.
func NewRing(n int) Ring { return Ring{buf: make([]byte, 0, n)} }

// Total is the number of bytes ever written: the offset of the next one.
func (r *Ring) Total() int64 { return r.total }

// Write appends b, dropping the oldest bytes beyond the ring's size.
func (r *Ring) Write(b []byte) {
	c := cap(r.buf)
	r.total += int64(len(b))
	if len(b) >= c {
		r.buf = append(r.buf[:0], b[len(b)-c:]...)
		return
	}
	if over := len(r.buf) + len(b) - c; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	r.buf = append(r.buf, b...)
}

// Since returns what was written from offset on, the next offset, and whether some of
// it had already been overwritten.
func (r *Ring) Since(off int64) ([]byte, int64, bool) {
	first := r.total - int64(len(r.buf))
	dropped := false
	if off < first {
		off, dropped = first, true
	}
	if off > r.total {
		off = r.total
	}
	return append([]byte(nil), r.buf[off-first:]...), r.total, dropped
}

// WaitFor waits up to waitMS milliseconds (at most a minute) until state reports
// something new, or ctx ends. state returns whether there is something new and the
// channel that is closed on the next change (read under the caller's lock).
func WaitFor(ctx context.Context, waitMS int64, state func() (fresh bool, changed <-chan struct{})) error {
	deadline := time.Now().Add(time.Duration(min(waitMS, 60_000)) * time.Millisecond)
	for {
		fresh, changed := state()
		wait := time.Until(deadline)
		if fresh || wait <= 0 {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
	}
}
