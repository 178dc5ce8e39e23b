package workspace_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// tenants is a fake workspace.Tenants: a fixed policy per tenant.
type tenants map[string]*policy.Policy

func (t tenants) Policy(name string) (*policy.Policy, bool) {
	p, ok := t[name]
	return p, ok
}

// testTenant and otherTenant are the tenants every env knows.
const (
	testTenant  = "acme"
	otherTenant = "globex"
)

// newEnv returns a Service over memstore and sandboxtest.Local whose tenant has the
// policy tenantPolicyJSON ("" means "{}"), a caller of that tenant and a ready session.
// The workspace policy file is re-read on every call (PolicyTTL 1 ns), so a test may
// change it on the host between calls.
func newEnv(t *testing.T, tenantPolicyJSON string) (*workspace.Service, workspace.Caller, string, *sandboxtest.Local) {
	t.Helper()
	if tenantPolicyJSON == "" {
		tenantPolicyJSON = "{}"
	}
	tp, err := policy.Parse([]byte(tenantPolicyJSON))
	if err != nil {
		t.Fatalf("tenant policy: %v", err)
	}
	other, _ := policy.Parse([]byte("{}"))
	local := sandboxtest.New(t)
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff,
		Store:        memstore.New(),
		Sandboxes:    local,
		Tenants:      tenants{testTenant: tp, otherTenant: other},
		DefaultImage: "test-image",
		PolicyTTL:    time.Nanosecond,
	})
	t.Cleanup(svc.Close)
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	sess, err := svc.CreateSession(context.Background(), caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return svc, caller, sess.ID, local
}

// env bundles newEnv's results with the session's host directory.
type env struct {
	t      *testing.T
	svc    *workspace.Service
	caller workspace.Caller
	id     string
	local  *sandboxtest.Local
	dir    string // the workspace on the host
}

func newTestEnv(t *testing.T, tenantPolicyJSON string) *env {
	t.Helper()
	svc, caller, id, local := newEnv(t, tenantPolicyJSON)
	sess, err := svc.GetSession(context.Background(), caller, id)
	if err != nil {
		t.Fatalf("get session: %v", err)
	}
	dir := local.Dir(sess.Sandbox)
	if dir == "" {
		t.Fatal("session has no sandbox directory")
	}
	return &env{t: t, svc: svc, caller: caller, id: id, local: local, dir: dir}
}

// args marshals a tool's arguments; a string or json.RawMessage is taken as JSON.
func args(t *testing.T, a any) json.RawMessage {
	t.Helper()
	switch v := a.(type) {
	case nil:
		return nil
	case string:
		return json.RawMessage(v)
	case json.RawMessage:
		return v
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatalf("marshal args: %v", err)
	}
	return b
}

// call runs a tool and returns its result or error as they are.
func (e *env) call(tool string, a any) (*workspace.Result, error) {
	e.t.Helper()
	return e.callOpts(tool, a, workspace.CallOptions{})
}

func (e *env) callOpts(tool string, a any, opts workspace.CallOptions) (*workspace.Result, error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return e.svc.Call(ctx, e.caller, e.id, tool, args(e.t, a), opts)
}

// ok runs a tool that must succeed with a result that is not an error and returns its Value.
func (e *env) ok(tool string, a any) any {
	e.t.Helper()
	res, err := e.call(tool, a)
	if err != nil {
		e.t.Fatalf("%s(%.300s): %v", tool, args(e.t, a), err)
	}
	if res.IsError {
		e.t.Fatalf("%s(%.300s): error result %s", tool, args(e.t, a), asJSON(res.Value))
	}
	return res.Value
}

// failed runs a tool that must return an error result (IsError) and returns its Value.
func (e *env) failed(tool string, a any) any {
	e.t.Helper()
	res, err := e.call(tool, a)
	if err != nil {
		e.t.Fatalf("%s(%.300s): want an error result, got error %v", tool, args(e.t, a), err)
	}
	if !res.IsError {
		e.t.Fatalf("%s(%.300s): want an error result, got %s", tool, args(e.t, a), asJSON(res.Value))
	}
	return res.Value
}

// failure runs a tool that must fail with an error result carrying a workspace.Failure
// and returns its code.
func (e *env) failure(tool string, a any) workspace.FailureDetail {
	e.t.Helper()
	v := e.failed(tool, a)
	f, ok := v.(workspace.Failure)
	if !ok {
		e.t.Fatalf("%s: error result is %T, want workspace.Failure", tool, v)
	}
	return f.Error
}

// refused runs a tool that must fail with an error of class want (errors.Is) and
// returns the error.
func (e *env) refused(want error, tool string, a any) error {
	e.t.Helper()
	res, err := e.call(tool, a)
	if err == nil {
		e.t.Fatalf("%s(%.300s): want %v, got result %.300s", tool, args(e.t, a), want, asJSON(res.Value))
	}
	if !errors.Is(err, want) {
		e.t.Fatalf("%s(%.300s): want %v, got %v", tool, args(e.t, a), want, err)
	}
	return err
}

// path is a workspace-relative path on the host.
func (e *env) path(rel string) string { return filepath.Join(e.dir, filepath.FromSlash(rel)) }

// put writes a file in the workspace from the host, creating parent directories.
func (e *env) put(rel, content string) {
	e.t.Helper()
	p := e.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// get reads a workspace file from the host; a missing file fails the test.
func (e *env) get(rel string) string {
	e.t.Helper()
	b, err := os.ReadFile(e.path(rel))
	if err != nil {
		e.t.Fatalf("read %s on the host: %v", rel, err)
	}
	return string(b)
}

// exists reports whether a workspace path exists on the host (without following a
// final symlink).
func (e *env) exists(rel string) bool {
	_, err := os.Lstat(e.path(rel))
	return err == nil
}

func (e *env) symlink(target, rel string) {
	e.t.Helper()
	p := e.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		e.t.Fatal(err)
	}
}

func asJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// value asserts a tool result's type.
func value[T any](t *testing.T, v any) T {
	t.Helper()
	r, ok := v.(T)
	if !ok {
		var zero T
		t.Fatalf("result is %T, want %T", v, zero)
	}
	return r
}

// contains reports whether s contains every sub.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// sub returns e reporting to t, for use inside t.Run.
func (e *env) sub(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}
