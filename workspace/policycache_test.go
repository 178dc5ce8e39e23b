package workspace_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// TestPolicyCache: the workspace policy is cached for PolicyTTL, and dropped at once
// when cws itself writes the file (a file tool, an upload); a change behind cws's back
// takes effect when the TTL runs out.
func TestPolicyCache(t *testing.T) {
	clock := &testClock{now: time.Now()}
	tp, err := policy.Parse([]byte(`{"allowPolicyWrites": true}`))
	if err != nil {
		t.Fatal(err)
	}
	local := sandboxtest.New(t)
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Store: memstore.New(), Sandboxes: local, Tenants: tenants{testTenant: tp},
		DefaultImage: "test-image", Now: clock.Now, PolicyTTL: time.Hour, DefaultIdleTTL: 24 * time.Hour})
	defer svc.Close()
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	sess, err := svc.CreateSession(t.Context(), caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	dir := local.Dir(sess.Sandbox)
	for _, f := range []string{"a.txt", "b.txt", "c.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	denied := func(path string) bool {
		t.Helper()
		_, err := svc.Call(t.Context(), caller, sess.ID, "readFile", []byte(`{"path":"`+path+`"}`), workspace.CallOptions{})
		if err != nil && !errors.Is(err, workspace.ErrPolicy) {
			t.Fatalf("readFile %s: %v", path, err)
		}
		return err != nil
	}
	if denied("a.txt") {
		t.Fatal("a.txt denied before any workspace policy")
	}

	// A file tool writes the policy: in force on the next call.
	if _, err := svc.Call(t.Context(), caller, sess.ID, "writeFile", []byte(`{"path":".cws-policy.json","contents":"{\"deniedPaths\":[\"a.txt\"]}"}`), workspace.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	if !denied("a.txt") {
		t.Fatal("a.txt readable right after the policy denying it was written")
	}

	// An upload brings another policy: in force on the next call.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	body := []byte(`{"deniedPaths":["b.txt"]}`)
	if err := tw.WriteHeader(&tar.Header{Name: ".cws-policy.json", Mode: 0o644, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(body)
	tw.Close()
	if _, err := svc.Upload(t.Context(), caller, sess.ID, &tb); err != nil {
		t.Fatal(err)
	}
	if denied("a.txt") || !denied("b.txt") {
		t.Fatal("the uploaded policy is not in force on the next call")
	}

	// Behind cws's back: cached until the TTL runs out, then in force.
	if err := os.WriteFile(filepath.Join(dir, ".cws-policy.json"), []byte(`{"deniedPaths":["c.txt"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if denied("c.txt") {
		t.Fatal("c.txt denied before the cached policy's TTL ran out")
	}
	clock.Advance(time.Hour)
	if !denied("c.txt") {
		t.Fatal("c.txt readable after the TTL ran out")
	}
}
