package workspace_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// heals records what the Service reports about faults.
type heals struct {
	mu  sync.Mutex
	how map[string]int
}

func (h *heals) ToolCall(string, string, time.Duration) {}
func (h *heals) PolicyDenial(string)                    {}
func (h *heals) SessionCreated(time.Duration)           {}
func (h *heals) SessionsActive(int)                     {}
func (h *heals) Reaped(string)                          {}
func (h *heals) ExecUnenforced()                        {}
func (h *heals) Restarted(string)                       {}
func (h *heals) Adopted()                               {}
func (h *heals) Healed(how string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.how[how]++
}

func (h *heals) count(how string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.how[how]
}

// stuckEnv is a session whose agent (sandboxtest.Local) can be stopped, on a Service
// that notices a silent agent within about a second.
type stuckEnv struct {
	*env
	sandbox string
	heals   *heals
	ck      *clock
}

func newStuckEnv(t *testing.T) *stuckEnv {
	t.Helper()
	tp, _ := policy.Parse([]byte("{}"))
	local := sandboxtest.New(t)
	h := &heals{how: map[string]int{}}
	ck := &clock{t: time.Now()}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: local,
		Tenants: tenants{testTenant: tp}, DefaultImage: "test-image", Observer: h, Now: ck.Now,
		AgentLiveness: agent.Liveness{StallAfter: 200 * time.Millisecond, PingTimeout: 300 * time.Millisecond,
			HandshakeTimeout: 500 * time.Millisecond}})
	t.Cleanup(svc.Close)
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	sess, err := svc.CreateSession(context.Background(), caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return &stuckEnv{env: &env{t: t, svc: svc, caller: caller, id: sess.ID, local: local, dir: local.Dir(sess.Sandbox)},
		sandbox: sess.Sandbox, heals: h, ck: ck}
}

// wantAgentUnresponsive checks a call's error: the agent is not responding, retryably.
func wantAgentUnresponsive(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, workspace.ErrAgentUnresponsive) || !errors.Is(err, workspace.ErrUnavailable) {
		t.Fatalf("%s = %v, want ErrAgentUnresponsive (and ErrUnavailable)", what, err)
	}
}

// succeeds retries f until it succeeds, for up to 30 s (the heals here take about a
// second).
func succeeds(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	eventually(t, what, func() bool { err = f(); return err == nil })
}

// A stopped agent: the write in flight ends with ErrAgentUnresponsive, the agent is
// restarted in place (counted as healed by "agent"), and the session works again with
// its files.
func TestStuckAgentIsHealed(t *testing.T) {
	e := newStuckEnv(t)
	e.ok("writeFile", map[string]any{"path": "a.txt", "contents": "kept"})
	e.local.Freeze(e.sandbox)
	_, err := e.call("writeFile", map[string]any{"path": "b.txt", "contents": "x"})
	wantAgentUnresponsive(t, "writeFile on a stopped agent", err)
	succeeds(t, "writeFile after the heal", func() error {
		_, err := e.call("writeFile", map[string]any{"path": "b.txt", "contents": "y"})
		return err
	})
	if got := e.ok("readFile", map[string]any{"path": "a.txt"}); !containsAll(asJSON(got), "kept") {
		t.Fatalf("a.txt after the heal = %s", asJSON(got))
	}
	if n, whole := e.local.Heals(); n < 1 || whole != 0 {
		t.Errorf("agent restarts %d, container restarts %d; want ≥ 1 and 0", n, whole)
	}
	if e.heals.count("agent") < 1 {
		t.Errorf("healed = %v, want agent ≥ 1", e.heals.how)
	}
}

// An agent that a restart in place does not bring back is healed by restarting its
// sandbox, which keeps the workspace.
func TestStuckAgentContainerRestart(t *testing.T) {
	e := newStuckEnv(t)
	e.local.StuckAfterAgentRestart = true
	e.ok("writeFile", map[string]any{"path": "a.txt", "contents": "kept"})
	e.local.Freeze(e.sandbox)
	_, err := e.call("readFile", map[string]any{"path": "a.txt"})
	wantAgentUnresponsive(t, "readFile on a stopped agent", err)
	succeeds(t, "readFile after the heal", func() error {
		_, err := e.call("readFile", map[string]any{"path": "a.txt"})
		return err
	})
	if n, whole := e.local.Heals(); n < 1 || whole < 1 {
		t.Errorf("agent restarts %d, container restarts %d; want ≥ 1 each", n, whole)
	}
	if e.heals.count("container") < 1 {
		t.Errorf("healed = %v, want container ≥ 1", e.heals.how)
	}
}

// A command on a stopped agent says it is not responding, and whether it had started.
func TestStuckAgentCommand(t *testing.T) {
	e := newStuckEnv(t)
	e.local.StuckAfterAgentRestart = true // no heal ends the command early
	e.ok("writeFile", map[string]any{"path": "a.txt", "contents": "x"})
	e.local.Freeze(e.sandbox)
	_, err := e.call("runCommand", map[string]any{"command": "true"})
	wantAgentUnresponsive(t, "runCommand on a stopped agent", err)
	var in *workspace.Interrupted
	if !errors.As(err, &in) {
		t.Fatalf("runCommand on a stopped agent = %v, want an Interrupted", err)
	}
}

// DELETE and the reaper remove a session whose agent is stopped, with calls in flight,
// within seconds: nothing waits on the agent, and the calls end.
func TestDeleteStuckSession(t *testing.T) {
	for _, how := range []string{"delete", "reap"} {
		t.Run(how, func(t *testing.T) {
			e := newStuckEnv(t)
			e.ok("writeFile", map[string]any{"path": "a.txt", "contents": "x"})
			e.local.Freeze(e.sandbox)
			errs := make(chan error, 4)
			for i := range cap(errs) {
				go func() {
					_, err := e.call("writeFile", map[string]any{"path": fmt.Sprintf("f%d", i), "contents": "y"})
					errs <- err
				}()
			}
			time.Sleep(100 * time.Millisecond) // the calls are in flight
			start := time.Now()
			switch how {
			case "delete":
				if err := e.svc.DeleteSession(context.Background(), e.caller, e.id); err != nil {
					t.Fatal(err)
				}
			case "reap":
				e.ck.Add(48 * time.Hour)
				if n, err := e.svc.Reap(context.Background()); err != nil || n != 1 {
					t.Fatalf("reap = %d, %v; want 1 session removed", n, err)
				}
			}
			// The acceptance bound for a DELETE of a stuck session (issue 17).
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("%s of a session with a stopped agent took %s, want under 10 s", how, d)
			}
			for range cap(errs) {
				if err := <-errs; err == nil {
					t.Error("a call in flight on a stopped agent succeeded")
				}
			}
			if e.local.Count() != 0 {
				t.Errorf("%d sandboxes left", e.local.Count())
			}
		})
	}
}
