package memstore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cwsdev/cws/workspace"
)

// CreateSession records a copy of sess, enforcing the tenant's max under the lock.
func (s *Store) CreateSession(_ context.Context, sess *workspace.Session, max int) error {
	if err := validate(sess); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	byID := s.sessions[sess.Tenant]
	if _, ok := byID[sess.ID]; ok {
		return fmt.Errorf("session %q: %w", sess.ID, workspace.ErrConflict)
	}
	if max > 0 && len(byID) >= max {
		return fmt.Errorf("tenant %q has %d sessions: %w", sess.Tenant, len(byID), workspace.ErrQuota)
	}
	if byID == nil {
		byID = make(map[string]*workspace.Session)
		s.sessions[sess.Tenant] = byID
	}
	byID[sess.ID] = clone(sess)
	return nil
}

// GetSession returns a copy of a tenant's session.
func (s *Store) GetSession(_ context.Context, tenant, id string) (*workspace.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[tenant][id]
	if !ok {
		return nil, notFound(id)
	}
	return clone(sess), nil
}

// UpdateSession replaces a session that exists with a copy of sess.
func (s *Store) UpdateSession(_ context.Context, sess *workspace.Session) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	byID := s.sessions[sess.Tenant]
	if _, ok := byID[sess.ID]; !ok {
		return notFound(sess.ID)
	}
	byID[sess.ID] = clone(sess)
	return nil
}

// TouchSession sets a session's LastUsed.
func (s *Store) TouchSession(_ context.Context, tenant, id string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[tenant][id]
	if !ok {
		return notFound(id)
	}
	sess.LastUsed = at
	return nil
}

// DeleteSession removes a session, freeing its quota slot.
func (s *Store) DeleteSession(_ context.Context, tenant, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	byID := s.sessions[tenant]
	if _, ok := byID[id]; !ok {
		return notFound(id)
	}
	delete(byID, id)
	delete(s.state, stateKey{tenant, id})
	if len(byID) == 0 {
		delete(s.sessions, tenant)
	}
	return nil
}

// ListSessions returns copies of a tenant's sessions, oldest first (ties by id).
func (s *Store) ListSessions(_ context.Context, tenant string) ([]*workspace.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*workspace.Session, 0, len(s.sessions[tenant]))
	for _, sess := range s.sessions[tenant] {
		out = append(out, clone(sess))
	}
	slices.SortFunc(out, func(a, b *workspace.Session) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

// AllSessions returns copies of every tenant's sessions, in no particular order.
func (s *Store) AllSessions(context.Context) ([]*workspace.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*workspace.Session
	for _, byID := range s.sessions {
		for _, sess := range byID {
			out = append(out, clone(sess))
		}
	}
	return out, nil
}

// validate holds memstore to the rules redisstore's key schema needs, so that both
// stores accept the same sessions: a tenant is non-empty without ':' or '/', an id is
// non-empty.
func validate(sess *workspace.Session) error {
	switch {
	case sess.Tenant == "" || strings.ContainsAny(sess.Tenant, ":/"):
		return fmt.Errorf("%w: session tenant %q: must be non-empty without ':' or '/'", workspace.ErrInvalid, sess.Tenant)
	case sess.ID == "":
		return fmt.Errorf("%w: session id is empty", workspace.ErrInvalid)
	}
	return nil
}

func notFound(id string) error {
	return fmt.Errorf("session %q: %w", id, workspace.ErrNotFound)
}

// clone copies a session so that neither the caller nor the store sees the other's
// later changes.
func clone(s *workspace.Session) *workspace.Session {
	c := *s
	c.Labels = maps.Clone(s.Labels)
	c.Env = maps.Clone(s.Env)
	c.Secrets = slices.Clone(s.Secrets)
	return &c
}
