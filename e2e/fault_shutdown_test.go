package e2e_test

import (
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
)

// TestFaultSIGTERMDuringCall sends SIGTERM to cws while a long runCommand is in
// flight: /readyz turns 503 at once, the call completes with its output, cws then
// exits, and the session, its container and its background process are untouched: a
// new cws serves them.
func TestFaultSIGTERMDuringCall(t *testing.T) {
	dockerOnly(t, "reads the container with docker exec")
	requireRealDeps(t)
	fx := newFixture(t)
	redisURL, addr := testenv.Redis(t), freeAddr(t)
	p := startCWSWith(t, fx, redisURL, addr, "--drain-timeout", "2m")
	tok := fx.token(t, tenantAcme, "gina", "")
	c := connect(t, p.url+"/mcp", tok, "")
	proc := c.call(t, "startProcess", map[string]any{"command": "sleep", "args": []string{"1000"}})
	procID, _ := proc["id"].(string)

	type answer struct {
		res map[string]any
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := c.callRaw("runCommand", map[string]any{"command": "sh", "args": []string{"-c", "echo begun; sleep 4; echo finished"}}, nil)
		a := answer{err: err}
		if err == nil {
			a.res = map[string]any{"isError": res.IsError, "text": text(res)}
		}
		done <- a
	}()
	// SIGTERM once the command runs (it shows in the container's process list).
	box := containerOf(t, onlySession(t, p, tok, "gina").ID)
	waitFor(t, 60*time.Second, "the long command to start", func() bool {
		return inContainerOK(box, "sh", "-c", `for p in /proc/[0-9]*; do [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "sleep 4 " ] && exit 0; done; exit 1`)
	})
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The signal is delivered asynchronously: poll, but /readyz must say 503 while the
	// call is still in flight.
	waitFor(t, 30*time.Second, "/readyz to answer 503 after SIGTERM", func() bool {
		return do(t, nil, p.url, http.MethodGet, "/readyz", "", nil, nil).status == http.StatusServiceUnavailable
	})
	if len(done) > 0 {
		t.Error("/readyz turned 503 only after the in-flight call had answered")
	}
	var a answer
	select {
	case a = <-done:
	case <-time.After(2 * time.Minute): // hang guard
		t.Fatal("the in-flight runCommand never answered")
	}
	if a.err != nil || a.res["isError"] == true || !strings.Contains(fmt.Sprint(a.res["text"]), "finished") {
		t.Fatalf("in-flight runCommand across SIGTERM = %v %v, want it completed", a.res, a.err)
	}
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("cws did not exit after its in-flight call finished")
	}
	if !running(t, box) {
		t.Fatal("the session's container stopped with cws")
	}

	p = startCWS(t, fx, redisURL, addr)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantAcme) })
	c = connect(t, p.url+"/mcp", tok, "")
	list, _ := c.call(t, "listProcesses", map[string]any{})["processes"].([]any)
	if !slices.ContainsFunc(list, func(x any) bool {
		m, _ := x.(map[string]any)
		return m["id"] == procID && m["running"] == true
	}) {
		t.Errorf("background process %s after the shutdown: %v", procID, list)
	}
}

// inContainerOK runs a command in a container and reports whether it succeeded.
func inContainerOK(id string, args ...string) bool {
	return exec.Command("docker", append([]string{"exec", id}, args...)...).Run() == nil
}
