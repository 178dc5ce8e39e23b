package workspace_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/workspace"
)

// readSignal is a snapshot backend that tells when it is first read once armed, and
// fails every read while failing is set.
type readSignal struct {
	snapshot.Backend
	armed   atomic.Bool
	failing atomic.Bool
	once    sync.Once
	read    chan struct{}
}

func (b *readSignal) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if b.armed.Load() {
		b.once.Do(func() { close(b.read) })
	}
	if b.failing.Load() {
		return nil, errInjected
	}
	return b.Backend.Get(ctx, key)
}

// gatedEngine is a sandbox engine whose Create, once armed, waits for the snapshot
// store's first read (at most 10 s, so that a wake that reads only later fails the
// test instead of hanging it), or fails while down is set.
type gatedEngine struct {
	*sandboxtest.Local
	store   *readSignal
	armed   atomic.Bool
	down    atomic.Bool
	sawRead atomic.Bool
}

func (g *gatedEngine) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if g.armed.Load() {
		select {
		case <-g.store.read:
			g.sawRead.Store(true)
		case <-time.After(10 * time.Second):
		}
	}
	if g.down.Load() {
		return sandbox.Info{}, errors.New("Cannot connect to the Docker daemon")
	}
	return g.Local.Create(ctx, spec)
}

// newWakeEnv is a lifeEnv with an archived session, over a gated engine and a
// signalling store.
func newWakeEnv(t *testing.T) (*lifeEnv, *gatedEngine) {
	t.Helper()
	var rs *readSignal
	l := newLifeEnvWith(t, "", func(c *workspace.Config) {
		b, err := snapshot.NewFileBackend(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		rs = &readSignal{Backend: b, read: make(chan struct{})}
		c.Snapshots = snapshot.NewStore(rs)
	})
	eng := &gatedEngine{Local: l.local, store: rs}
	l.cfg.Sandboxes = eng
	svc := workspace.New(l.cfg)
	t.Cleanup(svc.Close)
	l.svc = svc
	ctx := context.Background()
	l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "first"})
	if _, err := svc.Suspend(ctx, l.caller, l.id); err != nil {
		t.Fatal(err)
	}
	l.clock.Add(25 * time.Hour)
	if _, err := svc.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if s := l.session(); s.State != workspace.StateArchived {
		t.Fatalf("the session is %s, want archived", s.State)
	}
	rs.armed.Store(true)
	eng.armed.Store(true)
	return l, eng
}

// TestWakeReadsWhileSandboxStarts: a wake from an archive reads the archive from the
// store while its sandbox is created, not after.
func TestWakeReadsWhileSandboxStarts(t *testing.T) {
	l, eng := newWakeEnv(t)
	if got := l.read("a.txt"); got != "first" {
		t.Fatalf("after the wake a.txt reads %q", got)
	}
	if !eng.sawRead.Load() {
		t.Errorf("the sandbox was created before the archive was read from the store")
	}
}

// TestWakeOverlapFailures: a store that fails while the sandbox starts, or a sandbox
// that fails while the store is read, fails the wake retryably; the session stays
// archived with its archive and the reason, no sandbox is left, and once both answer
// the next call wakes it whole.
func TestWakeOverlapFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(*gatedEngine)
	}{
		{"the store fails", func(g *gatedEngine) { g.store.failing.Store(true) }},
		{"the sandbox fails", func(g *gatedEngine) { g.down.Store(true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, eng := newWakeEnv(t)
			archived := l.session()
			tc.fail(eng)
			ctx := context.Background()
			_, err := l.svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
			if !workspace.Retryable(err) {
				t.Fatalf("the failed wake answers %v, want a retryable error", err)
			}
			if s := l.session(); s.State != workspace.StateArchived || s.Archive != archived.Archive || s.WakeError == "" {
				t.Errorf("after the failed wake the session is %s (archive %q, wakeError %q), want archived (%q) with the reason",
					s.State, s.Archive, s.WakeError, archived.Archive)
			}
			if boxes, _ := l.local.List(ctx, nil); len(boxes) != 0 {
				t.Errorf("the failed wake left sandboxes: %+v", boxes)
			}
			eng.store.failing.Store(false)
			eng.down.Store(false)
			if got := l.read("a.txt"); got != "first" {
				t.Errorf("the next wake reads a.txt as %q", got)
			}
		})
	}
}
