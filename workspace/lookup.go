package workspace

import (
	"context"
	"fmt"
	"time"
)

// session returns caller's session id, ready for calls, and renews its idle TTL. An
// expired session, or one of another tenant, is ErrNotFound like a missing one.
func (s *Service) session(ctx context.Context, caller Caller, id string) (*Session, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: session id is empty", ErrInvalid)
	}
	sess, err := s.cfg.Store.GetSession(ctx, caller.Tenant, id)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	if sess.Expired(now) {
		return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if sess.State != StateReady {
		return nil, fmt.Errorf("%w: session %s is %s", ErrUnavailable, id, sess.State)
	}
	s.touch(ctx, sess, now)
	return sess, nil
}

// touch renews the idle TTL, writing to the store at most once per tenth of the TTL.
func (s *Service) touch(ctx context.Context, sess *Session, now time.Time) {
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
	}
	sess.LastUsed = now
}
