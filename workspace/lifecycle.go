package workspace

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/snapshot"
)

// A session is a workspace that lives in one of three places (DESIGN.md, "A workspace
// outlives its sandbox"):
//
//	ready      a running sandbox
//	suspended  its volume (PVC); no sandbox runs
//	archived   the snapshot store only
//
// Idle time (suspendAfter, archiveAfter) or Suspend moves a session down; any call that
// needs its sandbox moves it up again (wake), once, on whichever replica gets it first.
// Every transition writes the store first and then does the work, in an order whose
// every crash point the reconciler can finish or undo:
//
//   - suspend: record suspended, then stop the sandbox. A crash between leaves a
//     suspended session whose sandbox runs: Reconcile stops it.
//   - wake from suspended: record ready, then start the sandbox. A crash between
//     leaves a ready session whose sandbox is stopped: the next call, or Reconcile,
//     starts it (as after an engine restart).
//   - archive: copy the files to the snapshot store (an archive snapshot), record
//     archived, then remove the sandbox and its volume. A crash before the record
//     leaves a stray archive (collected); after it, a stray sandbox (removed).
//   - wake from archived: make a sandbox, restore the archive into it, record ready,
//     then delete the archive. A crash before the record leaves a stray sandbox; after
//     it, a stray archive: both are removed.

// Suspender is what a Sandboxes does to suspend a sandbox: stop it and keep its disk,
// which Start brings back. A Sandboxes without it can't suspend.
type Suspender interface {
	Suspend(ctx context.Context, id string) error
}

// DiskKeeper is what a Sandboxes may say of its disks: false when a sandbox's files
// die with it (a Kubernetes pod on an emptyDir). A suspend then archives.
type DiskKeeper interface {
	KeepsDisk() bool
}

// LifecycleObserver is what an Observer may implement to see sessions move between
// states (metrics.Metrics does).
type LifecycleObserver interface {
	// Suspended counts suspends by reason: "idle", "explicit".
	Suspended(reason string)
	// Archived counts archives by reason.
	Archived(reason string)
	// Woke measures a wake from a state ("suspended", "archived").
	Woke(from string, d time.Duration)
	// SnapshotWritten counts a snapshot's bytes as taken and as newly stored.
	SnapshotWritten(kind string, bytes, stored int64)
	// Forked measures a fork of count sessions.
	Forked(count int, d time.Duration)
	// SessionsByState reports how many sessions the store holds in each state.
	SessionsByState(counts map[string]int)
	// WakeFailed counts a wake that failed: the state the session stays in, and the
	// stage (sandbox, store, restore).
	WakeFailed(from, stage string)
}

func lifecycle(o Observer) LifecycleObserver {
	if l, ok := o.(LifecycleObserver); ok {
		return l
	}
	return nopObserver{}
}

func (nopObserver) Suspended(string)                     {}
func (nopObserver) Archived(string)                      {}
func (nopObserver) Woke(string, time.Duration)           {}
func (nopObserver) SnapshotWritten(string, int64, int64) {}
func (nopObserver) Forked(int, time.Duration)            {}
func (nopObserver) SessionsByState(map[string]int)       {}
func (nopObserver) WakeFailed(string, string)            {}

// Suspend suspends caller's session id now (reason "explicit") and returns it. A
// suspended or archived session is returned as it is.
func (s *Service) Suspend(ctx context.Context, caller Caller, id string) (*Session, error) {
	if err := caller.need(auth.ScopeSessions, "suspending a session"); err != nil {
		return nil, err
	}
	sess, err := s.getSession(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	return s.suspend(ctx, sess, "explicit")
}

// Resume wakes caller's session id (a no-op for a ready one) and returns it.
func (s *Service) Resume(ctx context.Context, caller Caller, id string) (*Session, error) {
	if err := caller.need(auth.ScopeSessions, "resuming a session"); err != nil {
		return nil, err
	}
	sess, err := s.getSession(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	if !sess.Asleep() {
		return s.usable(sess, id)
	}
	return s.wake(ctx, sess)
}

// underClaim runs fn on the session as the store has it now, with the session's wake
// claim held: no wake, suspend or archive of it runs anywhere meanwhile. ran is false,
// and fn not run, when another replica holds the claim. The claim is renewed while fn
// runs (an archive of a large workspace may take longer than its TTL); fn's ctx
// carries it, so that a step that destroys a copy can first make sure it still holds
// it (claimHeld).
func (s *Service) underClaim(ctx context.Context, tenant, id string, fn func(ctx context.Context, cur *Session) error) (ran bool, err error) {
	token := "op-" + newID()
	key := wakeKey(tenant, id)
	_, claimed, err := s.cfg.Store.Claim(ctx, key, token, s.wakeTimeout())
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !claimed {
		return false, nil
	}
	defer s.cfg.Store.Release(context.WithoutCancel(ctx), key, token)
	h := &claimHold{key: key, token: token, ttl: s.wakeTimeout(), store: s.cfg.Store}
	ctx = context.WithValue(ctx, claimHoldKey{}, h)
	stop := h.keep(ctx)
	defer stop()
	cur, err := s.cfg.Store.GetSession(ctx, tenant, id)
	if err != nil {
		return true, err
	}
	return true, fn(ctx, cur)
}

// claimHold is a session claim underClaim holds and renews.
type claimHold struct {
	key, token string
	ttl        time.Duration
	store      Store
	lost       atomic.Bool
	renewed    atomic.Int64 // unix ns of the last renewal that succeeded
}

type claimHoldKey struct{}

// keep renews the claim every third of its TTL until the returned func is called (it
// returns once no renewal is under way, so none lands after a Release). A claim not
// renewed within its TTL may have expired and been taken: it counts as lost.
func (h *claimHold) keep(ctx context.Context) func() {
	h.renewed.Store(time.Now().UnixNano())
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(h.ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				h.renew(context.WithoutCancel(ctx))
				if h.lost.Load() {
					return
				}
			}
		}
	}()
	return func() { close(stop); <-done }
}

// renew renews the claim once, and marks it lost when another holds it or when no
// renewal succeeded within its TTL.
func (h *claimHold) renew(ctx context.Context) {
	if time.Since(time.Unix(0, h.renewed.Load())) >= h.ttl {
		h.lost.Store(true) // it may have expired and passed to another meanwhile
		return
	}
	_, ok, err := h.store.Claim(ctx, h.key, h.token, h.ttl)
	switch {
	case err != nil:
	case !ok:
		h.lost.Store(true)
	default:
		h.renewed.Store(time.Now().UnixNano())
	}
}

// claimHeld reports whether the claim underClaim put in ctx is still this holder's
// (renewing it); a ctx without one holds nothing to lose.
func claimHeld(ctx context.Context) error {
	h, ok := ctx.Value(claimHoldKey{}).(*claimHold)
	if !ok {
		return nil
	}
	if !h.lost.Load() {
		h.renew(ctx)
	}
	if h.lost.Load() {
		return fmt.Errorf("%w: %w", ErrUnavailable, errClaimLost)
	}
	if time.Since(time.Unix(0, h.renewed.Load())) > time.Second {
		return fmt.Errorf("%w: the session's claim could not be renewed", ErrUnavailable)
	}
	return nil
}

// errClaimLost: the session's claim passed to another replica while this one worked.
var errClaimLost = errors.New("the session's claim passed to another replica meanwhile")

// suspend moves a ready session to suspended (or, when its sandbox keeps no disk,
// straight to archived), under the session's claim and on its record as it is now. An
// idle suspend of a session used since sess was read does nothing.
func (s *Service) suspend(ctx context.Context, sess *Session, reason string) (*Session, error) {
	out := sess
	ran, err := s.underClaim(ctx, sess.Tenant, sess.ID, func(ctx context.Context, cur *Session) error {
		out = cur
		if reason == "idle" && (cur.State != StateReady || cur.LastUsed.After(sess.LastUsed)) {
			return nil // used, or moved, since the reaper looked
		}
		var err error
		out, err = s.suspendLocked(ctx, cur, reason)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !ran && reason != "idle" {
		return nil, fmt.Errorf("%w: session %s is waking or being suspended elsewhere: retry in a moment", ErrUnavailable, sess.ID)
	}
	return out, nil
}

// suspendLocked is suspend's work, with the claim held.
func (s *Service) suspendLocked(ctx context.Context, sess *Session, reason string) (*Session, error) {
	switch sess.State {
	case StateSuspended, StateArchived:
		return sess, nil
	case StateReady:
	default:
		return nil, fmt.Errorf("%w: session %s is %s: only a ready session can be suspended", ErrConflict, sess.ID, sess.State)
	}
	sp, ok := s.cfg.Sandboxes.(Suspender)
	if !ok {
		return nil, fmt.Errorf("%w: this server's sandbox driver can't suspend", ErrNotConfigured)
	}
	if dk, ok := s.cfg.Sandboxes.(DiskKeeper); ok && !dk.KeepsDisk() {
		return s.archiveLocked(ctx, sess, reason)
	}
	ctx = context.WithoutCancel(ctx) // half a suspend helps nobody
	s.keepProcesses(ctx, sess)
	next := *sess
	next.State, next.SuspendedAt = StateSuspended, s.cfg.Now().UTC()
	if err := s.cfg.Store.UpdateSession(ctx, &next); err != nil {
		return nil, err
	}
	s.usage.clearLive(sess.Tenant, sess.ID)
	s.endAgent(sess.Sandbox)
	if err := sp.Suspend(ctx, sess.Sandbox); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		// Recorded suspended: the reconciler stops it, and a call wakes it meanwhile.
		s.log.Warn("suspend: stop the sandbox", "session", sess.ID, "sandbox", sess.Sandbox, "err", err)
	}
	lifecycle(s.obs).Suspended(reason)
	s.lifecycleAudit(&next, "suspend", reason)
	s.countActiveSoon()
	s.log.Info("session suspended", "session", sess.ID, "tenant", sess.Tenant, "reason", reason)
	return &next, nil
}

// wakeTimeout bounds one wake: a sandbox's start (or make and restore) and its agent.
func (s *Service) wakeTimeout() time.Duration { return s.cfg.ReadyTimeout + 2*time.Minute }

// wake brings an asleep session back to ready and returns it. Concurrent wakes of one
// session on this replica share one; on other replicas they wait for the replica that
// claimed it (Store.Claim). An engine that is down answers ErrUnavailable, and the
// session stays as it was.
func (s *Service) wake(ctx context.Context, sess *Session) (*Session, error) {
	key := sess.Tenant + "/" + sess.ID
	ch := s.wakes.DoChan(key, func() (any, error) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.wakeTimeout())
		defer cancel()
		return s.wakeOnce(wctx, sess.Tenant, sess.ID)
	})
	wait := time.NewTimer(wakeWait)
	defer wait.Stop()
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*Session), nil
	case <-wait.C:
		// The wake goes on; the caller hears soon that it may retry, and its retry
		// joins the same wake.
		return nil, fmt.Errorf("%w: session %s is still waking (%s, and counting): retry shortly", ErrUnavailable, sess.ID, wakeWait)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// wakeWait is how long a call waits for its session's wake before it answers a
// retryable error (the wake goes on). A store or an engine that hangs never holds a
// call for longer.
var wakeWait = 28 * time.Second

func wakeKey(tenant, id string) string { return "wake:" + tenant + ":" + id }

func (s *Service) wakeOnce(ctx context.Context, tenant, id string) (*Session, error) {
	start := time.Now()
	token := newID()
	for {
		sess, err := s.cfg.Store.GetSession(ctx, tenant, id)
		if err != nil {
			return nil, err
		}
		if !sess.Asleep() {
			return s.usable(sess, id)
		}
		_, claimed, err := s.cfg.Store.Claim(ctx, wakeKey(tenant, id), token, s.wakeTimeout())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if !claimed {
			// Another replica wakes it: wait for its record to say ready.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: session %s is still waking", ErrUnavailable, id)
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		defer s.cfg.Store.Release(context.WithoutCancel(ctx), wakeKey(tenant, id), token)
		// Read again under the claim: a wake that finished between the read and the
		// claim must not run twice.
		if sess, err = s.cfg.Store.GetSession(ctx, tenant, id); err != nil {
			return nil, err
		}
		from := sess.State
		switch sess.State {
		case StateSuspended:
			sess, err = s.wakeSuspended(ctx, sess)
		case StateArchived:
			sess, err = s.wakeArchived(ctx, sess)
		default:
			return s.usable(sess, id)
		}
		if err != nil {
			s.log.Warn("wake failed", "session", id, "tenant", tenant, "from", from, "err", err)
			return nil, err
		}
		lifecycle(s.obs).Woke(from, time.Since(start))
		s.lifecycleAudit(sess, "wake", from)
		s.countActiveSoon()
		s.log.Info("session woke", "session", id, "tenant", tenant, "from", from, "took", time.Since(start).Round(time.Millisecond))
		return sess, nil
	}
}

// wakeSuspended starts a suspended session's sandbox again.
func (s *Service) wakeSuspended(ctx context.Context, sess *Session) (*Session, error) {
	prev := *sess
	next := *sess
	next.State, next.SuspendedAt, next.LastUsed = StateReady, time.Time{}, s.cfg.Now().UTC()
	// Calls that read the record ready before the sandbox runs wait for this start
	// (attach), so the sandbox is started once, by the wake.
	started := make(chan struct{})
	s.wakeStarts.Store(sess.Sandbox, started)
	var once sync.Once
	markStarted := func() {
		once.Do(func() {
			s.wakeStarts.CompareAndDelete(sess.Sandbox, started)
			close(started)
		})
	}
	defer markStarted()
	if err := s.cfg.Store.UpdateSession(ctx, &next); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	undo := func(cause error) error {
		if err := s.cfg.Store.UpdateSession(context.WithoutCancel(ctx), &prev); err != nil {
			s.log.Warn("wake: put the session back to suspended", "session", sess.ID, "err", err)
		}
		return cause
	}
	s.forgetAgent(sess.Sandbox)
	err := s.cfg.Sandboxes.Start(ctx, sess.Sandbox)
	markStarted() // from here on a stopped sandbox is a fault, healed as usual
	if err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, fmt.Errorf("session %s: %w: its suspended sandbox is gone", sess.ID, ErrSessionLost)
		}
		return nil, undo(fmt.Errorf("%w: wake session %s: %v (retry in a moment; the session stays suspended)", ErrUnavailable, sess.ID, err))
	}
	if err := s.waitReady(ctx, sess.Sandbox); err != nil {
		return nil, err // recorded ready: the next call heals or restarts it as usual
	}
	s.warmLanguageServers(ctx, sess.Sandbox) // under the claim: no suspend can race it
	return &next, nil
}

// emptyTar is a tar archive with no entries: its two zero blocks.
var emptyTar = make([]byte, 1024)

// warmLanguageServers has a woken sandbox's agent start the project's language server
// in the background, as it does after an upload (an upload of nothing: the agent then
// looks at the workspace root); it returns at once, the server starts on its own. Best
// effort: the first code-intelligence call starts it anyway.
func (s *Service) warmLanguageServers(ctx context.Context, sandboxID string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	g := wholeTree
	if _, err := s.agentFor(sandboxID).TarIn(ctx, agent.TarInArgs{Path: ".", Guard: &g}, bytes.NewReader(emptyTar)); err != nil {
		s.log.Debug("wake: warm the language servers", "sandbox", sandboxID, "err", err)
	}
}

// keepProcesses records the session's background processes and terminals before its
// sandbox stops (saveSuspendedProcs, saveSuspendedTerminals): after the wake they are
// reported as ended by the suspend, with the end of their output and their last screen.
func (s *Service) keepProcesses(ctx context.Context, sess *Session) {
	if err := s.saveSuspendedProcs(ctx, sess); err != nil {
		s.log.Warn("suspend: keep the background processes' output", "session", sess.ID, "err", err)
	}
	if err := s.saveSuspendedTerminals(ctx, sess); err != nil {
		s.log.Warn("suspend: keep the terminals' screens", "session", sess.ID, "err", err)
	}
}

// lifecycleAudit records a session's state change in the audit stream.
func (s *Service) lifecycleAudit(sess *Session, what, why string) {
	s.record(AuditRecord{Time: s.cfg.Now().UTC(), Tenant: sess.Tenant, Subject: sess.Subject, Session: sess.ID,
		Tool: "session." + what, Decision: "allow", Outcome: cmp.Or(why, "ok")})
}

// actionAudit records an action a caller took on a session (renew, snapshot, fork) in
// the audit stream, with what it made (target).
func (s *Service) actionAudit(caller Caller, id, what, target string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	s.record(AuditRecord{Time: s.cfg.Now().UTC(), Tenant: caller.Tenant, Subject: caller.Subject, Session: id,
		Tool: "session." + what, Decision: "allow", Outcome: outcome, Target: target})
}

// idleSuspend suspends every ready session idle for longer than its suspendAfter, and
// archives every suspended one asleep for longer than archiveAfter. It returns how many
// moved.
func (s *Service) idleSuspend(ctx context.Context, all []*Session) int {
	now, n := s.cfg.Now(), 0
	for _, sess := range all {
		if sess.Expired(now) {
			continue
		}
		tp, ok := s.cfg.Tenants.Policy(sess.Tenant)
		if !ok {
			continue
		}
		switch sess.State {
		case StateReady:
			after := s.suspendAfter(sess.ID, tp.SuspendAfter.Std())
			if after <= 0 || now.Sub(sess.LastUsed) < after || s.renewals.pending(sess.Tenant, sess.ID) || s.calling(sess.ID) {
				continue
			}
			if _, err := s.suspend(ctx, sess, "idle"); err != nil {
				s.log.Warn("idle suspend", "session", sess.ID, "err", err)
				continue
			}
			n++
		case StateSuspended:
			after := cmp.Or(tp.ArchiveAfter.Std(), s.cfg.ArchiveAfter)
			if after <= 0 || s.cfg.Snapshots == nil || now.Sub(sess.SuspendedAt) < after {
				continue
			}
			if _, err := s.archive(ctx, sess, "idle"); err != nil {
				s.log.Warn("archive", "session", sess.ID, "err", err)
				continue
			}
			n++
		}
	}
	return n
}

// suspendAfter is a session's idle suspend delay: the tenant's (else the server's),
// shortened by its workspace's .cws-policy.json as this replica last read it (a
// replica that served none of its calls goes by the tenant's).
func (s *Service) suspendAfter(id string, tenant time.Duration) time.Duration {
	d := cmp.Or(tenant, s.cfg.SuspendAfter)
	s.mu.Lock()
	cp, ok := s.policies[id]
	s.mu.Unlock()
	if ok && cp.eff != nil {
		if w := cp.eff.SuspendAfter(); w > 0 && (d <= 0 || w < d) {
			d = w
		}
	}
	return d
}

// restore pipes the snapshot rd reads into a sandbox's agent, the whole tree, denied
// paths included. Only ever into a fresh sandbox, which the caller drops on an error: a
// read of the snapshot that fails half-way (the store down, a blob missing) fails the
// restore even though the agent may have taken the part it got as a complete archive.
func (s *Service) restore(ctx context.Context, rd *archiveRead, a *agent.Client) ([]string, error) {
	g := wholeTree
	t0 := time.Now()
	_, err := a.TarIn(ctx, agent.TarInArgs{Path: ".", Guard: &g, Exact: true}, rd.pipe)
	rd.pipe.closeRead(cmp.Or(err, io.ErrClosedPipe)) // unblocks a Read still writing
	r, rerr := rd.wait()
	storeWait, agentWait := rd.pipe.waits()
	s.log.Debug("restore: tar.in", "snapshot", rd.id, "tar_in", time.Since(t0).Round(time.Millisecond),
		"store_waited_for_agent", storeWait.Round(time.Millisecond), "agent_waited_for_store", agentWait.Round(time.Millisecond))
	if rerr != nil {
		return nil, rd.readError(rerr)
	}
	id := rd.id
	if err != nil {
		kind := ErrUnavailable // what may pass: a sandbox that went away, a full disk freed
		if errors.Is(mapAgentError(err), ErrTooLarge) {
			kind = ErrTooLarge
		}
		return nil, fmt.Errorf("%w: restore snapshot %s: its files could not be written back: %v", kind, id, restoreError(err))
	}
	var notes []string
	for _, rn := range r.Renamed {
		notes = append(notes, fmt.Sprintf("%q was restored as %q: an older cws stored its name without the bytes that are not UTF-8, and another name became the same", rn.From, rn.To))
	}
	return notes, nil
}

// errStoreRead marks a restore that failed reading the snapshot store.
var errStoreRead = errors.New("read the snapshot store")

// restoreError words an agent's refusal of a snapshot's tree as what it is: the
// snapshot's contents could not be written back, not a policy's refusal.
func restoreError(err error) string {
	var we *agent.WireError
	if errors.As(err, &we) {
		if we.Path != "" {
			return fmt.Sprintf("%s: %s", we.Path, we.Message)
		}
		return we.Message
	}
	return err.Error()
}

// capture writes the whole workspace of a ready session into the snapshot store as
// meta (ID, Kind and the rest set by the caller), bounded by limit bytes (0: none).
// Tool calls on this replica wait while it reads the tree (a write cws accepted is all
// in or all out).
func (s *Service) capture(ctx context.Context, sess *Session, meta snapshot.Snapshot, limit int64) (*snapshot.Snapshot, error) {
	if s.cfg.Snapshots == nil {
		return nil, errNoSnapshotStore
	}
	defer s.quiesce(sess.ID)()
	return s.captureQuiet(ctx, sess, meta, limit)
}

// captureQuiet is capture for a caller that holds off the session's writes itself, or
// whose session takes none (suspended).
func (s *Service) captureQuiet(ctx context.Context, sess *Session, meta snapshot.Snapshot, limit int64) (*snapshot.Snapshot, error) {
	if s.cfg.Snapshots == nil {
		return nil, errNoSnapshotStore
	}
	meta.Tenant, meta.Session, meta.Subject, meta.Image = sess.Tenant, sess.ID, sess.Subject, sess.Image
	meta.Env, meta.Labels, meta.SessionExpires = sess.Env, sess.Labels, sess.ExpiresAt
	if meta.CreatedAt.IsZero() {
		meta.CreatedAt = s.cfg.Now().UTC()
	}
	known := s.known.get(sess.Sandbox)
	snap, sums, err := s.captureOnce(ctx, sess, meta, limit, known)
	if errors.Is(err, snapshot.ErrStaleRef) {
		s.known.forget(sess.Sandbox)
		snap, sums, err = s.captureOnce(ctx, sess, meta, limit, nil)
	}
	if err != nil {
		if errors.Is(err, snapshot.ErrTooLarge) || errors.Is(err, ErrSessionLost) || errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: snapshot store: %v", ErrUnavailable, err)
	}
	s.known.put(sess.Sandbox, sums)
	lifecycle(s.obs).SnapshotWritten(meta.Kind, snap.Bytes, snap.Stored)
	return snap, nil
}

// captureOnce reads the tree out of the sandbox into the store; with known, files
// unchanged since the sandbox's last capture come as references (captureknown.go).
func (s *Service) captureOnce(ctx context.Context, sess *Session, meta snapshot.Snapshot, limit int64, known map[string]bool) (*snapshot.Snapshot, map[string]bool, error) {
	a := s.agentFor(sess.Sandbox)
	pr, pw := io.Pipe()
	go func() {
		g := wholeTree
		_, err := a.TarOut(ctx, agent.TarOutArgs{Path: ".", Guard: &g, Exact: true, Refs: known != nil, Remember: true}, pw)
		pw.CloseWithError(mapAgentError(err))
	}()
	snap, sums, err := s.cfg.Snapshots.WriteRefs(ctx, meta, pr, limit, known)
	pr.CloseWithError(cmp.Or(err, io.ErrClosedPipe))
	return snap, sums, err
}

// quietLock is the lock that orders a session's writes with its snapshots.
func (s *Service) quietLock(id string) *sync.RWMutex {
	h := fnv.New32a()
	h.Write([]byte(id))
	return &s.quiet[h.Sum32()%uint32(len(s.quiet))]
}

// quiesce holds off the session's file writes on this replica (tools of the
// tools:write scope, uploads) until the returned func is called: a write cws accepted
// is in a snapshot whole or not at all. Commands are not held off: what a command
// writes while the tree is read is in the snapshot as each file was when it was read.
func (s *Service) quiesce(id string) func() {
	m := s.quietLock(id)
	m.Lock()
	return m.Unlock
}

// writing marks a write under way on the session (quiesce waits for it).
func (s *Service) writing(id string) func() {
	m := s.quietLock(id)
	m.RLock()
	return m.RUnlock
}

var errNoSnapshotStore = fmt.Errorf("%w: this server has no snapshot store (cws serve --snapshot-store)", ErrNotConfigured)

// archive moves a suspended session's files into the snapshot store and removes its
// sandbox and volume, under the session's claim, unless the session moved since sess
// was read.
func (s *Service) archive(ctx context.Context, sess *Session, reason string) (*Session, error) {
	out := sess
	_, err := s.underClaim(ctx, sess.Tenant, sess.ID, func(ctx context.Context, cur *Session) error {
		out = cur
		if cur.State != sess.State || !cur.SuspendedAt.Equal(sess.SuspendedAt) || cur.Sandbox != sess.Sandbox {
			return nil // woken, or archived, since the reaper looked
		}
		var err error
		out, err = s.archiveLocked(ctx, cur, reason)
		return err
	})
	return out, err
}

// archiveLocked is archive's work, with the claim held. A suspended session's sandbox
// is started (not woken: it takes no calls) to read its files; a ready one's writes
// wait from the capture until its sandbox is gone (they then fail retryably, and a
// retry wakes it from the archive).
func (s *Service) archiveLocked(ctx context.Context, sess *Session, reason string) (*Session, error) {
	if s.cfg.Snapshots == nil {
		return nil, errNoSnapshotStore
	}
	ctx = context.WithoutCancel(ctx)
	if sess.State == StateReady {
		defer s.quiesce(sess.ID)()
	}
	if sess.State == StateSuspended {
		if err := s.cfg.Sandboxes.Start(ctx, sess.Sandbox); err != nil {
			return nil, fmt.Errorf("%w: archive %s: start its sandbox: %v", ErrUnavailable, sess.ID, err)
		}
		if err := s.waitReady(ctx, sess.Sandbox); err != nil {
			return nil, err
		}
	} else {
		s.keepProcesses(ctx, sess)
	}
	snap, err := s.captureQuiet(ctx, sess, snapshot.Snapshot{ID: snapshot.NewID(), Kind: snapshot.KindArchive, Name: "archive of " + sess.ID}, 0)
	if err != nil {
		if sess.State == StateSuspended {
			s.stopQuietly(ctx, sess)
		}
		return nil, err
	}
	next := *sess
	next.State, next.Archive, next.Sandbox = StateArchived, snap.ID, ""
	if sess.SuspendedAt.IsZero() {
		next.SuspendedAt = s.cfg.Now().UTC()
	}
	// The archive is durable and read back (Snapshots.Write). Its volume goes only if
	// this replica still holds the session: a capture that outlived its claim lets the
	// session be woken elsewhere, and the volume is then the live copy.
	err = claimHeld(ctx)
	keep := false // the archive, once an update to name it was tried
	if err == nil {
		if err = s.cfg.Store.UpdateSession(ctx, &next); err != nil {
			// An error may hide a write that went through (the store's answer lost), or
			// one still on its way: a record naming an archive deleted here would have
			// the next wake clear the volume as what an archive cut short left. So the
			// archive stays unless the record, read again, is gone: not found is final
			// (an update never makes a record again), the session was deleted. A kept
			// archive no record names is removed by the reconciler, under the claim.
			switch cur, gerr := s.reread(ctx, &next); {
			case gerr == nil && cur.State == StateArchived && cur.Archive == next.Archive:
				err = nil // it went through
			case errors.Is(gerr, ErrNotFound):
			default:
				keep = true
				s.log.Warn("archive: the session's update failed; the archive is kept until no record can name it", "session", sess.ID, "archive", snap.ID, "err", err)
			}
		}
	}
	if err != nil {
		if !keep {
			_ = s.cfg.Snapshots.Delete(ctx, sess.Tenant, snap.ID)
		}
		if sess.State == StateSuspended && !errors.Is(err, errClaimLost) {
			s.stopQuietly(ctx, sess) // not when lost: its new holder may have woken it
		}
		return nil, err
	}
	s.usage.clearLive(sess.Tenant, sess.ID)
	s.endAgent(sess.Sandbox)
	if err := s.cfg.Sandboxes.Remove(ctx, sess.Sandbox); err != nil {
		s.log.Warn("archive: remove the sandbox (the reconciler will)", "session", sess.ID, "sandbox", sess.Sandbox, "err", err)
	}
	lifecycle(s.obs).Archived(reason)
	if sess.State == StateReady {
		lifecycle(s.obs).Suspended(reason)
	}
	s.lifecycleAudit(&next, "archive", reason)
	s.countActiveSoon()
	s.log.Info("session archived", "session", sess.ID, "tenant", sess.Tenant, "archive", snap.ID, "bytes", snap.Bytes, "stored", snap.Stored)
	return &next, nil
}

// reread reads next's session record again after an update to next failed, which may
// hide a write that went through (the store's answer lost) or one still on its way.
func (s *Service) reread(ctx context.Context, next *Session) (*Session, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return s.cfg.Store.GetSession(ctx, next.Tenant, next.ID)
}

// SessionDiskRemover is what a Sandboxes may also do: remove a session's workspace
// volume (claim) that no sandbox uses.
type SessionDiskRemover interface {
	RemoveSessionDisk(ctx context.Context, session string) error
}

// clearStray removes every sandbox of an archived session, and its workspace disk.
func (s *Service) clearStray(ctx context.Context, sess *Session) {
	boxes, err := s.cfg.Sandboxes.List(ctx, map[string]string{sandbox.LabelSession: sess.ID, sandbox.LabelTenant: sess.Tenant})
	if err == nil {
		for _, b := range boxes {
			s.endAgent(b.ID)
			if err := s.cfg.Sandboxes.Remove(ctx, b.ID); err != nil {
				s.log.Warn("wake: remove a stray sandbox", "session", sess.ID, "sandbox", b.ID, "err", err)
			}
		}
	}
	if dr, ok := s.cfg.Sandboxes.(SessionDiskRemover); ok {
		if err := dr.RemoveSessionDisk(ctx, sess.ID); err != nil {
			s.log.Warn("wake: remove a stray workspace volume", "session", sess.ID, "err", err)
		}
	}
	s.log.Warn("removed what an archive cut short left of the session", "session", sess.ID, "sandboxes", len(boxes))
}

func (s *Service) stopQuietly(ctx context.Context, sess *Session) {
	s.endAgent(sess.Sandbox)
	if sp, ok := s.cfg.Sandboxes.(Suspender); ok {
		_ = sp.Suspend(ctx, sess.Sandbox)
	}
}

// wakeFailed records why a wake from an archive failed on the session (its view shows
// it: cws sessions get), counts it, and returns err. The session stays archived with
// its archive as it was; the next call tries again.
func (s *Service) wakeFailed(ctx context.Context, sess *Session, stage string, err error) error {
	lifecycle(s.obs).WakeFailed(StateArchived, stage)
	if errors.Is(err, ErrNotFound) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	cur, gerr := s.cfg.Store.GetSession(ctx, sess.Tenant, sess.ID)
	if gerr == nil && cur.State == StateArchived && cur.Archive == sess.Archive {
		cur.WakeError, cur.WakeErrorAt = err.Error(), s.cfg.Now().UTC()
		if uerr := s.cfg.Store.UpdateSession(ctx, cur); uerr != nil {
			s.log.Warn("wake: record why it failed", "session", sess.ID, "err", uerr)
		}
	}
	return err
}

// wakeArchived makes a new sandbox for an archived session (from the warm pool when one
// fits) and restores its archive into it. The archive is read from the store while the
// sandbox starts (readArchive): a read that fails stops the wait for the sandbox, which
// is then removed; a sandbox that fails stops the read. The create itself runs to its
// end either way, so that what it made is whole to remove.
func (s *Service) wakeArchived(ctx context.Context, sess *Session) (*Session, error) {
	if s.cfg.Snapshots == nil {
		return nil, errNoSnapshotStore
	}
	tp, ok := s.cfg.Tenants.Policy(sess.Tenant)
	if !ok {
		return nil, fmt.Errorf("%w: unknown tenant %q", ErrForbidden, sess.Tenant)
	}
	t0 := time.Now()
	startCtx, stopStart := context.WithCancel(ctx)
	defer stopStart()
	rd := s.readArchive(ctx, sess.Tenant, sess.Archive, stopStart)
	spec := s.withTestSpec(s.spec(ctx, sess, tp, sess.Env, false))
	info, err := s.cfg.Sandboxes.Create(ctx, spec)
	if errors.Is(err, sandbox.ErrExists) {
		// What an archive cut short left (its record written, the removal not): the
		// session is archived and its claim is held here, so all of it is stray.
		s.clearStray(ctx, sess)
		info, err = s.cfg.Sandboxes.Create(ctx, spec)
	}
	if err != nil {
		rd.stop()
		return nil, s.wakeFailed(ctx, sess, "sandbox", fmt.Errorf("%w: wake session %s: create its sandbox: %v (retry in a moment; the session stays archived)", ErrUnavailable, sess.ID, err))
	}
	drop := func(stage string, cause error) error {
		rd.stop()
		s.endAgent(info.ID)
		_ = s.cfg.Sandboxes.Remove(context.WithoutCancel(ctx), info.ID)
		return s.wakeFailed(ctx, sess, stage, cause)
	}
	err = s.waitReady(startCtx, info.ID)
	if rerr := rd.failure(); rerr != nil {
		err = rerr // the store's failure stopped the wait, or would stop the restore
	} else if err != nil {
		return nil, drop("sandbox", err)
	}
	t1 := time.Now()
	var notes []string
	if err == nil {
		notes, err = s.restore(ctx, rd, s.agentFor(info.ID))
	}
	if err != nil {
		if errors.Is(err, snapshot.ErrNotFound) {
			return nil, drop("store", fmt.Errorf("session %s: %w: its archive %s is gone from the snapshot store", sess.ID, ErrSessionLost, sess.Archive))
		}
		stage := "restore"
		if errors.Is(err, errStoreRead) {
			stage = "store"
		}
		return nil, drop(stage, fmt.Errorf("wake session %s from its archive %s (it stays archived, the archive untouched; the next call tries again): %w", sess.ID, sess.Archive, err))
	}
	s.log.Info("archive restored", "session", sess.ID, "archive", sess.Archive, "sandbox", info.ID,
		"sandbox_ready", t1.Sub(t0).Round(time.Millisecond), "restore", time.Since(t1).Round(time.Millisecond))
	next := *sess
	next.State, next.Sandbox, next.Archive, next.SuspendedAt, next.LastUsed = StateReady, info.ID, "", time.Time{}, s.cfg.Now().UTC()
	next.WakeError, next.WakeErrorAt, next.Notes = "", time.Time{}, notes
	if err := s.cfg.Store.UpdateSession(ctx, &next); err != nil {
		if errors.Is(err, ErrNotFound) {
			// Deleted while it woke: the delete wins, and the sandbox made for it goes.
			return nil, drop("sandbox", fmt.Errorf("session %s: %w", sess.ID, ErrNotFound))
		}
		// The write may have gone through with its answer lost, or still be on its
		// way: the record would then name this sandbox, the live copy, and no archive
		// (which the reconciler then removes). A record that names this sandbox, in
		// whatever state (the reconciler may have marked it lost meanwhile), woke it.
		// Otherwise neither goes: a record still archived wakes again, and the sandbox
		// left here is cleared as stray.
		switch cur, gerr := s.reread(ctx, &next); {
		case gerr == nil && cur.Sandbox == next.Sandbox:
			// It went through.
		case errors.Is(gerr, ErrNotFound):
			// Final (an update never makes a record again): deleted while it woke.
			return nil, drop("sandbox", fmt.Errorf("session %s: %w", sess.ID, ErrNotFound))
		default:
			rd.stop()
			lifecycle(s.obs).WakeFailed(StateArchived, "store")
			s.log.Warn("wake: the session's update failed; the sandbox and the archive are kept until the record says which holds the workspace", "session", sess.ID, "sandbox", info.ID, "archive", sess.Archive, "err", err)
			return nil, fmt.Errorf("%w: wake session %s: %v (retry in a moment; the session stays archived)", ErrUnavailable, sess.ID, err)
		}
	}
	if err := s.cfg.Snapshots.Delete(ctx, sess.Tenant, sess.Archive); err != nil && !errors.Is(err, snapshot.ErrNotFound) {
		s.log.Warn("wake: delete the archive (the reconciler will)", "session", sess.ID, "archive", sess.Archive, "err", err)
	}
	return &next, nil
}
