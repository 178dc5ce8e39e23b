package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/version"
)

// TestRestart SIGKILLs `cws serve` and starts it again on the same Redis: the session,
// its files and its background process are still there and usable; a container with
// cws labels (and this run's instance) that the store does not know and whose expiry
// has passed is reaped at startup and counted (a live one would be adopted: see
// TestFaultFlushAll); a container of a tenant this cws does not serve is left alone.
func TestRestart(t *testing.T) {
	dockerOnly(t, "drives the Docker driver directly")
	requireRealDeps(t)
	fx := newFixture(t)
	redisURL, addr := testenv.Redis(t), freeAddr(t)
	srv := startCWS(t, fx, redisURL, addr)
	tok := fx.token(t, tenantAcme, "alice", "")

	c := connect(t, srv.url+"/mcp", tok, "")
	const content = "survives a SIGKILL\n"
	c.call(t, "writeFile", map[string]any{"path": "keep/me.txt", "contents": content})
	proc := c.call(t, "startProcess", map[string]any{"command": "sleep", "args": []string{"1000"}})
	procID, _ := proc["id"].(string)
	if procID == "" || proc["running"] != true {
		t.Fatalf("startProcess = %v", proc)
	}
	r := do(t, nil, srv.url, http.MethodGet, "/v1/sessions", tok, nil, nil)
	before := decode[struct{ Sessions []sessionView }](t, r).Sessions
	if len(before) != 1 {
		t.Fatalf("sessions before the kill: %s", r.body)
	}
	id := before[0].ID

	// Two containers the store does not know: one of a tenant it serves (an orphan)
	// and one of a tenant it does not (another cws's).
	drv, err := docker.New(docker.Config{AgentBinary: agentBinary, Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	orphan := fmt.Sprintf("s-orphan%s", randomHex(6))
	foreign := fmt.Sprintf("s-foreign%s", randomHex(6))
	for _, spec := range []sandbox.Spec{
		{Session: orphan, Tenant: tenantAcme, Subject: "ghost", Image: version.WorkspaceImage, Expires: time.Now().Add(-time.Minute)},
		{Session: foreign, Tenant: "other-" + runID, Subject: "someone", Image: version.WorkspaceImage},
	} {
		info, err := drv.Create(ctx, spec)
		if err != nil {
			t.Fatalf("create %s: %v", spec.Session, err)
		}
		t.Cleanup(func() { _ = drv.Remove(context.Background(), info.ID) })
	}

	srv.kill()
	if _, err := http.Get(srv.url + "/healthz"); err == nil {
		t.Fatal("cws still answers after SIGKILL")
	}
	srv = startCWS(t, fx, redisURL, addr)
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantAcme) })

	r = do(t, nil, srv.url, http.MethodGet, "/v1/sessions", tok, nil, nil)
	after := decode[struct{ Sessions []sessionView }](t, r).Sessions
	if len(after) != 1 || after[0].ID != id || after[0].State != "ready" {
		t.Fatalf("sessions after the restart: %s, want %s ready", r.body, id)
	}
	c = connect(t, srv.url+"/mcp", tok, "")
	if got := c.call(t, "readFile", map[string]any{"path": "keep/me.txt"}); got["content"] != content {
		t.Errorf("readFile after the restart = %v", got)
	}
	procs := c.call(t, "listProcesses", map[string]any{})
	list, _ := procs["processes"].([]any)
	if !slices.ContainsFunc(list, func(p any) bool {
		m, _ := p.(map[string]any)
		return m["id"] == procID && m["running"] == true && m["command"] == "sleep"
	}) {
		t.Errorf("listProcesses after the restart = %v, want %s (sleep) running", procs, procID)
	}
	// The session is usable, not just readable.
	c.call(t, "writeFile", map[string]any{"path": "keep/after.txt", "contents": "written after the restart"})

	cli := engine(t)
	if cs, vs := leftovers(t, cli, map[string]string{sandbox.LabelSession: orphan}); len(cs)+len(vs) != 0 {
		t.Errorf("orphan %s not reaped at startup: containers %v, volumes %v", orphan, cs, vs)
	}
	if cs, _ := leftovers(t, cli, map[string]string{sandbox.LabelSession: foreign}); len(cs) != 1 {
		t.Errorf("a container of a tenant this cws does not serve was touched: %v", cs)
	}
	if n, ok := metricValue(srv.metrics(t), "cws_sandbox_reaped_total", map[string]string{"reason": "orphan"}); !ok || n < 1 {
		t.Errorf("cws_sandbox_reaped_total{reason=\"orphan\"} = %v (present %v), want ≥ 1", n, ok)
	}
}
