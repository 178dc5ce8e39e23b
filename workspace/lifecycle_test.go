package workspace_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

func newClock() *clock { return &clock{t: time.Now()} }

// lifeEnv is a Service with a snapshot store in a directory, over memstore and
// sandboxtest.Local.
type lifeEnv struct {
	*env
	store   *memstore.Store
	snaps   *snapshot.Store
	clock   *clock
	cfg     workspace.Config
	snapDir string // the snapshot store's directory
}

func newLifeEnv(t *testing.T, tenantPolicyJSON string) *lifeEnv {
	t.Helper()
	return newLifeEnvWith(t, tenantPolicyJSON, nil)
}

// newLifeEnvWith is newLifeEnv with configure applied to the Service's Config.
func newLifeEnvWith(t *testing.T, tenantPolicyJSON string, configure func(*workspace.Config)) *lifeEnv {
	t.Helper()
	if tenantPolicyJSON == "" {
		tenantPolicyJSON = "{}"
	}
	tp, err := policy.Parse([]byte(tenantPolicyJSON))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := policy.Parse([]byte("{}"))
	snapDir := t.TempDir()
	b, err := snapshot.NewFileBackend(snapDir)
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock()
	l := &lifeEnv{store: memstore.New(), snaps: snapshot.NewStore(b), clock: clk, snapDir: snapDir}
	l.cfg = workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: l.store, Sandboxes: sandboxtest.New(t),
		Tenants: tenants{testTenant: tp, otherTenant: other}, DefaultImage: "test-image", PolicyTTL: time.Nanosecond,
		Snapshots: l.snaps, SuspendAfter: 10 * time.Minute, ArchiveAfter: 24 * time.Hour, Now: clk.Now, RenewFlush: time.Hour,
		DefaultIdleTTL: 7 * 24 * time.Hour, DefaultMaxLife: 30 * 24 * time.Hour}
	if configure != nil {
		configure(&l.cfg)
	}
	svc := workspace.New(l.cfg)
	t.Cleanup(svc.Close)
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	sess, err := svc.CreateSession(context.Background(), caller, workspace.CreateRequest{Env: map[string]string{"LANG": "C.UTF-8"}, Labels: map[string]string{"team": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	local := l.cfg.Sandboxes.(*sandboxtest.Local)
	l.env = &env{t: t, svc: svc, caller: caller, id: sess.ID, local: local, dir: local.Dir(sess.Sandbox)}
	return l
}

func (l *lifeEnv) session() *workspace.Session {
	l.t.Helper()
	s, err := l.store.GetSession(context.Background(), testTenant, l.id)
	if err != nil {
		l.t.Fatal(err)
	}
	return s
}

// archive suspends the session and lets the reaper archive it 25 hours later (past
// archiveAfter, within its life); it returns the archived session.
func (l *lifeEnv) archive() *workspace.Session {
	l.t.Helper()
	if _, err := l.svc.Suspend(context.Background(), l.caller, l.id); err != nil {
		l.t.Fatal(err)
	}
	l.clock.Add(25 * time.Hour)
	if _, err := l.svc.Reap(context.Background()); err != nil {
		l.t.Fatal(err)
	}
	sess := l.session()
	if sess.State != workspace.StateArchived {
		l.t.Fatalf("the session is %s, want archived", sess.State)
	}
	return sess
}

func (l *lifeEnv) read(path string) string {
	l.t.Helper()
	v := l.ok("readFile", map[string]any{"path": path})
	b, _ := json.Marshal(v)
	var r struct{ Content string }
	_ = json.Unmarshal(b, &r)
	return r.Content
}

// TestSuspendWake: a suspended session has no running sandbox; the next call wakes it
// and answers as if nothing happened; suspend and resume are idempotent; another
// tenant's session is not found.
func TestSuspendWake(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	l.ok("writeFile", map[string]any{"path": "kept.txt", "contents": "still here"})
	sess, err := l.svc.Suspend(ctx, l.caller, l.id)
	if err != nil || sess.State != workspace.StateSuspended {
		t.Fatalf("Suspend = %+v, %v", sess, err)
	}
	if again, err := l.svc.Suspend(ctx, l.caller, l.id); err != nil || again.State != workspace.StateSuspended {
		t.Errorf("a second Suspend = %+v, %v", again, err)
	}
	if boxes, _ := l.local.List(ctx, nil); len(boxes) != 1 || boxes[0].Running {
		t.Fatalf("after suspend the sandbox is %+v, want one, stopped", boxes)
	}
	starts := l.local.Starts
	if got := l.read("kept.txt"); got != "still here" {
		t.Errorf("readFile after suspend = %q", got)
	}
	if st := l.session().State; st != workspace.StateReady {
		t.Errorf("after the call the session is %s, want ready", st)
	}
	if l.local.Starts != starts+1 {
		t.Errorf("the wake started the sandbox %d times, want once", l.local.Starts-starts)
	}
	if got, err := l.svc.Resume(ctx, l.caller, l.id); err != nil || got.State != workspace.StateReady {
		t.Errorf("Resume of a ready session = %+v, %v", got, err)
	}
	other := workspace.Caller{Tenant: otherTenant, Subject: "eve", Scopes: auth.AllScopes()}
	for name, f := range map[string]func() error{
		"suspend": func() error { _, err := l.svc.Suspend(ctx, other, l.id); return err },
		"resume":  func() error { _, err := l.svc.Resume(ctx, other, l.id); return err },
		"unknown": func() error { _, err := l.svc.Suspend(ctx, l.caller, "s-nope"); return err },
	} {
		if err := f(); !errors.Is(err, workspace.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
		}
	}
	noScope := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: []string{auth.ScopeToolsRead}}
	if _, err := l.svc.Suspend(ctx, noScope, l.id); !errors.Is(err, workspace.ErrForbidden) {
		t.Errorf("Suspend without the sessions scope: %v, want ErrForbidden", err)
	}
}

// TestWakeOnce: 50 concurrent calls on a suspended session wake it once and all answer,
// also when they come while the wake's start is under way (the session is recorded
// ready just before it): they wait for that start instead of making their own.
func TestWakeOnce(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "x"})
	if _, err := l.svc.Suspend(ctx, l.caller, l.id); err != nil {
		t.Fatal(err)
	}
	l.local.StartDelay = 300 * time.Millisecond
	starts := l.local.Starts
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := range 50 {
		if i == 25 {
			time.Sleep(100 * time.Millisecond) // the rest come during the start
		}
		wg.Go(func() {
			_, err := l.svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a call on the suspended session: %v", err)
		}
	}
	if n := l.local.Starts - starts; n != 1 {
		t.Errorf("50 calls started the sandbox %d times, want 1", n)
	}
}

// TestIdleSuspend: the reaper suspends a session idle past suspendAfter (a workspace
// file may only shorten it), archives it past archiveAfter, and a call wakes it from
// the archive with its files.
func TestIdleSuspend(t *testing.T) {
	l := newLifeEnv(t, `{"suspendAfter": "1h"}`)
	ctx := context.Background()
	l.ok("writeFile", map[string]any{"path": "src/main.go", "contents": "package main\n"})
	l.put(".cws-policy.json", `{"suspendAfter": "5m"}`)
	l.clock.Add(time.Second)
	l.read("src/main.go") // the workspace's policy is read by a call
	l.clock.Add(4 * time.Minute)
	if _, err := l.svc.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if st := l.session().State; st != workspace.StateReady {
		t.Fatalf("after 4 idle minutes the session is %s, want ready", st)
	}
	l.clock.Add(2 * time.Minute)
	if _, err := l.svc.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if st := l.session().State; st != workspace.StateSuspended {
		t.Fatalf("after 6 idle minutes (workspace suspendAfter 5m) the session is %s, want suspended", st)
	}
	l.clock.Add(25 * time.Hour)
	if _, err := l.svc.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	sess := l.session()
	if sess.State != workspace.StateArchived || sess.Archive == "" || sess.Sandbox != "" {
		t.Fatalf("after 25 suspended hours the session is %+v, want archived", sess)
	}
	if boxes, _ := l.local.List(ctx, nil); len(boxes) != 0 {
		t.Errorf("an archived session still has sandboxes: %+v", boxes)
	}
	if got := l.read("src/main.go"); got != "package main\n" {
		t.Errorf("readFile after the archive = %q", got)
	}
	woke := l.session()
	if woke.State != workspace.StateReady || woke.Archive != "" || woke.Env["LANG"] != "C.UTF-8" || woke.Labels["team"] != "a" {
		t.Errorf("woken from the archive: %+v", woke)
	}
	if _, err := l.snaps.Get(ctx, testTenant, sess.Archive); !errors.Is(err, snapshot.ErrNotFound) {
		t.Errorf("the archive outlived the wake: %v", err)
	}
}

// TestSuspendedProcesses: background processes end at suspend and are reported as
// ended by it, with their output up to then.
func TestSuspendedProcesses(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	p := l.ok("startProcess", map[string]any{"command": "sh", "args": []string{"-c", "echo before; sleep 20"}})
	id := fmt.Sprint(asMap(t, p)["id"])
	deadline := time.Now().Add(10 * time.Second)
	for {
		out := asMap(t, l.ok("readProcessOutput", map[string]any{"id": id}))
		if out["stdout"] == "before\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output: %v", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := l.svc.Suspend(ctx, l.caller, l.id); err != nil {
		t.Fatal(err)
	}
	out := asMap(t, l.ok("readProcessOutput", map[string]any{"id": id}))
	proc := out["process"].(map[string]any)
	if out["stdout"] != "before\n" || proc["running"] != false || proc["endReason"] != "suspended" {
		t.Errorf("readProcessOutput after the wake = %v", out)
	}
	list := asMap(t, l.ok("listProcesses", map[string]any{}))
	found := false
	for _, p := range list["processes"].([]any) {
		if m := p.(map[string]any); m["id"] == id {
			found = m["endReason"] == "suspended" && m["running"] == false
		}
	}
	if !found {
		t.Errorf("listProcesses after the wake = %v", list)
	}
}

func asMap(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSnapshotsAndFork: a snapshot holds the whole tree (denied paths too) and the
// session's image, env and labels; a session made from it has them; forks are
// independent of each other and of the source; bad input is refused with the field.
func TestSnapshotsAndFork(t *testing.T) {
	l := newLifeEnv(t, `{"deniedPaths": [".env"], "maxSnapshots": 2}`)
	ctx := context.Background()
	l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "one"})
	l.put(".env", "SECRET=1\n")
	snap, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "first")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Name != "first" || snap.Files != 2 || snap.Image != "test-image" || snap.Labels["team"] != "a" {
		t.Errorf("snapshot = %+v", snap)
	}
	l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "two"})
	from, err := l.svc.CreateSession(ctx, l.caller, workspace.CreateRequest{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if from.Env["LANG"] != "C.UTF-8" || from.Labels["team"] != "a" {
		t.Errorf("session from the snapshot: %+v", from)
	}
	fromDir := l.local.Dir(from.Sandbox)
	fe := &env{t: t, svc: l.svc, caller: l.caller, id: from.ID, local: l.local, dir: fromDir}
	if fe.get("a.txt") != "one" || fe.get(".env") != "SECRET=1\n" {
		t.Errorf("the session from the snapshot holds a.txt %q, .env %q", fe.get("a.txt"), fe.get(".env"))
	}

	// Quotas and bad ids.
	if _, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "second"); err != nil {
		t.Fatal(err)
	}
	var v *policy.Violation
	if _, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "third"); !errors.As(err, &v) || v.Rule != "maxSnapshots" {
		t.Errorf("a third snapshot past maxSnapshots 2: %v", err)
	}
	for _, bad := range []string{"../etc", "snap-" + string(make([]byte, 10000))} {
		if _, err := l.svc.GetSnapshot(ctx, l.caller, bad); !errors.Is(err, workspace.ErrInvalid) {
			t.Errorf("GetSnapshot(%.20q): %v, want ErrInvalid", bad, err)
		}
	}
	other := workspace.Caller{Tenant: otherTenant, Subject: "eve", Scopes: auth.AllScopes()}
	if _, err := l.svc.GetSnapshot(ctx, other, snap.ID); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("another tenant's GetSnapshot: %v, want ErrNotFound", err)
	}
	if _, err := l.svc.CreateSession(ctx, other, workspace.CreateRequest{Snapshot: snap.ID}); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("another tenant's create from the snapshot: %v, want ErrNotFound", err)
	}
	if err := l.svc.DeleteSnapshot(ctx, l.caller, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := l.svc.CreateSession(ctx, l.caller, workspace.CreateRequest{Snapshot: snap.ID}); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("create from a deleted snapshot: %v, want ErrNotFound", err)
	}

	// Fork.
	for _, n := range []int{0, 17, -1} {
		if _, err := l.svc.Fork(ctx, l.caller, l.id, n); !errors.As(err, &v) || v.Rule != "count" {
			t.Errorf("Fork count %d: %v, want invalid count", n, err)
		}
	}
	res, err := l.svc.Fork(ctx, l.caller, l.id, 3)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for i, s := range res.Sessions {
		if res.Errors[i] != nil {
			t.Fatalf("fork %d: %v", i, res.Errors[i])
		}
		dirs = append(dirs, l.local.Dir(s.Sandbox))
	}
	for i, d := range dirs {
		fe := &env{t: t, dir: d}
		if fe.get("a.txt") != "two" || fe.get(".env") != "SECRET=1\n" {
			t.Errorf("fork %d holds a.txt %q", i, fe.get("a.txt"))
		}
		fe.put("mine.txt", fmt.Sprint(i))
	}
	for i, d := range dirs {
		fe := &env{t: t, dir: d}
		if fe.get("mine.txt") != fmt.Sprint(i) {
			t.Errorf("fork %d sees another fork's write", i)
		}
	}
	if l.exists("mine.txt") {
		t.Error("the source sees a fork's write")
	}
}

// TestReconcileAfterFlush: a store that lost everything gets back a suspended session
// (from its stopped sandbox) and an archived one (from its archive).
func TestReconcileAfterFlush(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "archived"})
	second, err := l.svc.CreateSession(ctx, l.caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.svc.Suspend(ctx, l.caller, second.ID); err != nil {
		t.Fatal(err)
	}
	l.archive()
	// The store forgets everything; a new Service over it reconciles.
	for _, s := range []string{l.id, second.ID} {
		_ = l.store.DeleteSession(ctx, testTenant, s)
	}
	svc := workspace.New(l.cfg)
	t.Cleanup(svc.Close)
	if err := svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{l.id: workspace.StateArchived, second.ID: workspace.StateArchived} {
		s, err := l.store.GetSession(ctx, testTenant, id)
		if err != nil {
			t.Errorf("session %s not adopted: %v", id, err)
			continue
		}
		// the second was archived by the same reap (suspended 25 h)
		if s.State != want {
			t.Errorf("session %s adopted as %s, want %s", id, s.State, want)
		}
	}
	res, err := svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
	if err != nil || !containsAll(asJSON(res.Value), "archived") {
		t.Errorf("readFile on the adopted archived session: %v, %v", res, err)
	}
}

// flakyEngine is a sandbox engine that is down while down is set: Start fails.
type flakyEngine struct {
	*sandboxtest.Local
	down     atomic.Bool
	delay    time.Duration // how long a failing Start takes
	attempts atomic.Int32  // Start calls
}

func (f *flakyEngine) Start(ctx context.Context, id string) error {
	f.attempts.Add(1)
	if f.down.Load() {
		time.Sleep(f.delay)
		return errors.New("Cannot connect to the Docker daemon")
	}
	return f.Local.Start(ctx, id)
}

// TestWakeEngineDown: a wake while the engine is down answers a retryable
// ErrUnavailable, and the session stays suspended and whole; once the engine is back
// the same call works.
func TestWakeEngineDown(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	eng := &flakyEngine{Local: l.local}
	l.cfg.Sandboxes = eng
	svc := workspace.New(l.cfg)
	t.Cleanup(svc.Close)
	l.svc = svc
	l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "whole"})
	if _, err := svc.Suspend(ctx, l.caller, l.id); err != nil {
		t.Fatal(err)
	}
	eng.down.Store(true)
	_, err := svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
	if !errors.Is(err, workspace.ErrUnavailable) || !workspace.Retryable(err) {
		t.Errorf("a call while the engine is down: %v, want a retryable ErrUnavailable", err)
	}
	if st := l.session().State; st != workspace.StateSuspended {
		t.Errorf("after a failed wake the session is %s, want suspended", st)
	}

	// Calls that come while the failing start is under way (the session recorded ready
	// meanwhile) fail with it: none starts the sandbox itself, which would leave a
	// suspended session running.
	eng.delay = 300 * time.Millisecond
	eng.attempts.Store(0)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		if i == 5 {
			time.Sleep(100 * time.Millisecond)
		}
		wg.Go(func() {
			_, err := svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, workspace.ErrUnavailable) {
			t.Errorf("a call during a failing wake: %v, want ErrUnavailable", err)
		}
	}
	if n := eng.attempts.Load(); n != 1 {
		t.Errorf("%d starts during one failing wake, want 1 (the wake's)", n)
	}
	if st := l.session().State; st != workspace.StateSuspended {
		t.Errorf("after the failed wake the session is %s, want suspended", st)
	}
	if boxes, _ := l.local.List(ctx, nil); len(boxes) != 1 || boxes[0].Running {
		t.Errorf("after the failed wake the sandbox is %+v, want stopped", boxes)
	}

	eng.down.Store(false)
	if got := l.read("a.txt"); got != "whole" {
		t.Errorf("readFile once the engine is back = %q", got)
	}
}

// TestSnapshotBytesQuota: a snapshot past maxSnapshotBytes is refused naming the limit,
// and records nothing.
func TestSnapshotBytesQuota(t *testing.T) {
	l := newLifeEnv(t, `{"maxSnapshotBytes": 1000}`)
	ctx := context.Background()
	l.put("small.txt", "0123456789")
	if _, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "fits"); err != nil {
		t.Fatalf("a 10-byte snapshot under a 1000-byte limit: %v", err)
	}
	l.put("big.bin", string(make([]byte, 2000)))
	var v *policy.Violation
	_, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "too big")
	if !errors.As(err, &v) || v.Rule != "maxSnapshotBytes" || !errors.Is(err, workspace.ErrQuota) || !containsAll(err.Error(), "1000") {
		t.Fatalf("a snapshot past maxSnapshotBytes: %v, want a quota error naming maxSnapshotBytes and 1000", err)
	}
	if list, err := l.svc.ListSnapshots(ctx, l.caller); err != nil || len(list) != 1 {
		t.Errorf("after the refusal the tenant has %d snapshots (%v), want 1", len(list), err)
	}
}

// TestWakeFromBrokenArchive: an archive that can't be read whole (a content gone from
// the store) never wakes into a partial workspace: the call says the session is lost,
// the session stays archived and its archive stays where it is.
func TestWakeFromBrokenArchive(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	l.ok("writeFile", map[string]any{"path": "a.txt", "contents": "first"})
	l.ok("writeFile", map[string]any{"path": "b.txt", "contents": "second"})
	archived := l.archive()
	blobs, _ := filepath.Glob(filepath.Join(l.snapDir, testTenant, "packs", "*", "*"))
	if len(blobs) == 0 {
		t.Fatal("no packs in the store")
	}
	if err := os.Remove(blobs[len(blobs)-1]); err != nil {
		t.Fatal(err)
	}
	_, err := l.svc.Call(ctx, l.caller, l.id, "readFile", args(t, map[string]any{"path": "a.txt"}), workspace.CallOptions{})
	if !errors.Is(err, workspace.ErrSessionLost) {
		t.Errorf("a call on a session whose archive lost a file: %v, want ErrSessionLost", err)
	}
	if s := l.session(); s.State != workspace.StateArchived || s.Archive != archived.Archive {
		t.Errorf("after the failed wake the session is %s (archive %q), want archived (%q)", s.State, s.Archive, archived.Archive)
	}
	if _, err := l.snaps.Get(ctx, testTenant, archived.Archive); err != nil {
		t.Errorf("the archive is gone after the failed wake: %v", err)
	}
	if boxes, _ := l.local.List(ctx, nil); len(boxes) != 0 {
		t.Errorf("the failed wake left sandboxes: %+v", boxes)
	}
}

// TestActionsAudited: renew, snapshot and fork are in the session's audit timeline,
// with the caller and what each made.
func TestActionsAudited(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	if _, err := l.svc.RenewSession(ctx, l.caller, l.id); err != nil {
		t.Fatal(err)
	}
	snap, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "audited")
	if err != nil {
		t.Fatal(err)
	}
	fork, err := l.svc.Fork(ctx, l.caller, l.id, 1)
	if err != nil || fork.Errors[0] != nil {
		t.Fatalf("fork: %v %v", err, fork)
	}
	want := map[string]string{"session.renew": "", "session.snapshot": snap.ID, "session.fork": fork.Sessions[0].ID}
	eventually(t, "renew, snapshot and fork in the audit timeline", func() bool {
		recs, err := l.svc.SessionAudit(ctx, l.caller, l.id, 0)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, r := range recs {
			if target, ok := want[r.Tool]; ok && r.Target == target && r.Subject == "alice" && r.Outcome == "ok" {
				found++
			}
		}
		return found == len(want)
	})
}

// TestSnapshotRefsAfterCollection: a second snapshot of an unchanged workspace sends
// its files as references and stores almost nothing; once the store lost what those
// references name (both snapshots deleted and collected), the next snapshot is taken
// whole, and a session made from it has every file.
func TestSnapshotRefsAfterCollection(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	for i := range 20 {
		l.ok("writeFile", map[string]any{"path": fmt.Sprintf("src/f%02d.txt", i), "contents": strings.Repeat(fmt.Sprint(i), 3000)})
	}
	time.Sleep(2100 * time.Millisecond) // files changed in the last 2 s are always sent whole
	first, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "first")
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "second")
	if err != nil {
		t.Fatal(err)
	}
	if second.Stored >= first.Stored/2 {
		t.Errorf("the second snapshot stored %d bytes, the first %d: want references, not contents", second.Stored, first.Stored)
	}
	for _, id := range []string{first.ID, second.ID} {
		if err := l.svc.DeleteSnapshot(ctx, l.caller, id); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if _, _, err := l.snaps.Collect(ctx, testTenant, 0); err != nil {
		t.Fatal(err)
	}
	third, err := l.svc.CreateSnapshot(ctx, l.caller, l.id, "third")
	if err != nil {
		t.Fatalf("a snapshot after its references' contents were collected: %v", err)
	}
	from, err := l.svc.CreateSession(ctx, l.caller, workspace.CreateRequest{Snapshot: third.ID})
	if err != nil {
		t.Fatal(err)
	}
	l.id = from.ID
	if got := l.read("src/f07.txt"); got != strings.Repeat("7", 3000) {
		t.Errorf("src/f07.txt of a session made from the third snapshot: %.20q…", got)
	}
}

// TestWakeFromOldFormatArchive: an archive an older cws wrote (one object per file, no
// pack files) wakes whole after the upgrade.
func TestWakeFromOldFormatArchive(t *testing.T) {
	l := newLifeEnv(t, "")
	ctx := context.Background()
	l.ok("writeFile", map[string]any{"path": "src/a.txt", "contents": "first"})
	l.ok("writeFile", map[string]any{"path": "src/deep/b.txt", "contents": strings.Repeat("b", 70000)})
	l.ok("writeFile", map[string]any{"path": "empty.txt", "contents": ""})
	archived := l.archive()
	if err := l.snaps.UnpackForTests(ctx, testTenant, archived.Archive); err != nil {
		t.Fatal(err)
	}
	if packs, _ := filepath.Glob(filepath.Join(l.snapDir, testTenant, "packs", "*", "*")); len(packs) != 0 {
		t.Fatalf("the old-format archive still has packs: %v", packs)
	}
	if blobs, _ := filepath.Glob(filepath.Join(l.snapDir, testTenant, "blobs", "*", "*")); len(blobs) < 2 {
		t.Fatalf("the old-format archive has %d blobs", len(blobs))
	}
	if got := l.read("src/deep/b.txt"); got != strings.Repeat("b", 70000) {
		t.Errorf("src/deep/b.txt after the wake: %.20q…", got)
	}
	if got := l.read("src/a.txt"); got != "first" {
		t.Errorf("src/a.txt after the wake: %q", got)
	}
	if s := l.session(); s.State != workspace.StateReady {
		t.Errorf("after the wake the session is %s", s.State)
	}
}
