package workspace_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// unenforcedCounter is an Observer that counts ExecUnenforced and ignores the rest.
type unenforcedCounter struct{ n atomic.Int64 }

func (o *unenforcedCounter) ToolCall(string, string, time.Duration) {}
func (o *unenforcedCounter) PolicyDenial(string)                    {}
func (o *unenforcedCounter) SessionCreated(time.Duration)           {}
func (o *unenforcedCounter) SessionsActive(int)                     {}
func (o *unenforcedCounter) Reaped(string)                          {}
func (o *unenforcedCounter) ExecUnenforced()                        { o.n.Add(1) }

// TestUnenforcedExec runs where Landlock cannot enforce (sandboxtest.Local has no
// launcher): restricted commands run and are counted, unrestricted ones are not, and
// requireLandlock (tenant, or a workspace file turning it on) refuses them as a
// command not allowed. The real enforcement is tested in e2e (TestLandlock).
func TestUnenforcedExec(t *testing.T) {
	for _, tc := range []struct {
		name, tenant, wsPolicy string
		tool                   string
		args                   map[string]any
		refused                bool
		counted                int64
	}{
		{"no allowedCommands: nothing to enforce", `{}`, "", "runCommand", map[string]any{"command": "echo", "args": []string{"x"}}, false, 0},
		{"allowedCommands: runs unenforced, counted", `{"allowedCommands": ["echo"]}`, "", "runCommand", map[string]any{"command": "echo", "args": []string{"x"}}, false, 1},
		{"startProcess counted", `{"allowedCommands": ["echo"]}`, "", "startProcess", map[string]any{"command": "echo", "args": []string{"x"}}, false, 1},
		{"requireLandlock refuses runCommand", `{"allowedCommands": ["echo"], "requireLandlock": true}`, "", "runCommand", map[string]any{"command": "echo"}, true, 0},
		{"requireLandlock refuses startProcess", `{"allowedCommands": ["echo"], "requireLandlock": true}`, "", "startProcess", map[string]any{"command": "echo"}, true, 0},
		{"requireLandlock refuses the git tools", `{"allowedCommands": [], "requireLandlock": true}`, "", "gitStatus", map[string]any{}, true, 0},
		{"a workspace file turns it on", `{"allowedCommands": ["echo"]}`, `{"requireLandlock": true}`, "runCommand", map[string]any{"command": "echo"}, true, 0},
		{"requireLandlock without allowedCommands runs", `{"requireLandlock": true}`, "", "runCommand", map[string]any{"command": "echo"}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := policy.Parse([]byte(tc.tenant))
			if err != nil {
				t.Fatal(err)
			}
			obs := &unenforcedCounter{}
			local := sandboxtest.New(t)
			svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: local, Tenants: tenants{testTenant: tp},
				DefaultImage: "test-image", Observer: obs})
			t.Cleanup(svc.Close)
			caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
			ctx := context.Background()
			sess, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
			if err != nil {
				t.Fatal(err)
			}
			e := &env{t: t, svc: svc, caller: caller, id: sess.ID, local: local, dir: local.Dir(sess.Sandbox)}
			if tc.wsPolicy != "" {
				e.put(policy.FileName, tc.wsPolicy)
			}
			if tc.tool == "gitStatus" {
				e.put(".git/HEAD", "ref: refs/heads/main\n") // any answer but a refusal will do
			}
			res, err := e.call(tc.tool, tc.args)
			switch {
			case tc.refused && err == nil:
				t.Fatalf("%s ran: %s", tc.tool, asJSON(res.Value))
			case tc.refused:
				var v *policy.Violation
				if !errors.As(err, &v) || v.Err != workspace.ErrCommand || v.Rule != "requireLandlock" || !strings.Contains(err.Error(), "Landlock is unavailable") {
					t.Fatalf("err = %v, want a command-not-allowed violation of requireLandlock saying Landlock is unavailable", err)
				}
			case err != nil:
				t.Fatalf("%s: %v", tc.tool, err)
			}
			if got := obs.n.Load(); got != tc.counted {
				t.Errorf("ExecUnenforced counted %d, want %d", got, tc.counted)
			}
		})
	}
}
