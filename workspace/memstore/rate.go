package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/cwsdev/cws/workspace"
)

type window struct {
	start time.Time
	end   time.Time
	count int
}

// Allow counts one event against key in the fixed window (aligned to the Unix epoch,
// millisecond resolution) that holds now, and reports whether the count is within
// limit. limit <= 0 means no limit; nothing is counted.
func (s *Store) Allow(_ context.Context, key string, limit int, win time.Duration) (bool, error) {
	if win < time.Millisecond {
		return false, fmt.Errorf("%w: rate window %v is under 1ms", workspace.ErrInvalid, win)
	}
	if limit <= 0 {
		return true, nil
	}
	now := s.now()
	ms := win.Milliseconds()
	start := time.UnixMilli(now.UnixMilli() / ms * ms)
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.windows[key]
	if !w.start.Equal(start) {
		w = window{start: start, end: start.Add(time.Duration(ms) * time.Millisecond)}
	}
	w.count++
	s.windows[key] = w
	s.maybeSweep(now)
	return w.count <= limit, nil
}
