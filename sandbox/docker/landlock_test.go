package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// TestLaunchPolicy checks the agent's launcher in a real container: ping reports the
// Landlock ABI, a restricted command runs, a program outside the policy does not start
// (a start error, not an exit code), a process it starts is refused by the kernel, and a
// timeout still kills the command's process group.
func TestLaunchPolicy(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.WorkspaceImage)
	d := newDriver(t)
	info := create(t, d, cli, sandbox.Spec{Session: uniq("landlock"), Tenant: uniq("tenant"), Image: version.WorkspaceImage})
	e := &e2eEnv{d: d, id: info.ID}
	e.c = e.client(t)
	ping := e.ready(t, e.c)
	if ping.Landlock < 1 {
		t.Fatalf("ping: Landlock ABI %d, want ≥ 1 (the kernel and Docker's seccomp profile allow it here)", ping.Landlock)
	}
	git := &agent.ExecPolicy{Programs: []string{"git"}, Dirs: []string{"/usr/lib/git-core"}}

	if res := e.exec(t, agent.ExecArgs{Argv: []string{"git", "--version"}, Launch: git}); res.ExitCode != 0 || !strings.HasPrefix(string(res.Stdout), "git version") || res.Unenforced {
		t.Errorf("git --version under [git]: %+v", res)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if res, err := e.c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", "true"}, Launch: git}, nil, nil); err != nil || res.ExitCode != -1 || !strings.Contains(res.StartError, "permission denied") {
		t.Errorf("sh under [git]: exit %d, start error %q, %v; want a start error saying permission denied", res.ExitCode, res.StartError, err)
	}
	res := e.exec(t, agent.ExecArgs{Argv: []string{"git", "-c", "alias.x=!touch marker", "x"}, Launch: git})
	if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "Permission denied") {
		t.Errorf("git alias !touch under [git]: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	if res := e.exec(t, agent.ExecArgs{Argv: []string{"test", "-e", "marker"}}); res.ExitCode == 0 {
		t.Error("marker exists: git started touch")
	}

	if _, err := e.c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"sleep", "1"}, Launch: git}); err == nil {
		t.Error("ProcStart of sleep under [git] started")
	}
	start := time.Now()
	res = e.exec(t, agent.ExecArgs{Argv: []string{"sleep", "30"}, TimeoutMS: 300, Launch: &agent.ExecPolicy{Programs: []string{"sleep"}}})
	if !res.TimedOut || time.Since(start) > 10*time.Second {
		t.Errorf("sleep 30 with a 300 ms timeout through the launcher: timed out %v after %s", res.TimedOut, time.Since(start))
	}
}
