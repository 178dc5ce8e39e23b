package workspace_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// clock is a settable clock for TTL tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func faultService(t *testing.T, store workspace.Store, local *sandboxtest.Local, now func() time.Time) *workspace.Service {
	t.Helper()
	tp, _ := policy.Parse([]byte("{}"))
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: local, Tenants: tenants{testTenant: tp},
		DefaultImage: "test-image", Now: now, DefaultIdleTTL: time.Hour})
	t.Cleanup(svc.Close)
	return svc
}

// A stopped sandbox is started again by the call that finds it stopped.
func TestStoppedSandboxStartsOnCall(t *testing.T) {
	e := newTestEnv(t, "")
	e.ok("writeFile", map[string]any{"path": "a.txt", "contents": "x"})
	sess, _ := e.svc.GetSession(context.Background(), e.caller, e.id)
	e.local.Stop(sess.Sandbox)
	e.ok("readFile", map[string]any{"path": "a.txt"})
	if e.local.Starts != 1 {
		t.Errorf("Starts = %d, want 1", e.local.Starts)
	}
}

// A removed sandbox is a lost session: ErrSessionLost on every call, and a failed call
// never renews the idle TTL.
func TestRemovedSandboxIsLostAndNotRenewed(t *testing.T) {
	ck := &clock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	local := sandboxtest.New(t)
	svc := faultService(t, memstore.New(), local, ck.Now)
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	ctx := context.Background()
	sess, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_ = local.Remove(ctx, sess.Sandbox)
	ck.Add(30 * time.Minute)
	for range 2 {
		_, err := svc.Call(ctx, caller, sess.ID, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
		if !errors.Is(err, workspace.ErrSessionLost) {
			t.Fatalf("call on a removed sandbox: %v, want ErrSessionLost", err)
		}
	}
	got, err := svc.GetSession(ctx, caller, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != workspace.StateLost || !got.LastUsed.Equal(sess.LastUsed) {
		t.Errorf("after failed calls: state %s, lastUsed %v; want lost, %v (not renewed)", got.State, got.LastUsed, sess.LastUsed)
	}
}

// After the store loses everything, the default session and a session reached by id
// are adopted from their sandboxes; a deleted session does not come back.
func TestStoreLossAdopts(t *testing.T) {
	local := sandboxtest.New(t)
	ctx := context.Background()
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	before := faultService(t, memstore.New(), local, nil)
	if _, err := before.CallDefault(ctx, caller, "listFiles", args(t, map[string]any{"path": "."}), workspace.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	first, _ := before.ListSessions(ctx, caller)
	if len(first) != 1 {
		t.Fatalf("sessions after the first default call: %d", len(first))
	}
	dflt := first[0]
	other, err := before.CreateSession(ctx, caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := before.CreateSession(ctx, caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := before.DeleteSession(ctx, caller, gone.ID); err != nil {
		t.Fatal(err)
	}

	after := faultService(t, memstore.New(), local, nil) // the store forgot everything
	creates := local.Creates
	if _, err := after.CallDefault(ctx, caller, "listFiles", args(t, map[string]any{"path": "."}), workspace.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	if local.Creates != creates {
		t.Fatalf("the default call after store loss created a new sandbox")
	}
	if got, err := after.GetSession(ctx, caller, dflt.ID); err != nil || got.State != workspace.StateReady {
		t.Fatalf("default session %s after store loss: %v %v", dflt.ID, got, err)
	}
	if _, err := after.GetSession(ctx, caller, other.ID); err != nil {
		t.Errorf("session by id after store loss: %v", err)
	}
	if _, err := after.GetSession(ctx, caller, gone.ID); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("deleted session after store loss: %v, want ErrNotFound", err)
	}
	if err := after.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	list, _ := after.ListSessions(ctx, caller)
	if len(list) != 2 {
		t.Errorf("sessions after reconcile: %d, want 2", len(list))
	}
}

// sweepingLocal is a Local that also sweeps orphan volumes, recording how it is asked.
type sweepingLocal struct {
	*sandboxtest.Local
	olderThan time.Duration
	asked     []string // tenants asked about
	serves    map[string]bool
}

func (s *sweepingLocal) RemoveOrphanVolumes(_ context.Context, olderThan time.Duration, serves func(string) bool) ([]string, error) {
	s.olderThan = olderThan
	s.serves = map[string]bool{}
	for _, t := range s.asked {
		s.serves[t] = serves(t)
	}
	return nil, nil
}

// Reconcile sweeps the orphan workspace volumes of the tenants it serves, leaving any
// volume younger than a create could take.
func TestReconcileSweepsOrphanVolumes(t *testing.T) {
	sl := &sweepingLocal{Local: sandboxtest.New(t), asked: []string{testTenant, "someone-else"}}
	tp, _ := policy.Parse([]byte("{}"))
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: sl, Tenants: tenants{testTenant: tp},
		DefaultImage: "test-image", DefaultIdleTTL: time.Hour})
	t.Cleanup(svc.Close)
	if err := svc.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sl.serves == nil {
		t.Fatal("Reconcile did not sweep orphan volumes")
	}
	if sl.olderThan < 5*time.Minute {
		t.Errorf("swept volumes older than %v: a create in progress could lose its volume", sl.olderThan)
	}
	if !sl.serves[testTenant] || sl.serves["someone-else"] {
		t.Errorf("serves = %v, want only %s", sl.serves, testTenant)
	}
}
