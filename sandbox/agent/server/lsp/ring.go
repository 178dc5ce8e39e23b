package lsp

import (
	"sync"
	"time"
)

// Message levels, most severe first, as the seed names them. LSP's MessageType 1..5 are
// error, warning, info, log and debug; log and debug are both "debug" here.
var levels = []string{"error", "warning", "info", "debug"}

func levelName(t int) string {
	if t >= 1 && t <= len(levels) {
		return levels[t-1]
	}
	return "debug"
}

// levelRank is a level's place in levels (0 is error), or -1 when it isn't one.
func levelRank(name string) int {
	for i, l := range levels {
		if l == name {
			return i
		}
	}
	return -1
}

// entry is one logMessage or showMessage (or a line the manager logs about a server).
type entry struct {
	Level   string    `json:"level"`
	Message string    `json:"message"`
	Time    time.Time `json:"timestamp"`
	Server  string    `json:"server"`
}

// ring keeps the last n entries.
type ring struct {
	mu    sync.Mutex
	buf   []entry
	next  int
	full  bool
	limit int
}

// newRing returns a ring of n entries; its buffer grows as entries come (an agent whose
// servers never ran holds none).
func newRing(n int) *ring { return &ring{limit: n} }

func (r *ring) add(e entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.limit == 0 {
		return
	}
	if len(r.buf) < r.limit {
		r.buf = append(r.buf, entry{})
	}
	r.buf[r.next] = e
	r.next = (r.next + 1) % r.limit
	if r.next == 0 {
		r.full = true
	}
}

// last returns up to n of the newest entries at most as severe as maxRank, oldest first.
func (r *ring) last(n, maxRank int) []entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []entry
	size := r.next
	if r.full {
		size = r.limit
	}
	for i := 0; i < size && len(out) < n; i++ {
		e := r.buf[(r.next-1-i+r.limit)%r.limit]
		if levelRank(e.Level) <= maxRank {
			out = append(out, e)
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
