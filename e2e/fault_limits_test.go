package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/redisstore"
	"github.com/cwsdev/cws/workspace/toolset"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

// TestFaultOOMAndDiskFull runs the real Service on the real engine and Redis, with a
// tenant limited to 128 MiB of memory and a workspace on a small tmpfs (the test-only
// TestWorkspaceTmpfsBytes, since a volume quota needs xfs project quotas). A command
// killed by the memory limit says "oom" with a hint; a write that fills the disk
// fails naming the limit, and the old file is whole.
func TestFaultOOMAndDiskFull(t *testing.T) {
	dockerOnly(t, "provokes OOM and a full disk through the Docker driver itself")
	requireRealDeps(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	drv, err := docker.New(docker.Config{AgentBinary: agentBinary, Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	store, err := redisstore.Open(ctx, testenv.Redis(t))
	if err != nil {
		t.Fatal(err)
	}
	tenant := "limits-" + runID
	tp, err := policy.Parse([]byte(`{"allowedPaths":["**"],"allowedCommands":["python3"],"limits":{"memoryMB":128}}`))
	if err != nil {
		t.Fatal(err)
	}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: drv, Tenants: policy.ByTenant{tenant: tp},
		DefaultImage: version.WorkspaceImage, TestWorkspaceTmpfsBytes: 8 << 20})
	t.Cleanup(func() { svc.Close(); store.Close() })
	caller := workspace.Caller{Tenant: tenant, Subject: "hal", Scopes: auth.AllScopes()}
	sess, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.DeleteSession(context.Background(), caller, sess.ID) })
	call := func(tool string, args any) (*workspace.Result, error) {
		raw, _ := json.Marshal(args)
		return svc.Call(ctx, caller, sess.ID, tool, raw, workspace.CallOptions{})
	}

	t.Run("oom", func(t *testing.T) {
		res, err := call("runCommand", map[string]any{"command": "python3", "args": []string{"-c", "b = [bytearray(16 << 20) for _ in range(64)]"}})
		if err != nil {
			t.Fatal(err)
		}
		r, ok := res.Value.(*core.RunCommandResult)
		if !ok || !res.IsError || r.Reason != "oom" || !strings.Contains(r.Hint, "memory") || !strings.Contains(r.Hint, "128 MiB") {
			b, _ := json.Marshal(res.Value)
			t.Fatalf("a command over the memory limit = %s (isError %v), want reason oom with a hint naming the 128 MiB limit", b, res.IsError)
		}
	})

	t.Run("disk full", func(t *testing.T) {
		const old = "the old content, whole\n"
		if _, err := call("writeFile", map[string]any{"path": "keep.txt", "contents": old}); err != nil {
			t.Fatal(err)
		}
		if _, err := call("writeFile", map[string]any{"path": "fill.bin", "contents": strings.Repeat("x", 6<<20)}); err != nil {
			t.Fatal(err)
		}
		_, err := call("writeFile", map[string]any{"path": "keep.txt", "contents": strings.Repeat("y", 4<<20)})
		var v *policy.Violation
		if !errors.As(err, &v) || !errors.Is(err, workspace.ErrTooLarge) || v.Rule != "disk" || !strings.Contains(v.Detail, "disk is full") {
			t.Fatalf("a write that fills the disk = %v, want ErrTooLarge with rule disk naming the full disk", err)
		}
		res, err := call("readFile", map[string]any{"path": "keep.txt"})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(res.Value); !strings.Contains(string(b), `"content":"the old content, whole\n"`) {
			t.Errorf("keep.txt after the failed write: %s", b)
		}
	})
}
