package e2e_test

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
)

// killAgentSh kills, inside a container, every process whose command line is
// "/.cws/cws-agent $1" (attach: the host's stream; serve: the agent itself).
const killAgentSh = `n=0; for p in /proc/[0-9]*; do
  if [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "/.cws/cws-agent $1 " ]; then kill -9 ${p#/proc/} 2>/dev/null && n=$((n+1)); fi
done; echo $n`

// TestFaultAgentKilled kills the agent's stream and the agent process itself, again
// and again, during a burst of file changes from three agents' lanes. Every call
// succeeds and is applied exactly once: each lane's chain of moves (a move applied
// twice would fail: its source is gone) and its counter of edits end exactly where
// they should.
//
// On the exec transport the stream is the attach bridge, killed on its own. On the
// socket transport there is no bridge to kill while the socket works: killing the
// agent cuts every stream at once, and the reconnect falls back to the exec stream
// until the agent listens again, so that path is crossed too.
func TestFaultAgentKilled(t *testing.T) {
	dockerOnly(t, "kills the agent with docker exec as root, per Docker transport (kube_test.go kills pods)")
	requireRealDeps(t)
	t.Run("exec", func(t *testing.T) { faultAgentKilled(t, "exec", "attach", "serve") })
	t.Run("socket", func(t *testing.T) { faultAgentKilled(t, "socket", "serve") })
}

// faultAgentKilled runs the burst on one agent transport, killing each of kinds (see
// killAgentSh) in turn until each has landed at least twice.
func faultAgentKilled(t *testing.T, transport string, kinds ...string) {
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), "--agent-transport", transport)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "erin", "")
	c := connect(t, p.url+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "warm.txt", "contents": "x"})
	box := containerOf(t, onlySession(t, p, tok, "erin").ID)

	// The lanes run until two kills of each kind have landed (at most maxSteps steps).
	const lanes, maxSteps = 3, 300
	stop := make(chan struct{})
	var enough atomic.Bool
	var killer sync.WaitGroup
	killer.Add(1)
	kills := map[string]int{}
	go func() {
		defer killer.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			what := kinds[i%len(kinds)]
			out, err := exec.Command("docker", "exec", "-u", "0", box, "sh", "-c", killAgentSh, "kill", what).CombinedOutput()
			if err != nil {
				t.Logf("kill %s: %v: %s", what, err, out)
				continue
			}
			if strings.TrimSpace(string(out)) != "0" {
				kills[what]++
			}
			landed := true
			for _, k := range kinds {
				landed = landed && kills[k] >= 2
			}
			if landed {
				enough.Store(true)
			}
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, lanes*4)
	steps := make([]int, lanes)
	for l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call := func(tool string, args map[string]any) bool {
				res, err := c.callRaw(tool, args, nil)
				if err == nil && res.IsError {
					err = fmt.Errorf("tool error: %s", text(res))
				}
				if err != nil {
					errs <- fmt.Errorf("lane %d: %s %v: %w", l, tool, args, err)
					return false
				}
				return true
			}
			name := func(i int) string { return fmt.Sprintf("lane%d/f%d.txt", l, i) }
			counter := fmt.Sprintf("lane%d/count.txt", l)
			if !call("writeFile", map[string]any{"path": name(0), "contents": fmt.Sprintf("lane %d\n", l)}) ||
				!call("writeFile", map[string]any{"path": counter, "contents": "count: 0\n"}) {
				return
			}
			for i := 0; i < maxSteps && !enough.Load(); i++ {
				steps[l] = i + 1
				if !call("moveFile", map[string]any{"source": name(i), "destination": name(i + 1)}) ||
					!call("editFile", map[string]any{"path": counter, "oldText": fmt.Sprintf("count: %d\n", i), "newText": fmt.Sprintf("count: %d\n", i+1)}) ||
					!call("writeFile", map[string]any{"path": fmt.Sprintf("lane%d/w%d.txt", l, i), "contents": fmt.Sprintf("write %d\n", i)}) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	killer.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("kills landed during the burst: %v; steps per lane: %v", kills, steps)
	if !enough.Load() {
		t.Errorf("only %v kills landed during the burst; the test proved little", kills)
	}
	if t.Failed() {
		return
	}
	for l := range lanes {
		if got := c.call(t, "readFile", map[string]any{"path": fmt.Sprintf("lane%d/f%d.txt", l, steps[l])}); got["content"] != fmt.Sprintf("lane %d\n", l) {
			t.Errorf("lane %d: the end of the move chain = %v", l, got)
		}
		if got := c.call(t, "readFile", map[string]any{"path": fmt.Sprintf("lane%d/count.txt", l)}); got["content"] != fmt.Sprintf("count: %d\n", steps[l]) {
			t.Errorf("lane %d: counter = %v, want %d", l, got["content"], steps[l])
		}
	}
}
