package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/workspace/policy"
)

// Snapshot is a snapshot as the service hands it out.
type Snapshot = snapshot.Snapshot

// maxSnapshotName bounds a snapshot's name.
const maxSnapshotName = 200

// CreateSnapshot takes a snapshot of caller's session id: its whole workspace (.git and
// denied paths included: they never leave the tenant), its image, env and labels. An
// asleep session is woken first. The tenant's maxSnapshots and maxSnapshotBytes hold;
// snapshotTTL sets its expiry.
func (s *Service) CreateSnapshot(ctx context.Context, caller Caller, id, name string) (*Snapshot, error) {
	if err := caller.need(auth.ScopeSessions, "taking a snapshot"); err != nil {
		return nil, err
	}
	if len(name) > maxSnapshotName || strings.ContainsAny(name, "\x00\n\r") {
		return nil, invalidf("name", "name: at most %d characters, on one line", maxSnapshotName)
	}
	if s.cfg.Snapshots == nil {
		return nil, errNoSnapshotStore
	}
	tp, ok := s.cfg.Tenants.Policy(caller.Tenant)
	if !ok {
		return nil, fmt.Errorf("%w: unknown tenant %q", ErrForbidden, caller.Tenant)
	}
	sess, _, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	limit, err := s.snapshotRoom(ctx, caller.Tenant, tp)
	if err != nil {
		return nil, err
	}
	meta := snapshot.Snapshot{ID: snapshot.NewID(), Name: name, Kind: snapshot.KindSnapshot, CreatedAt: s.cfg.Now().UTC()}
	if ttl := tp.SnapshotTTL.Std(); ttl > 0 {
		meta.ExpiresAt = meta.CreatedAt.Add(ttl)
	}
	snap, err := s.capture(ctx, sess, meta, limit)
	s.actionAudit(caller, id, "snapshot", meta.ID, err)
	if errors.Is(err, snapshot.ErrTooLarge) {
		return nil, &policy.Violation{Err: ErrQuota, Rule: "maxSnapshotBytes",
			Detail: fmt.Sprintf("the tenant's snapshots may hold %d bytes of files together (maxSnapshotBytes), and this workspace does not fit in what is left: delete a snapshot first", tp.MaxSnapshotBytes)}
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", id, err)
	}
	s.log.Info("snapshot taken", "snapshot", snap.ID, "session", id, "tenant", caller.Tenant, "bytes", snap.Bytes, "files", snap.Files, "stored", snap.Stored)
	return snap, nil
}

// snapshotRoom checks the tenant's snapshot quotas and returns the bytes a new one may
// hold (0: no limit).
func (s *Service) snapshotRoom(ctx context.Context, tenant string, tp *policy.Policy) (int64, error) {
	if tp.MaxSnapshots == 0 && tp.MaxSnapshotBytes == 0 {
		return 0, nil
	}
	have, err := s.cfg.Snapshots.List(ctx, tenant, snapshot.KindSnapshot)
	if err != nil {
		return 0, fmt.Errorf("%w: snapshot store: %v", ErrUnavailable, err)
	}
	if tp.MaxSnapshots > 0 && len(have) >= tp.MaxSnapshots {
		return 0, &policy.Violation{Err: ErrQuota, Rule: "maxSnapshots",
			Detail: fmt.Sprintf("the tenant may keep %d snapshots (maxSnapshots) and has %d: delete one first", tp.MaxSnapshots, len(have))}
	}
	if tp.MaxSnapshotBytes == 0 {
		return 0, nil
	}
	var used int64
	for _, h := range have {
		used += h.Bytes
	}
	room := tp.MaxSnapshotBytes - used
	if room <= 0 {
		return 0, &policy.Violation{Err: ErrQuota, Rule: "maxSnapshotBytes",
			Detail: fmt.Sprintf("the tenant's snapshots hold %d of the %d bytes maxSnapshotBytes allows: delete one first", used, tp.MaxSnapshotBytes)}
	}
	return room, nil
}

// ListSnapshots lists caller's tenant's snapshots, oldest first.
func (s *Service) ListSnapshots(ctx context.Context, caller Caller) ([]*Snapshot, error) {
	if err := caller.need(auth.ScopeSessions, "listing snapshots"); err != nil {
		return nil, err
	}
	if s.cfg.Snapshots == nil {
		return nil, errNoSnapshotStore
	}
	all, err := s.cfg.Snapshots.List(ctx, caller.Tenant, snapshot.KindSnapshot)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot store: %v", ErrUnavailable, err)
	}
	now := s.cfg.Now()
	out := all[:0]
	for _, m := range all {
		if m.ExpiresAt.IsZero() || now.Before(m.ExpiresAt) {
			out = append(out, m)
		}
	}
	return out, nil
}

// checkSnapshotID refuses ids no snapshot can have (400), before any lookup.
func checkSnapshotID(id string) error {
	if !snapshot.ValidID(id) {
		shown := id
		if len(shown) > 64 {
			shown = shown[:64] + "…"
		}
		return invalidf("snapshot", "snapshot id %q is not a snapshot id (snap- and 20 letters and digits)", shown)
	}
	return nil
}

// GetSnapshot returns one of caller's tenant's snapshots; another tenant's is
// ErrNotFound, exactly like a missing one.
func (s *Service) GetSnapshot(ctx context.Context, caller Caller, id string) (*Snapshot, error) {
	if err := caller.need(auth.ScopeSessions, "reading a snapshot"); err != nil {
		return nil, err
	}
	return s.getSnapshot(ctx, caller.Tenant, id)
}

func (s *Service) getSnapshot(ctx context.Context, tenant, id string) (*Snapshot, error) {
	if err := checkSnapshotID(id); err != nil {
		return nil, err
	}
	if s.cfg.Snapshots == nil {
		return nil, errNoSnapshotStore
	}
	m, err := s.cfg.Snapshots.Get(ctx, tenant, id)
	if errors.Is(err, snapshot.ErrNotFound) || err == nil && (m.Kind != snapshot.KindSnapshot || !m.ExpiresAt.IsZero() && !s.cfg.Now().Before(m.ExpiresAt)) {
		return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot store: %v", ErrUnavailable, err)
	}
	return m, nil
}

// DeleteSnapshot removes one of caller's tenant's snapshots. Its contents are
// collected later, unless another snapshot shares them.
func (s *Service) DeleteSnapshot(ctx context.Context, caller Caller, id string) error {
	if err := caller.need(auth.ScopeSessions, "deleting a snapshot"); err != nil {
		return err
	}
	if _, err := s.getSnapshot(ctx, caller.Tenant, id); err != nil {
		return err
	}
	if err := s.cfg.Snapshots.Delete(ctx, caller.Tenant, id); err != nil {
		if errors.Is(err, snapshot.ErrNotFound) {
			return fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
		}
		return fmt.Errorf("%w: snapshot store: %v", ErrUnavailable, err)
	}
	s.log.Info("snapshot deleted", "snapshot", id, "tenant", caller.Tenant)
	return nil
}

// restoreSnapshot fills a new session's workspace from one of its tenant's snapshots.
func (s *Service) restoreSnapshot(ctx context.Context, sess *Session, id string) error {
	notes, err := s.restore(ctx, s.readArchive(ctx, sess.Tenant, id, func() {}), s.agentFor(sess.Sandbox))
	sess.Notes = notes
	return err
}

// maxForkSpool bounds what a fork spools on cws's host: the workspace's data, as the
// exact capture sends it (a sparse file's holes cost nothing).
const maxForkSpool = maxUpload

// boundedWriter writes up to max bytes to w, then fails.
type boundedWriter struct {
	w    io.Writer
	max  int64
	n    int64
	over bool
}

func (b *boundedWriter) Write(p []byte) (int, error) {
	if b.n+int64(len(p)) > b.max {
		b.over = true
		return 0, errors.New("fork spool full")
	}
	n, err := b.w.Write(p)
	b.n += int64(n)
	return n, err
}

// MaxFork is the most sessions one fork makes.
const MaxFork = 16

// ForkResult is what a fork made: the sessions, and an error for each one it could
// not make.
type ForkResult struct {
	Sessions []*Session
	Errors   []error
}

// Fork makes count new sessions, each with the source session's files at one instant
// (read once, while its writes wait: quiesce), its image, env and labels. Each succeeds
// or fails on its own; the source goes on unchanged, and a write in one fork is seen in
// no other. They come from the warm pool where it has sandboxes.
func (s *Service) Fork(ctx context.Context, caller Caller, id string, count int) (*ForkResult, error) {
	if err := caller.need(auth.ScopeSessions, "forking a session"); err != nil {
		return nil, err
	}
	if count < 1 || count > MaxFork {
		return nil, invalidf("count", "count must be between 1 and %d, got %d", MaxFork, count)
	}
	start := time.Now()
	src, _, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	// The tree, once, into a temporary file: each fork restores from it in parallel.
	f, err := os.CreateTemp("", "cws-fork-*.tar")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	unlock := s.quiesce(src.ID)
	g := wholeTree
	spool := &boundedWriter{w: f, max: maxForkSpool}
	_, err = s.agentFor(src.Sandbox).TarOut(ctx, agent.TarOutArgs{Path: ".", Guard: &g, Exact: true}, spool)
	unlock()
	if spool.over {
		return nil, &policy.Violation{Err: ErrTooLarge, Rule: "forkSize",
			Detail: fmt.Sprintf("fork %s: the workspace holds more than %d bytes of file data, more than a fork spools on cws's host: snapshot it and create sessions from the snapshot instead", id, int64(maxForkSpool))}
	}
	if err != nil {
		return nil, fmt.Errorf("fork %s: read its workspace: %w", id, mapAgentError(err))
	}
	res := &ForkResult{Sessions: make([]*Session, count), Errors: make([]error, count)}
	var wg sync.WaitGroup
	for i := range count {
		wg.Go(func() {
			sess, err := s.CreateSession(ctx, caller, CreateRequest{Image: src.Image, Env: src.Env, Labels: src.Labels,
				restore: func(ctx context.Context, sess *Session) error {
					a := s.agentFor(sess.Sandbox)
					g := wholeTree
					_, err := a.TarIn(ctx, agent.TarInArgs{Path: ".", Guard: &g, Exact: true}, io.NewSectionReader(f, 0, 1<<62))
					if err != nil {
						kind := ErrUnavailable
						if errors.Is(mapAgentError(err), ErrTooLarge) {
							kind = ErrTooLarge // a full disk fails the same way again
						}
						return fmt.Errorf("%w: its files could not be written back: %v", kind, restoreError(err))
					}
					return nil
				}})
			res.Sessions[i], res.Errors[i] = sess, err
		})
	}
	wg.Wait()
	made, forks := 0, []string{}
	var failed error // the first fork's that failed
	for i := range res.Sessions {
		if res.Errors[i] == nil {
			made++
			forks = append(forks, res.Sessions[i].ID)
		} else if failed == nil {
			failed = res.Errors[i]
		}
	}
	s.actionAudit(caller, id, "fork", strings.Join(forks, " "), failed)
	lifecycle(s.obs).Forked(made, time.Since(start))
	s.log.Info("session forked", "session", id, "tenant", caller.Tenant, "asked", count, "made", made, "took", time.Since(start).Round(time.Millisecond))
	return res, nil
}

// collectEvery is how often the reaper collects the snapshot store's unused contents.
const collectEvery = time.Hour

// collectGrace keeps contents written this recently from a collection.
const collectGrace = time.Hour

// reapSnapshots removes expired snapshots, and now and then collects the contents no
// snapshot uses.
func (s *Service) reapSnapshots(ctx context.Context) {
	if s.cfg.Snapshots == nil {
		return
	}
	tenants, err := s.cfg.Snapshots.Tenants(ctx)
	if err != nil {
		s.log.Warn("snapshot store: list tenants", "err", err)
		return
	}
	now := s.cfg.Now()
	collect := now.Sub(s.lastCollect.Load().(time.Time)) >= collectEvery
	for _, tenant := range tenants {
		if _, ok := s.cfg.Tenants.Policy(tenant); !ok {
			continue // another cws's, sharing the store
		}
		all, err := s.cfg.Snapshots.List(ctx, tenant, snapshot.KindSnapshot)
		if err != nil {
			continue
		}
		for _, m := range all {
			if !m.ExpiresAt.IsZero() && !now.Before(m.ExpiresAt) {
				if err := s.cfg.Snapshots.Delete(ctx, tenant, m.ID); err == nil {
					s.log.Info("snapshot expired", "snapshot", m.ID, "tenant", tenant)
				}
			}
		}
		if collect {
			if n, b, err := s.cfg.Snapshots.Collect(ctx, tenant, collectGrace); err != nil {
				s.log.Warn("snapshot store: collect", "tenant", tenant, "err", err)
			} else if n > 0 {
				s.log.Info("snapshot store: collected unused contents", "tenant", tenant, "blobs", n, "bytes", b)
			}
		}
	}
	if collect {
		s.lastCollect.Store(now)
	}
}

// staleArchive is how old an archive no session points at must be before it goes
// (younger ones may belong to an archive or a wake under way).
const staleArchive = 10 * time.Minute

// reconcileArchives adopts archived sessions the store forgot (from their archives'
// records in the snapshot store) and removes archives no session needs any more (a
// wake that finished, an archive that did not).
func (s *Service) reconcileArchives(ctx context.Context, known map[string]*Session) {
	if s.cfg.Snapshots == nil {
		return
	}
	tenants, err := s.cfg.Snapshots.Tenants(ctx)
	if err != nil {
		return
	}
	now := s.cfg.Now()
	for _, tenant := range tenants {
		tp, ok := s.cfg.Tenants.Policy(tenant)
		if !ok {
			continue
		}
		archives, err := s.cfg.Snapshots.List(ctx, tenant, snapshot.KindArchive)
		if err != nil {
			continue
		}
		for _, a := range archives {
			sess, ok := known[a.Session]
			ts := tombstoneNone
			if !ok {
				ts = s.tombstone(ctx, tenant, a.Session)
			}
			switch {
			case ok && sess.Tenant == tenant && sess.State == StateArchived && sess.Archive == a.ID:
				// In use.
			case ok:
				// An archive its session no longer points at (a wake finished, an
				// archive failed half-way): removed once no archive or wake can be
				// under way with it.
				// The listing of sessions is older than the listing of archives: an archive
				// that finished meanwhile is its session's only copy. Judge again from the
				// session as it is now, under its claim (no archive or wake under way).
				if now.Sub(a.CreatedAt) >= staleArchive {
					_, _ = s.underClaim(ctx, tenant, a.Session, func(ctx context.Context, cur *Session) error {
						if cur.State == StateArchived && cur.Archive == a.ID {
							return nil
						}
						_ = s.cfg.Snapshots.Delete(ctx, tenant, a.ID)
						s.log.Info("removed a stale archive", "archive", a.ID, "session", a.Session, "tenant", tenant)
						return nil
					})
				}
			case ts == tombstoneSet:
				_ = s.cfg.Snapshots.Delete(ctx, tenant, a.ID)
				s.log.Info("removed the stray archive of a deleted session", "archive", a.ID, "session", a.Session, "tenant", tenant)
			case ts == tombstoneUnsure:
				// The store did not answer: neither adopt nor remove, this time.
			default:
				// The store lost the session: its archive is the ground truth.
				sess := &Session{ID: a.Session, Tenant: tenant, Subject: a.Subject, Image: a.Image, Labels: a.Labels, Env: a.Env,
					State: StateArchived, Archive: a.ID, CreatedAt: a.CreatedAt, LastUsed: now.UTC(), SuspendedAt: a.CreatedAt,
					IdleTTL: s.cfg.DefaultIdleTTL, ExpiresAt: a.SessionExpires}
				if tp.SessionTTL > 0 {
					sess.IdleTTL = tp.SessionTTL.Std()
				}
				if err := s.cfg.Store.CreateSession(ctx, sess, 0); err != nil {
					s.log.Warn("adopt an archived session", "session", a.Session, "tenant", tenant, "err", err)
				} else {
					s.fobs.Adopted()
					s.log.Warn("adopted an archived session the store did not know", "session", a.Session, "tenant", tenant, "archive", a.ID)
				}
			}
		}
	}
}

// What tombstone finds.
const (
	tombstoneNone   = iota // the session was not deleted lately
	tombstoneSet           // it was (remove set its tombstone)
	tombstoneUnsure        // the store did not answer
)

// tombstone says whether session id was deleted lately (remove sets a tombstone).
func (s *Service) tombstone(ctx context.Context, tenant, id string) int {
	token := "probe-" + newID()
	_, claimed, err := s.cfg.Store.Claim(ctx, tombstoneKey(tenant, id), token, time.Second)
	switch {
	case err != nil:
		return tombstoneUnsure
	case claimed:
		_ = s.cfg.Store.Release(ctx, tombstoneKey(tenant, id), token)
		return tombstoneNone
	}
	return tombstoneSet
}
