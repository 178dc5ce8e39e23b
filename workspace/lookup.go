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
//
// The record comes from the session cache when it holds it (cached is then true),
// else from the store.
func (s *Service) session(ctx context.Context, caller Caller, id string) (sess *Session, cached bool, err error) {
	if id == "" {
		return nil, false, fmt.Errorf("%w: session id is empty", ErrInvalid)
	}
	sess, cached = s.sessions.get(caller.Tenant, id)
	if !cached {
		if sess, err = s.readSession(ctx, caller.Tenant, id); err != nil {
			return nil, false, err
		}
	}
	if sess.Asleep() && !sess.Expired(s.cfg.Now()) {
		// Suspended or archived: the call wakes it, and then goes on as if it never slept.
		if sess, err = s.wake(ctx, sess); err == nil {
			s.own(sess)
		}
		return sess, false, err
	}
	if sess, err = s.usable(sess, id); err == nil {
		s.own(sess)
	}
	return sess, cached, err
}

// readSession reads a session from the store, adopting it when the store does not
// know it but its container lives, and caches it.
func (s *Service) readSession(ctx context.Context, tenant, id string) (*Session, error) {
	gen := s.sessions.generation()
	sess, err := s.cfg.Store.GetSession(ctx, tenant, id)
	if errors.Is(err, ErrNotFound) {
		if s.adoptByID(ctx, tenant, id) {
			gen = s.sessions.generation()
			sess, err = s.cfg.Store.GetSession(ctx, tenant, id)
		}
	}
	if err != nil {
		return nil, err
	}
	s.sessions.put(gen, sess)
	return sess, nil
}

// usable checks that a session may take calls now: not expired, ready.
func (s *Service) usable(sess *Session, id string) (*Session, error) {
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

// recheck reads the store again after a call on a cached record failed on its
// sandbox: the session may have been deleted or expired a moment ago (its sandbox
// removed with it) on another replica, whose announcement has not arrived yet. Then
// the call answers ErrNotFound, as it would have without the cache.
func (s *Service) recheck(ctx context.Context, caller Caller, id string, err error) error {
	if !errors.Is(err, ErrSessionLost) && !errors.Is(err, ErrUnavailable) {
		return err
	}
	s.sessions.forget(caller.Tenant, id)
	sess, gerr := s.cfg.Store.GetSession(ctx, caller.Tenant, id)
	if errors.Is(gerr, ErrNotFound) || gerr == nil && sess.Expired(s.cfg.Now()) {
		return fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	if gerr == nil && sess.Asleep() {
		// Suspended or archived while the call ran: a retry wakes it.
		return fmt.Errorf("%w: session %s was put to sleep while the call ran: retry it", ErrUnavailable, id)
	}
	return err
}

// noteLost records a session whose call found its sandbox removed, so that every later
// call, and GET, says it is lost.
func (s *Service) noteLost(ctx context.Context, sess *Session, err error) {
	if !errors.Is(err, ErrSessionLost) || sess.State == StateLost {
		return
	}
	// The record the call had may be stale: a suspend or an archive since took the
	// sandbox away on purpose. Only a session the store still has ready, on this same
	// sandbox, lost it.
	cur, err2 := s.cfg.Store.GetSession(context.WithoutCancel(ctx), sess.Tenant, sess.ID)
	if err2 != nil || cur.State != StateReady || cur.Sandbox != sess.Sandbox {
		return
	}
	s.log.Warn("session lost its sandbox", "session", sess.ID, "tenant", sess.Tenant, "sandbox", sess.Sandbox)
	s.forgetAgent(sess.Sandbox)
	lost := *cur
	lost.State = StateLost
	if err := s.cfg.Store.UpdateSession(context.WithoutCancel(ctx), &lost); err != nil {
		s.log.Warn("mark session lost", "session", sess.ID, "err", err)
		return
	}
	s.obs.Reaped("lost")
}
