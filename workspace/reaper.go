package workspace

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	s.idleSuspend(ctx, all)
	s.reapSnapshots(ctx)
	return n, nil
}

// Reconcile compares the containers cws manages with the store. The containers'
// labels are the ground truth of what exists:
//   - a live container of a served tenant whose session the store does not know (the
//     store lost its data, or this is a restarted single-node cws) is adopted: its
//     session and its default-session claim are restored in this same pass. Replicas
//     racing to adopt one container agree through the store (CreateSession conflicts).
//   - a container marked deleted, or past its expiry, is removed;
//   - a stopped container of a live session is started again;
//   - a session whose container is gone is marked lost (calls then say so), never
//     recreated under the same id.
//
// Containers of tenants this Service does not serve are left alone: they belong to
// another cws sharing the engine.
func (s *Service) Reconcile(ctx context.Context) error {
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
		if _, ok := s.cfg.Tenants.Policy(b.Tenant); !ok {
			// Another cws on the same engine (other tenants file, other store) owns
			// it: neither adopt nor remove what this one does not serve.
			continue
		}
		if !b.Deleted {
			seen[b.Session] = true
		}
		sess, ok := known[b.Session]
		switch {
		case b.Deleted:
			s.removeOrphan(ctx, b, "deleted")
		case ok && sess.Sandbox != "" && sess.Sandbox != b.ID:
			s.log.Warn("two sandboxes claim one session; leaving the stray one alone", "session", b.Session, "sandbox", b.ID)
		case ok && sess.State == StateArchived:
			// A sandbox left by an archive or a wake that crashed half-way. A wake under
			// way holds the session's claim; one that ended since the listing made the
			// session ready on this very sandbox: both are left alone.
			_, _ = s.underClaim(ctx, sess.Tenant, sess.ID, func(ctx context.Context, cur *Session) error {
				if cur.State == StateArchived && cur.Sandbox != b.ID {
					s.removeOrphan(ctx, b, "its session is archived")
				}
				return nil
			})
		case ok && sess.State == StateSuspended:
			if b.Running && now.Sub(sess.SuspendedAt) > lostAfter {
				// A suspend that crashed after its record: finish it, unless the session
				// woke since the listing.
				_, _ = s.underClaim(ctx, sess.Tenant, sess.ID, func(ctx context.Context, cur *Session) error {
					if cur.State == StateSuspended && cur.Sandbox == b.ID {
						s.stopQuietly(ctx, cur)
						s.log.Info("stopped the sandbox of a suspended session", "session", sess.ID, "sandbox", b.ID)
					}
					return nil
				})
			}
		case ok && sess.State == StateLost:
			// It was missing from an earlier listing only: the session is whole again.
			sess.State = StateReady
			_ = s.cfg.Store.UpdateSession(ctx, sess)
		case ok:
			if _, waking := s.wakeStarts.Load(b.ID); !b.Running && sess.State == StateReady && !sess.Expired(now) && !waking {
				s.restart(ctx, b, "reconcile") // (a wake recorded it ready and is starting it)
			}
		case adoptable(b, now):
			if err := s.adopt(ctx, b); err != nil {
				s.log.Warn("adopt sandbox", "sandbox", b.ID, "session", b.Session, "err", err)
			}
		default:
			s.removeOrphan(ctx, b, "expired or unlabelled")
		}
	}
	for _, sess := range all {
		if seen[sess.ID] || now.Sub(sess.CreatedAt) < lostAfter || sess.State == StateLost || sess.State == StateArchived {
			continue
		}
		if sess.State == StateCreating || sess.State == StateFailed {
			// A creation that never finished (its replica crashed): nothing to lose.
			_ = s.cfg.Store.DeleteSession(ctx, sess.Tenant, sess.ID)
			_ = s.cfg.Store.Release(ctx, defaultKey(sess.Tenant, sess.Subject), sess.ID)
			continue
		}
		// The container was removed behind cws's back: its files are gone. Say so on
		// every call until the session expires, rather than hand out a new empty one.
		s.log.Warn("session lost its sandbox", "session", sess.ID, "tenant", sess.Tenant, "sandbox", sess.Sandbox)
		sess.State = StateLost
		if err := s.cfg.Store.UpdateSession(ctx, sess); err != nil && !errors.Is(err, ErrNotFound) {
			s.log.Warn("mark session lost", "session", sess.ID, "err", err)
			continue
		}
		s.forgetAgent(sess.Sandbox)
		s.obs.Reaped("lost")
	}
	if vs, ok := s.cfg.Sandboxes.(volumeSweeper); ok {
		serves := func(tenant string) bool { _, ok := s.cfg.Tenants.Policy(tenant); return ok }
		if removed, err := vs.RemoveOrphanVolumes(ctx, sandbox.OrphanVolumeAge, serves); err != nil {
			s.log.Warn("remove orphan workspace volumes", "err", err)
		} else {
			for range removed {
				s.obs.Reaped("orphan_volume")
			}
		}
	}
	s.reconcileArchives(ctx, known)
	s.countActive(ctx)
	return nil
}

// volumeSweeper is what a Sandboxes may also do: remove the workspace volumes whose
// container is gone (a lost session's files, which nothing can reach again).
type volumeSweeper interface {
	RemoveOrphanVolumes(ctx context.Context, olderThan time.Duration, serves func(tenant string) bool) ([]string, error)
}

// adoptable reports whether a container the store does not know may be adopted: it is
// labelled with a session and tenant, not marked deleted, and not past its expiry.
func adoptable(b sandbox.Info, now time.Time) bool {
	return b.Session != "" && b.Tenant != "" && !b.Deleted && (b.Expires.IsZero() || now.Before(b.Expires))
}

func (s *Service) removeOrphan(ctx context.Context, b sandbox.Info, why string) {
	s.endAgent(b.ID)
	if err := s.cfg.Sandboxes.Remove(ctx, b.ID); err != nil {
		s.log.Warn("remove orphan sandbox", "sandbox", b.ID, "err", err)
		return
	}
	s.obs.Reaped("orphan")
	s.log.Info("removed orphan sandbox", "sandbox", b.ID, "session", b.Session, "why", why)
}

// restart starts a stopped sandbox of a live session again; by says who noticed.
func (s *Service) restart(ctx context.Context, b sandbox.Info, by string) {
	s.forgetAgent(b.ID)
	if err := s.cfg.Sandboxes.Start(ctx, b.ID); err != nil {
		s.log.Warn("start stopped sandbox", "sandbox", b.ID, "session", b.Session, "err", err)
		return
	}
	s.fobs.Restarted(by)
	s.log.Info("started stopped sandbox again", "sandbox", b.ID, "session", b.Session)
}

// adopt takes a container back into the store from its labels: its session, and for
// a default session the caller's default-session claim. Only the replica whose
// CreateSession wins counts and logs the adoption; the others find it done.
func (s *Service) adopt(ctx context.Context, b sandbox.Info) error {
	if !adoptable(b, s.cfg.Now()) {
		return fmt.Errorf("%w: sandbox %s is not adoptable", ErrNotFound, b.ID)
	}
	now := s.cfg.Now().UTC()
	sess := &Session{ID: b.Session, Tenant: b.Tenant, Subject: b.Subject, Image: b.Image, Sandbox: b.ID, State: StateReady,
		CreatedAt: now, LastUsed: now, IdleTTL: s.cfg.DefaultIdleTTL, ExpiresAt: b.Expires}
	_, suspends := s.cfg.Sandboxes.(Suspender)
	if !b.Running && suspends {
		// A stopped sandbox with its disk is a suspended session: the next call wakes it.
		sess.State, sess.SuspendedAt = StateSuspended, now
	}
	if tp, ok := s.cfg.Tenants.Policy(b.Tenant); ok && tp.SessionTTL > 0 {
		sess.IdleTTL = tp.SessionTTL.Std()
	}
	err := s.cfg.Store.CreateSession(ctx, sess, 0)
	won := err == nil
	if err != nil && !errors.Is(err, ErrConflict) {
		return err
	}
	if won {
		// A deletion may have marked or removed the container since it was listed
		// (the mark comes before the store forgets the session): undo, never resurrect.
		now, err := s.cfg.Sandboxes.List(ctx, map[string]string{sandbox.LabelSession: b.Session})
		if err != nil || !slices.ContainsFunc(now, func(n sandbox.Info) bool { return n.ID == b.ID && !n.Deleted }) {
			_ = s.cfg.Store.DeleteSession(context.WithoutCancel(ctx), sess.Tenant, sess.ID)
			return fmt.Errorf("%w: sandbox %s is being removed", ErrNotFound, b.ID)
		}
	}
	if b.Default && sess.Subject != "" {
		if _, _, err := s.cfg.Store.Claim(ctx, defaultKey(sess.Tenant, sess.Subject), sess.ID, 0); err != nil {
			return err
		}
	}
	if !b.Running && sess.State == StateReady {
		s.restart(ctx, b, "reconcile")
	}
	if won {
		s.fobs.Adopted()
		s.log.Warn("adopted a sandbox the store did not know (did the store lose its data?)",
			"sandbox", b.ID, "session", b.Session, "tenant", b.Tenant, "default", b.Default)
	}
	return nil
}

// RunReaper reaps and reconciles every interval until ctx ends.
func (s *Service) RunReaper(ctx context.Context, every time.Duration) {
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
			if err := s.Reconcile(ctx); err != nil {
				s.log.Warn("reconcile", "err", err)
			}
		}
	}
}
