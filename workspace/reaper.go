package workspace

import (
	"context"
	"errors"
	"time"

	"github.com/cwsdev/cws/sandbox"
)

// lostAfter is how old a session must be before a missing container counts as lost
// (younger ones may still be starting on another replica).
const lostAfter = 2 * time.Minute

// Reap removes expired sessions with their containers and volumes. It returns how
// many it removed.
func (s *Service) Reap(ctx context.Context) (int, error) {
	all, err := s.cfg.Store.AllSessions(ctx)
	if err != nil {
		return 0, err
	}
	now, n := s.cfg.Now(), 0
	for _, sess := range all {
		if !sess.Expired(now) {
			continue
		}
		if err := s.remove(ctx, sess); err != nil {
			s.log.Warn("reap expired session", "session", sess.ID, "err", err)
			continue
		}
		n++
		s.obs.Reaped("expired")
		s.log.Info("reaped expired session", "session", sess.ID, "tenant", sess.Tenant)
	}
	return n, nil
}

// Reconcile compares the containers cws manages with the store. A container whose
// session the store does not know is an orphan: removed, or, with adopt (the store is
// memory and was lost on restart), taken back into the store from its labels. A ready
// session whose container is gone is removed. Containers of tenants this Service does
// not serve are left alone: they belong to another cws sharing the engine.
func (s *Service) Reconcile(ctx context.Context, adopt bool) error {
	boxes, err := s.cfg.Sandboxes.List(ctx, nil)
	if err != nil {
		return err
	}
	all, err := s.cfg.Store.AllSessions(ctx)
	if err != nil {
		return err
	}
	known := map[string]*Session{}
	for _, sess := range all {
		known[sess.ID] = sess
	}
	seen := map[string]bool{}
	now := s.cfg.Now()
	for _, b := range boxes {
		seen[b.Session] = true
		if _, ok := known[b.Session]; ok {
			continue
		}
		if _, ok := s.cfg.Tenants.Policy(b.Tenant); !ok {
			// Another cws on the same engine (other tenants file, other store) owns
			// it: neither adopt nor remove what this one does not serve.
			continue
		}
		if adopt && b.Session != "" && b.Tenant != "" && (b.Expires.IsZero() || now.Before(b.Expires)) {
			if err := s.adopt(ctx, b); err == nil {
				continue
			}
		}
		if err := s.cfg.Sandboxes.Remove(ctx, b.ID); err != nil {
			s.log.Warn("remove orphan sandbox", "sandbox", b.ID, "err", err)
			continue
		}
		s.obs.Reaped("orphan")
		s.log.Info("removed orphan sandbox", "sandbox", b.ID, "session", b.Session)
	}
	for _, sess := range all {
		if seen[sess.ID] || now.Sub(sess.CreatedAt) < lostAfter {
			continue
		}
		s.log.Warn("session lost its sandbox, removing it", "session", sess.ID)
		_ = s.cfg.Store.DeleteSession(ctx, sess.Tenant, sess.ID)
		_ = s.cfg.Store.Release(ctx, defaultKey(sess.Tenant, sess.Subject), sess.ID)
		s.obs.Reaped("lost")
	}
	s.countActive(ctx)
	return nil
}

func (s *Service) adopt(ctx context.Context, b sandbox.Info) error {
	now := s.cfg.Now().UTC()
	sess := &Session{ID: b.Session, Tenant: b.Tenant, Subject: b.Subject, Image: b.Image, Sandbox: b.ID, State: StateReady,
		CreatedAt: now, LastUsed: now, IdleTTL: s.cfg.DefaultIdleTTL, ExpiresAt: b.Expires}
	if tp, ok := s.cfg.Tenants.Policy(b.Tenant); ok && tp.SessionTTL > 0 {
		sess.IdleTTL = tp.SessionTTL.Std()
	}
	err := s.cfg.Store.CreateSession(ctx, sess, 0)
	if err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	if sess.Subject != "" {
		_, _, _ = s.cfg.Store.Claim(ctx, defaultKey(sess.Tenant, sess.Subject), sess.ID, 0)
	}
	s.log.Info("adopted sandbox", "sandbox", b.ID, "session", b.Session, "tenant", b.Tenant)
	return nil
}

// RunReaper reaps and reconciles every interval until ctx ends.
func (s *Service) RunReaper(ctx context.Context, every time.Duration, adopt bool) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Reap(ctx); err != nil {
				s.log.Warn("reaper", "err", err)
			}
			if err := s.Reconcile(ctx, adopt); err != nil {
				s.log.Warn("reconcile", "err", err)
			}
		}
	}
}
