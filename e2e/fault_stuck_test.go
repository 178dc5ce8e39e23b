package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/cwsdev/cws/internal/testenv"
)

// The user-visible bounds of issue 17 ("a stuck agent never holds a call or a delete"):
// with the agent stopped, a call ends within callBound with a retryable error, the
// session works again within healBound of that error, and a DELETE returns within
// deleteBound. They are requirements, measured generously: cws answers in about 10 s,
// about 5 s, and about 1 s.
const (
	stuckCallBound   = 30 * time.Second
	stuckHealBound   = 60 * time.Second
	stuckDeleteBound = 10 * time.Second
)

// TestFaultAgentStopped stops a session's agent from the host (SIGSTOP of `cws-agent
// serve`, with or without its init), on both transports. A write then ends within 30 s
// with a retryable 503 that says the workspace agent is not responding (over MCP: a
// retryable -32603 that says so); cws restarts the agent
// (cws_sandbox_healed_total{how="agent"}), and the session works again within 60 s
// with its files intact. Stopped again, with calls in flight, the session is deleted
// within 10 s, and its container is gone. An init stopped on its own holds nothing: its
// serve answers.
//
// Two variants: an agent stopped while no call waits is healed all the same, before
// the next call; and a cws started after the agent stopped (no connection to it yet)
// keeps the same bounds.
func TestFaultAgentStopped(t *testing.T) {
	dockerOnly(t, "stops the agent with docker exec as root, per Docker transport")
	requireRealDeps(t)
	for _, tc := range []stuckCase{
		{transport: "socket", stop: []string{"serve"}, mcp: true},
		{transport: "socket", stop: []string{"serve", "init"}},
		{transport: "exec", stop: []string{"serve"}, mcp: true},
		{transport: "exec", stop: []string{"serve", "init"}},
		{transport: "socket", stop: []string{"init"}},
		{transport: "socket", stop: []string{"serve"}, idle: true},
		{transport: "socket", stop: []string{"serve", "init"}, fresh: true},
		{transport: "exec", stop: []string{"serve"}, fresh: true},
	} {
		name := tc.transport + "/" + strings.Join(tc.stop, "+")
		switch {
		case tc.idle:
			name += "/idle"
		case tc.fresh:
			name += "/fresh-cws"
		}
		t.Run(name, func(t *testing.T) { faultAgentStopped(t, tc) })
	}
}

// stuckCase is one variant of TestFaultAgentStopped.
type stuckCase struct {
	transport string
	stop      []string // which agent processes SIGSTOP hits
	mcp       bool     // check the MCP error too
	idle      bool     // no call after the stop: cws must notice and heal by itself
	fresh     bool     // cws is restarted after the stop
}

func faultAgentStopped(t *testing.T, tc stuckCase) {
	transport, stop := tc.transport, tc.stop
	fx := newFixture(t)
	redis := testenv.Redis(t)
	p := startCWSWith(t, fx, redis, freeAddr(t), "--agent-transport", transport)
	cleanup := func(p *cwsProc) {
		t.Cleanup(func() {
			select {
			case <-p.exited: // replaced by a fresh cws, which cleans up
			default:
				p.deleteAll(t, fx, tenantAcme)
			}
		})
	}
	cleanup(p)
	tok := fx.token(t, tenantAcme, "stuck", "")
	r := do(t, nil, p.url, http.MethodPost, "/v1/sessions", tok, nil, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[sessionView](t, r).ID
	box := containerOf(t, id)
	write := func(path, contents string) rest {
		body, _ := json.Marshal(map[string]any{"path": path, "contents": contents})
		return do(t, nil, p.url, http.MethodPost, "/v1/sessions/"+id+"/tools/writeFile", tok, body, nil)
	}
	if r := write("kept.txt", "before the stop\n"); r.status != http.StatusOK {
		t.Fatalf("writeFile: %d %s", r.status, r.body)
	}

	t.Cleanup(func() { signalAgent(t, box, syscall.SIGCONT, "serve", "init") }) // never leave a stopped container behind
	signalAgent(t, box, syscall.SIGSTOP, stop...)
	onlyInit := len(stop) == 1 && stop[0] == "init"
	if tc.fresh {
		p.kill()
		p = startCWSWith(t, fx, redis, freeAddr(t), "--agent-transport", transport)
		cleanup(p)
	}
	if tc.idle {
		// No call: the idle connection's ping goes unanswered and cws heals the agent.
		waitFor(t, 2*time.Minute, "cws to heal the stopped agent by itself", func() bool {
			n, _ := metricValue(p.metrics(t), "cws_sandbox_healed_total", map[string]string{"how": "agent"})
			return n >= 1
		})
		if r := write("after.txt", "written after the heal\n"); r.status != http.StatusOK {
			t.Fatalf("writeFile after the heal: %d %s", r.status, r.body)
		}
		signalAgent(t, box, syscall.SIGSTOP, stop...)
	}

	start := time.Now()
	r = write("during.txt", "written while stopped\n")
	took := time.Since(start)
	t.Logf("writeFile with %v stopped: %d %s after %s", stop, r.status, r.body, took.Round(time.Millisecond))
	if took > stuckCallBound {
		t.Errorf("writeFile with the agent stopped took %s, want at most %s", took, stuckCallBound)
	}
	switch {
	case onlyInit:
		if r.status != http.StatusOK {
			t.Errorf("writeFile with only init stopped: %d %s, want 200 (serve answers)", r.status, r.body)
		}
	case r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" ||
		!strings.Contains(string(r.body), "not responding"):
		t.Errorf("writeFile with the agent stopped: %d %s (Retry-After %q), want a retryable 503 saying the agent is not responding",
			r.status, r.body, r.header.Get("Retry-After"))
	}

	if !onlyInit {
		healed := time.Now()
		for {
			r = write("after.txt", "written after the heal\n")
			if r.status == http.StatusOK {
				break
			}
			if time.Since(healed) > stuckHealBound {
				t.Fatalf("the session did not work again within %s: %d %s", stuckHealBound, r.status, r.body)
			}
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("the session worked again %s after the failed write", time.Since(healed).Round(time.Millisecond))
		got := do(t, nil, p.url, http.MethodPost, "/v1/sessions/"+id+"/tools/readFile", tok, []byte(`{"path":"kept.txt"}`), nil)
		if got.status != http.StatusOK || !strings.Contains(string(got.body), "before the stop") {
			t.Errorf("readFile kept.txt after the heal: %d %s, want its content", got.status, got.body)
		}
		if n, _ := metricValue(p.metrics(t), "cws_sandbox_healed_total", map[string]string{"how": "agent"}); n < 1 {
			n2, _ := metricValue(p.metrics(t), "cws_sandbox_healed_total", map[string]string{"how": "container"})
			t.Errorf("cws_sandbox_healed_total: agent %v, container %v; want agent ≥ 1", n, n2)
		}
		if !strings.Contains(p.logs.String(), "workspace agent is not responding") {
			t.Error("the log never said the workspace agent is not responding")
		}
		if tc.mcp {
			signalAgent(t, box, syscall.SIGSTOP, stop...)
			start = time.Now()
			we := rawToolCall(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "writeFile", map[string]any{"path": "mcp.txt", "contents": "x"})
			took = time.Since(start)
			var data struct{ Retryable bool }
			if we != nil {
				_ = json.Unmarshal(we.Data, &data)
			}
			if we == nil || we.Code != -32603 || !strings.Contains(we.Message, "not responding") || !data.Retryable || took > stuckCallBound {
				t.Errorf("MCP writeFile with the agent stopped: %+v after %s, want a retryable -32603 saying the agent is not responding within %s",
					we, took, stuckCallBound)
			}
			waitFor(t, stuckHealBound, "the session to work again after the MCP call", func() bool {
				return write("after-mcp.txt", "x").status == http.StatusOK
			})
		}
		// Stopped again, for the delete.
		signalAgent(t, box, syscall.SIGSTOP, stop...)
	}

	// A few calls in flight on the stopped agent, then DELETE.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, _ := json.Marshal(map[string]any{"path": fmt.Sprintf("inflight%d.txt", i), "contents": "x"})
			req, _ := http.NewRequest(http.MethodPost, p.url+"/v1/sessions/"+id+"/tools/writeFile", strings.NewReader(string(body)))
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if resp, err := http.DefaultClient.Do(req.WithContext(ctx)); err == nil {
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(time.Second)
	start = time.Now()
	d := do(t, nil, p.url, http.MethodDelete, "/v1/sessions/"+id, tok, nil, nil)
	took = time.Since(start)
	t.Logf("DELETE with %v stopped and calls in flight: %d after %s", stop, d.status, took.Round(time.Millisecond))
	if d.status != http.StatusNoContent {
		t.Errorf("DELETE: %d %s", d.status, d.body)
	}
	if took > stuckDeleteBound {
		t.Errorf("DELETE of a session whose agent is stopped took %s, want at most %s", took, stuckDeleteBound)
	}
	if out, err := exec.Command("docker", "inspect", "--format", "{{.State.Status}}", box).CombinedOutput(); err == nil {
		t.Errorf("the container of the deleted session is still there: %s", out)
	}
	waitFor(t, 2*time.Minute, "the calls in flight to end", func() bool {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return true
		case <-time.After(time.Second):
			return false
		}
	})
}

// signalAgent sends sig from the host to the container's agent processes named by
// which: "init" (PID 1 of the container, `cws-agent init`) and "serve". The host pids
// come from the engine (docker top); without root on the host, the signal is sent from
// inside the container as root instead.
func signalAgent(t *testing.T, box string, sig syscall.Signal, which ...string) {
	t.Helper()
	top, err := engine(t).ContainerTop(context.Background(), box, []string{"-eo", "pid,args"})
	if cerrdefs.IsNotFound(err) {
		return // gone already: nothing to signal
	}
	if err != nil {
		t.Fatalf("docker top %s: %v", box, err)
	}
	n := 0
	for _, proc := range top.Processes {
		if len(proc) < 2 {
			continue
		}
		args := strings.Fields(proc[1])
		if len(args) < 2 || !strings.HasSuffix(args[0], "/cws-agent") || !contains(which, args[1]) {
			continue
		}
		pid, err := strconv.Atoi(proc[0])
		if err != nil {
			t.Fatalf("docker top %s: pid %q", box, proc[0])
		}
		if os.Geteuid() == 0 {
			err = syscall.Kill(pid, sig)
		} else {
			err = exec.Command("docker", "exec", "-u", "0", box, "sh", "-c",
				fmt.Sprintf(`for p in /proc/[0-9]*; do [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "/.cws/cws-agent %s " ] && kill -%d ${p#/proc/}; done; true`, args[1], int(sig))).Run()
		}
		if err != nil {
			t.Fatalf("signal %v to %s (pid %d): %v", sig, proc[1], pid, err)
		}
		if sig == syscall.SIGSTOP && os.Geteuid() == 0 {
			// The stop lands when the process next runs: wait until it has.
			waitFor(t, 10*time.Second, fmt.Sprintf("pid %d to stop", pid), func() bool { return procState(pid) == "T" })
		}
		n++
	}
	if sig == syscall.SIGSTOP && n < len(which) {
		t.Fatalf("signalled %d agent processes of %v in %s: %v", n, which, box, top.Processes)
	}
}

// procState is a host process's state letter (R, S, T, …), or "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state …: comm may hold spaces and parentheses; the state follows the last ')'.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return string(b[i+2])
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
