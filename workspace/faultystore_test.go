package workspace_test

import (
	"cmp"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/workspace"
)

// faultyBackend fails its failAt-th operation (counting from 1; 0: none) and every one
// after it while down is set: a store that errs or resets mid-way.
type faultyBackend struct {
	snapshot.Backend
	ops    atomic.Int64
	failAt atomic.Int64
}

var errInjected = errors.New("injected store fault: connection reset")

func (f *faultyBackend) fault() error {
	n := f.ops.Add(1)
	if at := f.failAt.Load(); at > 0 && n >= at {
		return errInjected
	}
	return nil
}

func (f *faultyBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Backend.Put(ctx, key, r, size)
}

func (f *faultyBackend) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Backend.Get(ctx, key)
}

func (f *faultyBackend) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := f.fault(); err != nil {
		return nil, err
	}
	return f.Backend.GetRange(ctx, key, off, n)
}

func (f *faultyBackend) Touch(ctx context.Context, key string) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Backend.Touch(ctx, key)
}

func (f *faultyBackend) Delete(ctx context.Context, key string) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Backend.Delete(ctx, key)
}

func (f *faultyBackend) List(ctx context.Context, prefix string, fn func(snapshot.Object) error) error {
	if err := f.fault(); err != nil {
		return err
	}
	return f.Backend.List(ctx, prefix, fn)
}

// newFaultyLife is a lifeEnv whose snapshot store fails from its n-th operation on
// once armed.
func newFaultyLife(t *testing.T) (*lifeEnv, *faultyBackend) {
	var fb *faultyBackend
	l := newLifeEnvWith(t, "", func(c *workspace.Config) {
		b, err := snapshot.NewFileBackend(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		fb = &faultyBackend{Backend: b}
		c.Snapshots = snapshot.NewStore(fb)
	})
	return l, fb
}

// TestArchiveStoreFaults: the store fails at every step of an archive in turn (each
// blob, the entries, the record, the read-back, the lease): the session stays
// suspended with its files, or is archived with an archive that reads back; either way
// the next call, once the store answers, finds every file.
func TestArchiveStoreFaults(t *testing.T) {
	for step := int64(1); ; step++ {
		l, fb := newFaultyLife(t)
		ctx := context.Background()
		l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "first"})
		l.ok("writeFile", map[string]any{"path": "dir/b.txt", "contents": "second"})
		if _, err := l.svc.Suspend(ctx, l.caller, l.id); err != nil {
			t.Fatal(err)
		}
		fb.ops.Store(0)
		fb.failAt.Store(step)
		l.clock.Add(25 * time.Hour)
		_, _ = l.svc.Reap(ctx)
		failed := fb.ops.Load() >= step
		fb.failAt.Store(0)
		s := l.session()
		switch {
		case s.State == workspace.StateSuspended && failed:
		case s.State == workspace.StateArchived:
		default:
			t.Fatalf("step %d: the session is %s after the archive (failed: %v)", step, s.State, failed)
		}
		if got := l.read("a.txt") + l.read("dir/b.txt"); got != "firstsecond" {
			t.Fatalf("step %d: after the fault the session (%s) reads %q", step, s.State, got)
		}
		if !failed {
			return // the archive ran through without reaching this step: every step was hit
		}
	}
}

// TestWakeStoreFaults: the store fails at every step of a wake from an archive in
// turn: the session stays archived with its archive, the reason in wakeError and the
// call retryable; once the store answers, the next call wakes it whole.
func TestWakeStoreFaults(t *testing.T) {
	for step := int64(1); ; step++ {
		l, fb := newFaultyLife(t)
		ctx := context.Background()
		l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "first"})
		if _, err := l.svc.Suspend(ctx, l.caller, l.id); err != nil {
			t.Fatal(err)
		}
		l.clock.Add(25 * time.Hour)
		if _, err := l.svc.Reap(ctx); err != nil {
			t.Fatal(err)
		}
		if s := l.session(); s.State != workspace.StateArchived {
			t.Fatalf("the session is %s, want archived", s.State)
		}
		fb.ops.Store(0)
		fb.failAt.Store(step)
		_, err := l.svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
		failed := fb.ops.Load() >= step
		fb.failAt.Store(0)
		s := l.session()
		if failed && err != nil {
			if !workspace.Retryable(err) {
				t.Fatalf("step %d: the failed wake answers %v, want a retryable error", step, err)
			}
			if s.State != workspace.StateArchived || s.WakeError == "" {
				t.Fatalf("step %d: after the failed wake the session is %s with wakeError %q", step, s.State, s.WakeError)
			}
		}
		if got := l.read("a.txt"); got != "first" {
			t.Fatalf("step %d: the session (%s) reads %q after the store came back", step, l.session().State, got)
		}
		if s := l.session(); s.WakeError != "" {
			t.Errorf("step %d: the woken session still shows wakeError %q", step, s.WakeError)
		}
		if !failed {
			return
		}
	}
}

// lostAnswers is a session store whose update to an archived state fails as a store
// whose answer is lost may: after the write went through (wrote), or before it; and
// whose reads then fail too (blind), until healed.
type lostAnswers struct {
	workspace.Store
	on                              string // the state whose update fails; archived when ""
	armed, wrote, blindAfter, blind atomic.Bool
	late                            atomic.Bool // the write lands after the next read (which sees the old record)
	deleted                         atomic.Bool // the session is deleted instead (a delete won the race)
	pending                         atomic.Pointer[workspace.Session]
}

var errLostAnswer = errors.New("injected: i/o timeout reading the store's answer")

func (s *lostAnswers) UpdateSession(ctx context.Context, sess *workspace.Session) error {
	if !s.armed.Load() || sess.State != cmp.Or(s.on, workspace.StateArchived) {
		return s.Store.UpdateSession(ctx, sess)
	}
	s.armed.Store(false)
	if s.deleted.Load() {
		if err := s.Store.DeleteSession(ctx, sess.Tenant, sess.ID); err != nil {
			return err
		}
		return errLostAnswer
	}
	if s.wrote.Load() {
		if err := s.Store.UpdateSession(ctx, sess); err != nil {
			return err
		}
	}
	if s.late.Load() {
		c := *sess
		s.pending.Store(&c)
	}
	s.blind.Store(s.blindAfter.Load())
	return errLostAnswer
}

func (s *lostAnswers) GetSession(ctx context.Context, tenant, id string) (*workspace.Session, error) {
	if s.blind.Load() {
		return nil, errLostAnswer
	}
	got, err := s.Store.GetSession(ctx, tenant, id)
	if p := s.pending.Swap(nil); p != nil {
		if err := s.Store.UpdateSession(ctx, p); err != nil {
			return nil, err
		}
	}
	return got, err
}

// TestArchiveUpdateAnswerLost: the archive's session update fails, having gone
// through or not, and the store may not answer a read right after: whatever the record
// says, the workspace's files come back on the next call (the archive is never deleted
// while the record may name it).
func TestArchiveUpdateAnswerLost(t *testing.T) {
	for _, tc := range answerLostCases {
		t.Run(tc.name, func(t *testing.T) {
			var ls *lostAnswers
			l := newLifeEnvWith(t, "", func(c *workspace.Config) {
				ls = &lostAnswers{Store: c.Store}
				c.Store = ls
			})
			ctx := context.Background()
			l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "first"})
			l.ok("writeFile", map[string]any{"path": "dir/b.txt", "contents": "second"})
			if _, err := l.svc.Suspend(ctx, l.caller, l.id); err != nil {
				t.Fatal(err)
			}
			ls.wrote.Store(tc.wrote)
			ls.late.Store(tc.late)
			ls.armed.Store(true)
			ls.blindAfter.Store(tc.blind)
			l.clock.Add(25 * time.Hour)
			_, _ = l.svc.Reap(ctx)
			ls.blind.Store(false)
			if ls.armed.Load() {
				t.Fatal("the reaper did not try to archive the session")
			}
			s := l.session()
			if archived := tc.wrote || tc.late; archived != (s.State == workspace.StateArchived) || !archived && s.State != workspace.StateSuspended {
				t.Fatalf("the session is %s after the archive's update (went through: %v)", s.State, archived)
			}
			// Right after: the archive is there, named or not.
			if have, err := l.snaps.List(ctx, testTenant, snapshot.KindArchive); err != nil || len(have) != 1 {
				t.Fatalf("archives right after the failed update: %d (%v), want the one kept", len(have), err)
			}
			if got := l.read("a.txt") + l.read("dir/b.txt"); got != "firstsecond" {
				t.Fatalf("the session (%s) reads %q after the archive's lost answer", s.State, got)
			}
			// The archive kept in doubt goes once no record names it.
			l.clock.Add(time.Hour)
			if err := l.svc.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if left, err := l.snaps.List(ctx, testTenant, snapshot.KindArchive); err != nil || len(left) != 0 {
				t.Errorf("archives left after the reconciler: %d (%v), want none", len(left), err)
			}
			if got := l.read("a.txt"); got != "first" {
				t.Errorf("after the reconciler the session reads %q", got)
			}
		})
	}
}

// TestWakeUpdateAnswerLost: a wake's session update fails, having gone through or not,
// and the store may not answer a read right after: the next calls find every file
// (neither the woken sandbox nor the archive goes while the record may need it).
func TestWakeUpdateAnswerLost(t *testing.T) {
	for _, tc := range answerLostCases {
		t.Run(tc.name, func(t *testing.T) {
			var ls *lostAnswers
			l := newLifeEnvWith(t, "", func(c *workspace.Config) {
				ls = &lostAnswers{Store: c.Store, on: workspace.StateReady}
				c.Store = ls
			})
			ctx := context.Background()
			l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "first"})
			l.ok("writeFile", map[string]any{"path": "dir/b.txt", "contents": "second"})
			if s := l.archive(); s.State != workspace.StateArchived {
				t.Fatalf("the session is %s, want archived", s.State)
			}
			ls.wrote.Store(tc.wrote)
			ls.late.Store(tc.late)
			ls.blindAfter.Store(tc.blind)
			ls.armed.Store(true)
			_, err := l.svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
			ls.blind.Store(false)
			if ls.armed.Load() {
				t.Fatalf("the call did not wake the session: %v", err)
			}
			if err != nil && !workspace.Retryable(err) {
				t.Fatalf("the wake whose update failed answers %v, want success or a retryable error", err)
			}
			// Right after: unless the wake is known to be done, both copies are there.
			boxes, _ := l.cfg.Sandboxes.List(ctx, nil)
			have, _ := l.snaps.List(ctx, testTenant, snapshot.KindArchive)
			if done := tc.wrote && !tc.blind; len(boxes) != 1 || done != (len(have) == 0) {
				t.Fatalf("right after the failed update: %d sandboxes, %d archives (wake known done: %v)", len(boxes), len(have), done)
			}
			for range 2 { // the reconciler between the calls: nothing it removes is needed
				if got := l.read("a.txt") + l.read("dir/b.txt"); got != "firstsecond" {
					t.Fatalf("the session (%s) reads %q after the wake's lost answer", l.session().State, got)
				}
				l.clock.Add(2 * time.Hour)
				_, _ = l.svc.Reap(ctx)
				_ = l.svc.Reconcile(ctx)
			}
			// What was kept in doubt is gone once the record settled: the archive, and
			// every sandbox but the session's.
			if left, err := l.snaps.List(ctx, testTenant, snapshot.KindArchive); err != nil || len(left) != 0 {
				t.Errorf("archives left after the reconciler: %d (%v), want none", len(left), err)
			}
			if boxes, err := l.cfg.Sandboxes.List(ctx, nil); err != nil || len(boxes) != 1 {
				t.Errorf("sandboxes left after the reconciler: %d (%v), want the session's one", len(boxes), err)
			}
		})
	}
}

var answerLostCases = []struct {
	name               string
	wrote, late, blind bool
}{
	{"wrote", true, false, false}, {"wrote, then blind", true, false, true},
	{"not written", false, false, false}, {"not written, then blind", false, false, true},
	{"landing late", false, true, false},
}

// TestArchiveAndWakeOfADeletedSession: the session's record is deleted while its
// archive's or its wake's update fails: not found is final (an update never makes a
// record again), so what this archive or wake made is not kept for it (a kept sandbox
// or archive would be adopted back as a session the store lost).
func TestArchiveAndWakeOfADeletedSession(t *testing.T) {
	for _, wake := range []bool{false, true} {
		t.Run(map[bool]string{false: "archive", true: "wake"}[wake], func(t *testing.T) {
			var ls *lostAnswers
			l := newLifeEnvWith(t, "", func(c *workspace.Config) {
				ls = &lostAnswers{Store: c.Store}
				if wake {
					ls.on = workspace.StateReady
				}
				c.Store = ls
			})
			ctx := context.Background()
			l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "first"})
			var before []*snapshot.Snapshot
			if wake {
				l.archive()
				before, _ = l.snaps.List(ctx, testTenant, snapshot.KindArchive)
			} else if _, err := l.svc.Suspend(ctx, l.caller, l.id); err != nil {
				t.Fatal(err)
			}
			boxes, _ := l.cfg.Sandboxes.List(ctx, nil)
			ls.deleted.Store(true)
			ls.armed.Store(true)
			if wake {
				_, err := l.svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
				if !errors.Is(err, workspace.ErrNotFound) {
					t.Errorf("the call whose wake found the session deleted: %v, want not found", err)
				}
			} else {
				l.clock.Add(25 * time.Hour)
				_, _ = l.svc.Reap(ctx)
			}
			if ls.armed.Load() {
				t.Fatal("the update was not tried")
			}
			// What the archive or the wake made is gone; what was there before stays
			// for the delete's own cleanup.
			if have, err := l.snaps.List(ctx, testTenant, snapshot.KindArchive); err != nil || len(have) != len(before) {
				t.Errorf("archives after the update found the session deleted: %d (%v), want the %d from before", len(have), err, len(before))
			}
			if after, err := l.cfg.Sandboxes.List(ctx, nil); err != nil || len(after) != len(boxes) {
				t.Errorf("sandboxes after the update found the session deleted: %d (%v), want the %d from before", len(after), err, len(boxes))
			}
		})
	}
}
