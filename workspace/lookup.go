package workspace

import (
	"context"
	"errors"
	"fmt"

	"github.com/cwsdev/cws/sandbox"
)

// session returns caller's session id, ready for calls. An expired session, or one of
// another tenant, is ErrNotFound like a missing one; a session whose sandbox was
// removed is ErrSessionLost. A session the store does not know but whose container
// lives (the store lost its data) is adopted on the spot. It does not renew the idle
// TTL: only a call that succeeds does (renew).
func (s *Service) session(ctx context.Context, caller Caller, id string) (*Session, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: session id is empty", ErrInvalid)
	}
	sess, err := s.cfg.Store.GetSession(ctx, caller.Tenant, id)
	if errors.Is(err, ErrNotFound) {
		if s.adoptByID(ctx, caller.Tenant, id) {
			sess, err = s.cfg.Store.GetSession(ctx, caller.Tenant, id)
		}
	}
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	if sess.Expired(now) {
		return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	switch sess.State {
	case StateReady:
	case StateLost:
		return nil, fmt.Errorf("session %s: %w", id, ErrSessionLost)
	default:
		return nil, fmt.Errorf("%w: session %s is %s", ErrUnavailable, id, sess.State)
	}
	return sess, nil
}

// adoptByID looks on the engine for a live container of tenant's session id that the
// store does not know, and adopts it. It reports whether it did (or another replica
// had).
func (s *Service) adoptByID(ctx context.Context, tenant, id string) bool {
	if _, ok := s.cfg.Tenants.Policy(tenant); !ok || !validSessionID(id) {
		return false
	}
	boxes, err := s.cfg.Sandboxes.List(ctx, map[string]string{sandbox.LabelSession: id, sandbox.LabelTenant: tenant})
	if err != nil {
		return false
	}
	for _, b := range boxes {
		if err := s.adopt(ctx, b); err == nil {
			return true
		}
	}
	return false
}

// validSessionID keeps lookups of junk ids off the engine.
func validSessionID(id string) bool {
	if len(id) < 3 || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// renew renews the idle TTL after a call that succeeded, writing to the store at most
// once per tenth of the TTL. A failed call never renews: a broken session is reaped.
func (s *Service) renew(ctx context.Context, sess *Session) {
	now := s.cfg.Now()
	every := sess.IdleTTL / 10
	s.mu.Lock()
	last := s.touched[sess.ID]
	due := now.Sub(last) >= every
	if due {
		s.touched[sess.ID] = now
	}
	s.mu.Unlock()
	if !due {
		return
	}
	if err := s.cfg.Store.TouchSession(ctx, sess.Tenant, sess.ID, now); err != nil {
		s.log.Warn("renew session", "session", sess.ID, "err", err)
		s.mu.Lock()
		delete(s.touched, sess.ID)
		s.mu.Unlock()
	}
	sess.LastUsed = now
}

// noteLost records a session whose call found its sandbox removed, so that every later
// call, and GET, says it is lost.
func (s *Service) noteLost(ctx context.Context, sess *Session, err error) {
	if !errors.Is(err, ErrSessionLost) || sess.State == StateLost {
		return
	}
	s.log.Warn("session lost its sandbox", "session", sess.ID, "tenant", sess.Tenant, "sandbox", sess.Sandbox)
	s.forgetAgent(sess.Sandbox)
	lost := *sess
	lost.State = StateLost
	if err := s.cfg.Store.UpdateSession(context.WithoutCancel(ctx), &lost); err != nil {
		s.log.Warn("mark session lost", "session", sess.ID, "err", err)
		return
	}
	s.obs.Reaped("lost")
}
