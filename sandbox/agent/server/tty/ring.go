package tty

// ring keeps the last bytes of a terminal's output in a circular buffer and counts
// every byte ever written; a write costs its own length, whatever the ring holds
// (keep.Ring moves its whole content once full). It is not safe for concurrent use.
type ring struct {
	buf   []byte
	total int64 // bytes ever written: the offset of the next one
}

func newRing(n int) ring { return ring{buf: make([]byte, n)} }

func (r *ring) write(p []byte) {
	n := len(r.buf)
	if len(p) > n {
		r.total += int64(len(p) - n)
		p = p[len(p)-n:]
	}
	at := int(r.total % int64(n))
	c := copy(r.buf[at:], p)
	copy(r.buf, p[c:])
	r.total += int64(len(p))
}

// since copies out what was written from off on (from the oldest byte kept when off
// was overwritten), at most max bytes of it from the start when max > 0, and returns
// the offset after the copy.
func (r *ring) since(off int64, max int) ([]byte, int64) {
	n := int64(len(r.buf))
	off = min(maxInt64(off, r.total-n, 0), r.total)
	end := r.total
	if max > 0 {
		end = min(end, off+int64(max))
	}
	out := make([]byte, 0, end-off)
	for off < end {
		at := off % n
		chunk := min(end-off, n-at)
		out = append(out, r.buf[at:at+chunk]...)
		off += chunk
	}
	return out, end
}

func maxInt64(a ...int64) int64 {
	m := a[0]
	for _, v := range a[1:] {
		m = max(m, v)
	}
	return m
}
