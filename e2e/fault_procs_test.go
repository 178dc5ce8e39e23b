package e2e_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
)

// TestFaultServeKilledKeepsProcesses SIGKILLs the workspace agent (`cws-agent serve`)
// from outside while background processes run, through the public MCP API: within
// 10 s readProcessOutput returns a process's output from before the kill, from while
// the agent was down and from after, with no line missing; listProcesses shows it
// running; a process that exited while the agent was down reports its exit code;
// killProcess stops a process the restarted agent did not start; new processes get
// new ids. After a container restart, which nothing survives, readProcessOutput says
// the process was lost with the agent.
func TestFaultServeKilledKeepsProcesses(t *testing.T) {
	dockerOnly(t, "kills serve with docker exec as root and restarts the container")
	requireRealDeps(t)
	fx := newFixture(t)
	p := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { p.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "hugo", "")
	c := connect(t, p.url+"/mcp", tok, "")

	start := func(command string, args ...string) string {
		t.Helper()
		begun := time.Now()
		res := c.call(t, "startProcess", map[string]any{"command": command, "args": args})
		id, _ := res["id"].(string)
		if id == "" || res["running"] != true {
			t.Fatalf("startProcess %s %v = %v", command, args, res)
		}
		t.Logf("startProcess %s: %v", id, time.Since(begun).Round(time.Microsecond))
		return id
	}
	c.call(t, "writeFile", map[string]any{"path": "warm.txt", "contents": "x"}) // the session starts
	ticker := start("sh", "-c", `i=0; while :; do echo "tick $i"; i=$((i+1)); sleep 0.05; done`)
	ender := start("sh", "-c", `while [ ! -e /tmp/gate ]; do sleep 0.02; done; echo bye; exit 7`)
	sleeper := start("sleep", "1000")
	read := func(id string, waitMS int) (map[string]any, error) {
		res, err := c.callRaw("readProcessOutput", map[string]any{"id": id, "waitMs": waitMS}, nil)
		if err != nil {
			return nil, err
		}
		if res.IsError {
			return nil, fmt.Errorf("tool error: %s", text(res))
		}
		var out map[string]any
		return out, json.Unmarshal([]byte(text(res)), &out)
	}
	var before string
	waitFor(t, 10*time.Second, "the ticker's first lines", func() bool {
		out, err := read(ticker, 200)
		before, _ = out["stdout"].(string)
		return err == nil && strings.Contains(before, "tick 3\n")
	})

	box := containerOf(t, onlySession(t, p, tok, "hugo").ID)
	killServe(t, box, "touch /tmp/gate") // the ender exits while serve is down
	killed := time.Now()

	var after map[string]any
	for {
		out, err := read(ticker, 0)
		if err == nil && len(out["stdout"].(string)) > len(before)+40 {
			after = out
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("10 s after the agent was killed, readProcessOutput = %v, %v", out, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("agent killed: readProcessOutput had the new output after %v", time.Since(killed).Round(time.Millisecond))
	stdout := after["stdout"].(string)
	if !strings.HasPrefix(stdout, before) {
		t.Errorf("the output after the kill does not begin with the output before it:\nbefore: %q\nafter:  %q", before, stdout)
	}
	if err := ticks(stdout); err != nil {
		t.Error(err)
	}

	list, _ := c.call(t, "listProcesses", map[string]any{})["processes"].([]any)
	procs := map[string]map[string]any{}
	for _, e := range list {
		m := e.(map[string]any)
		procs[m["id"].(string)] = m
	}
	if procs[ticker]["running"] != true || procs[sleeper]["running"] != true {
		t.Errorf("listProcesses after the kill = %v, want %s and %s running", list, ticker, sleeper)
	}
	var end map[string]any
	waitFor(t, 10*time.Second, "the process that exited while the agent was down", func() bool {
		out, err := read(ender, 1000)
		end = out
		return err == nil && out["process"].(map[string]any)["running"] == false
	})
	if pr := end["process"].(map[string]any); pr["exitCode"] != float64(7) || end["stdout"] != "bye\n" {
		t.Errorf("the process that exited while the agent was down = %v, want exit code 7 and bye", end)
	}

	if k := c.call(t, "killProcess", map[string]any{"id": sleeper}); k["running"] != false {
		t.Errorf("killProcess after the restart = %v", k)
	}
	next := start("echo", "next")
	if n := procNumber(next); n <= 3 {
		t.Errorf("the id after the restart is %s, want one after p3", next)
	}

	// A container restart takes every process with it: their tools say so.
	if out, err := exec.Command("docker", "restart", "-t", "1", box).CombinedOutput(); err != nil {
		t.Fatalf("docker restart: %v: %s", err, out)
	}
	var lost string
	waitFor(t, 30*time.Second, "readProcessOutput after the container restart", func() bool {
		_, err := read(ticker, 0)
		if err != nil {
			lost = err.Error()
		}
		return err != nil && strings.Contains(lost, "tool error")
	})
	if !strings.Contains(lost, `"code":"lost"`) || !strings.Contains(lost, "lost with the agent") {
		t.Errorf("readProcessOutput of a process from before the container restart = %s, want code lost", lost)
	}
	t.Logf("after the container restart: %s", lost)
}

// killServe SIGKILLs the container's `cws-agent serve` from outside (docker exec, as
// the uid it runs as), and runs then in the same breath.
func killServe(t *testing.T, box, then string) {
	t.Helper()
	find := `for p in /proc/[0-9]*; do
  [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "/.cws/cws-agent serve " ] && echo ${p#/proc/} $(stat -c %u $p)
done; true`
	out, err := exec.Command("docker", "exec", "-u", "0", box, "sh", "-c", find).Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 2 {
		t.Fatalf("find serve: %q, %v", out, err)
	}
	if out, err := exec.Command("docker", "exec", "-u", f[1], box, "sh", "-c", "kill -9 "+f[0]+" && "+then).CombinedOutput(); err != nil {
		t.Fatalf("kill serve (pid %s, uid %s): %v: %s", f[0], f[1], err, out)
	}
}

// ticks checks that s is the lines "tick 0", "tick 1", … with none missing.
func ticks(s string) error {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	re := regexp.MustCompile(`^tick (\d+)$`)
	for i, l := range lines {
		if m := re.FindStringSubmatch(l); m == nil || m[1] != strconv.Itoa(i) {
			return fmt.Errorf("output line %d is %q, want \"tick %d\": a line went missing around the kill", i, l, i)
		}
	}
	return nil
}

// procNumber is N of a process id "pN-<run>".
func procNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(id, "-", 2)[0], "p"))
	return n
}
