package memstore

import (
	"bytes"
	"context"
)

// GetState returns a copy of a session's state value under key.
func (s *Store) GetState(_ context.Context, tenant, id, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[tenant][id]; !ok {
		return nil, notFound(id)
	}
	return bytes.Clone(s.state[stateKey{tenant, id}][key]), nil
}

// PutState sets (or, with nil, deletes) a session's state value under key.
func (s *Store) PutState(_ context.Context, tenant, id, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[tenant][id]; !ok {
		return notFound(id)
	}
	sk := stateKey{tenant, id}
	if value == nil {
		delete(s.state[sk], key)
		return nil
	}
	if s.state[sk] == nil {
		s.state[sk] = map[string][]byte{}
	}
	s.state[sk][key] = bytes.Clone(value)
	return nil
}

type stateKey struct{ tenant, id string }
