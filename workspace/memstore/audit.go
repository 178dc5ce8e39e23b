package memstore

import (
	"context"

	"github.com/cwsdev/cws/workspace"
)

// Audit appends r to the ring, overwriting the oldest record once it is full.
func (s *Store) Audit(_ context.Context, r workspace.AuditRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.audit[s.next] = r
	s.next++
	if s.next == len(s.audit) {
		s.next, s.full = 0, true
	}
	return nil
}

// RecentAudit returns up to n records, newest first.
func (s *Store) RecentAudit(_ context.Context, n int) ([]workspace.AuditRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	size := s.next
	if s.full {
		size = len(s.audit)
	}
	n = min(max(n, 0), size)
	out := make([]workspace.AuditRecord, 0, n)
	for i, j := 0, s.next; i < n; i++ {
		j = (j - 1 + len(s.audit)) % len(s.audit)
		out = append(out, s.audit[j])
	}
	return out, nil
}
