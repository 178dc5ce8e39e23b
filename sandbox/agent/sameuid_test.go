package agent_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
)

// TestSameUIDScoped serves in-process with SameUID, the test binary as the launcher:
// ping says so, and no tool process — a command, one under an exec policy, a
// background process, a terminal's program — can signal the agent (this process) or
// any of its threads, while each runs as it would otherwise. Processes of different
// calls are in domains of their own: one call's command can't signal another call's
// background process (killProcess, the agent's, can).
func TestSameUIDScoped(t *testing.T) {
	if launch.Scopes() == 0 {
		t.Skipf("Landlock ABI %d can't scope a domain", launch.ABI())
	}
	self, err := os.Executable()
	must(t, err)
	root, procDir := procDirs(t)
	c := serveAgent(t, server.Config{Root: root, Version: "test", Launcher: self, ProcDir: procDir, SameUID: true})
	ctx := ctxT(t)
	ping, err := c.Ping(ctx)
	must(t, err)
	if !ping.SameUID || !ping.Scoped {
		t.Fatalf("ping = %+v, want sameUID and scoped", ping)
	}

	// Every thread of this process, the agent's.
	var tids []string
	ents, err := os.ReadDir("/proc/self/task")
	must(t, err)
	for _, e := range ents {
		tids = append(tids, e.Name())
	}
	pid := strconv.Itoa(os.Getpid())
	probe := `for t in ` + pid + ` ` + strings.Join(tids, " ") + `; do kill -0 $t 2>/dev/null && echo "reached $t"; done; echo probed`
	check := func(how, out string) {
		t.Helper()
		if !strings.Contains(out, "probed") {
			t.Errorf("%s: the probe did not run: %q", how, out)
		}
		if strings.Contains(out, "reached") {
			t.Errorf("%s: a tool process signalled the agent: %q", how, out)
		}
	}

	r, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", probe}}, nil, nil)
	must(t, err)
	check("exec", string(r.Stdout))
	r, err = c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", probe}, Launch: &agent.ExecPolicy{Programs: []string{"sh"}}}, nil, nil)
	must(t, err)
	check("exec under a policy", string(r.Stdout))
	if r.Unenforced {
		t.Error("exec under a policy: unenforced")
	}
	r, err = c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", "true"}, Launch: &agent.ExecPolicy{Programs: []string{"env"}}}, nil, nil)
	if err != nil || r.ExitCode != -1 || !strings.Contains(r.StartError, "permission denied") {
		t.Errorf("sh under a policy of env: %+v, %v; want a start error saying permission denied", r, err)
	}
	term, err := c.TermRun(ctx, agent.TermRunArgs{Command: strings.ReplaceAll(probe, "kill -0", "env kill -0")}, nil)
	must(t, err)
	check("terminal", string(term.Stdout))

	bg, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"sh", "-c", probe + "; exec sleep 1000"}})
	must(t, err)
	t.Cleanup(func() { _ = syscall.Kill(-bg.PID, syscall.SIGKILL) })
	var out string
	waitFor(t, func() bool {
		o, err := c.ProcOutput(ctx, agent.ProcOutputArgs{ID: bg.ID, WaitMS: 100})
		out += string(o.Stdout)
		return err == nil && strings.Contains(out, "probed")
	})
	check("background process", out)

	// Another call's process: in a domain of its own.
	r, err = c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", "kill -0 " + strconv.Itoa(bg.PID) + " 2>/dev/null; echo $?"}}, nil, nil)
	must(t, err)
	if got := strings.TrimSpace(string(r.Stdout)); got != "1" {
		t.Errorf("a command signalling another call's background process: %q, want refused (1)", got)
	}
	start := time.Now()
	if pi, err := c.ProcKill(ctx, agent.ProcKillArgs{ID: bg.ID}); err != nil || pi.Running {
		t.Errorf("killProcess: %+v, %v", pi, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("killProcess took %s", d)
	}

	// The work itself is as ever.
	r, err = c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", "echo hi > f && cat f && exit 3"}}, nil, nil)
	if err != nil || r.ExitCode != 3 || string(r.Stdout) != "hi\n" {
		t.Errorf("exec: %+v, %v", r, err)
	}
}

// BenchmarkSameUIDExec is what same-uid mode adds to a command (exec of true through
// the wire, in-process): each command starts through the launcher in a scoped domain
// of its own, with an exec policy or without, beside root mode's starts. The launcher
// is the test binary, much bigger than the agent's and slower to start: set
// CWS_BENCH_LAUNCHER to a built cws-agent for the agent's own figure.
func BenchmarkSameUIDExec(b *testing.B) {
	if launch.Scopes() == 0 {
		b.Skip("no Landlock scopes")
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	if l := os.Getenv("CWS_BENCH_LAUNCHER"); l != "" {
		self = l
	}
	policy := &agent.ExecPolicy{Programs: []string{"true"}}
	for _, tc := range []struct {
		name    string
		sameUID bool
		launch  *agent.ExecPolicy
	}{
		{"root-mode", false, nil},
		{"root-mode-policy", false, policy},
		{"same-uid", true, nil},
		{"same-uid-policy", true, policy},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := serveAgent(b, server.Config{Root: b.TempDir(), Version: "bench", Launcher: self, SameUID: tc.sameUID})
			ctx := b.Context()
			for b.Loop() {
				r, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"true"}, Launch: tc.launch}, nil, nil)
				if err != nil || r.ExitCode != 0 {
					b.Fatalf("%+v, %v", r, err)
				}
			}
		})
	}
}

// TestSameUIDTerminal: a terminal's program starts through the launcher in same-uid
// mode as every tool process does — in a scoped domain, under its exec policy — and is
// still a session leader on its PTY: the shell's own job control works, and it can't
// signal the agent.
func TestSameUIDTerminal(t *testing.T) {
	if launch.Scopes() == 0 {
		t.Skipf("Landlock ABI %d can't scope a domain", launch.ABI())
	}
	needBash(t)
	self, err := os.Executable()
	must(t, err)
	root, procDir := procDirs(t)
	c := serveAgent(t, server.Config{Root: root, Version: "test", Launcher: self, ProcDir: procDir, SameUID: true})
	ctx := ctxT(t)
	pol := &agent.ExecPolicy{Programs: []string{"bash", "stty", "sleep"}}
	in, err := c.TTYOpen(ctx, agent.TTYOpenArgs{Argv: []string{"bash"}, Launch: pol})
	must(t, err)
	t.Cleanup(func() { _, _ = c.TTYClose(context.Background(), in.ID) })
	typeInto(t, c, in.ID, "PS1='P> '; stty size; kill -0 "+strconv.Itoa(os.Getpid())+" 2>/dev/null; echo agent-signal-$?\r")
	screenFor(t, c, in.ID, `^24 80$`)
	screenFor(t, c, in.ID, `^agent-signal-1$`)
	// A program off the policy fails inside the terminal; the shell lives on.
	typeInto(t, c, in.ID, "env true; echo env-$?\r")
	screenFor(t, c, in.ID, `^env-126$`)
	// Job control: ^C ends the foreground job, not the shell.
	if sigintIgnored() {
		return // as TestTTYCtrlCEndsTheJobNotTheShell
	}
	typeInto(t, c, in.ID, "bash -c 'echo go; exec sleep 100'\r")
	screenFor(t, c, in.ID, `^go$`)
	typeInto(t, c, in.ID, "\x03")
	screenFor(t, c, in.ID, `^P>$`)
	typeInto(t, c, in.ID, "echo back-$?\r")
	screenFor(t, c, in.ID, `^back-130$`)
}
