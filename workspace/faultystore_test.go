package workspace_test

import (
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
