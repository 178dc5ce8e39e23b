package memstore

import (
	"context"
	"time"
)

type claim struct {
	value   string
	expires time.Time // zero: never
}

func (c claim) expired(now time.Time) bool {
	return !c.expires.IsZero() && !now.Before(c.expires)
}

// Claim sets key to value unless a live value holds it.
func (s *Store) Claim(_ context.Context, key, value string, ttl time.Duration) (string, bool, error) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.claims[key]; ok && !c.expired(now) && c.value != value {
		return c.value, false, nil
	}
	c := claim{value: value}
	if ttl > 0 {
		c.expires = now.Add(ttl)
	}
	s.claims[key] = c
	s.maybeSweep(now)
	return value, true, nil
}

// Release deletes key if it still holds value.
func (s *Store) Release(_ context.Context, key, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.claims[key]; ok && c.value == value {
		delete(s.claims, key)
	}
	return nil
}
