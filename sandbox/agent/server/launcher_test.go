package server

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// restrictingServer is a Server that restricts commands with Landlock on the host's
// kernel; the test is skipped where there is none (sandbox/docker and e2e cover CI).
func restrictingServer(t *testing.T) *Server {
	t.Helper()
	if launch.ABI() == 0 {
		t.Skip("Landlock unavailable on this kernel")
	}
	for _, p := range []string{"env", "true", "sh", "sleep"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("no %s on this host", p)
		}
	}
	s, err := New(Config{Root: t.TempDir(), Launcher: "unused: no ProcDir, so no keeper process"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func opResult[R any](t *testing.T, op op.Handler, args any) R {
	t.Helper()
	raw, _ := json.Marshal(args)
	res, err := op(t.Context(), raw, nil, nil)
	if err != nil {
		t.Fatalf("%T: %v", args, err)
	}
	return res.(R)
}

// TestExecPolicy runs commands under exec policies in the agent's own process: each is
// held to its own policy whatever ran before it (a looser one, none), a program the
// policy leaves out is a start error worded as the launcher worded it, and the agent
// itself stays free to start anything.
func TestExecPolicy(t *testing.T) {
	s := restrictingServer(t)
	envTrue := &agent.ExecPolicy{Programs: []string{"env", "true"}}
	envOnly := &agent.ExecPolicy{Programs: []string{"env"}}
	for _, tc := range []struct {
		name     string
		argv     []string
		policy   *agent.ExecPolicy
		exit     int
		startErr string // "" for none
		stderr   string
	}{
		{"allowed, and what it runs allowed", []string{"env", "true"}, envTrue, 0, "", ""},
		{"a stricter policy after a looser one", []string{"env", "true"}, envOnly, 126, "", "Permission denied"},
		{"the program itself not allowed", []string{"sh", "-c", "true"}, envOnly, -1, "exec sh: permission denied", ""},
		{"no policy after a policy", []string{"sh", "-c", "env true"}, nil, 0, "", ""},
		{"nothing allowed", []string{"true"}, &agent.ExecPolicy{Programs: []string{}}, -1, "exec true: permission denied", ""},
		{"the looser policy again", []string{"env", "true"}, envTrue, 0, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := opResult[*agent.ExecResult](t, s.exec.Exec, agent.ExecArgs{Argv: tc.argv, Launch: tc.policy})
			if res.ExitCode != tc.exit || res.StartError != tc.startErr || !strings.Contains(string(res.Stderr), tc.stderr) || res.Unenforced {
				t.Errorf("%q: exit %d, start error %q, stderr %q, unenforced %v; want exit %d, start error %q, stderr with %q",
					tc.argv, res.ExitCode, res.StartError, res.Stderr, res.Unenforced, tc.exit, tc.startErr, tc.stderr)
			}
		})
	}
}

// TestExecPolicyProcesses: a restricted background process outlives the thread that
// started it (no parent-death signal, reaped, killable), and the terminal's programs are
// restricted as exec's are.
func TestExecPolicyProcesses(t *testing.T) {
	s := restrictingServer(t)
	sleep := &agent.ExecPolicy{Programs: []string{"sleep"}}
	pi := opResult[agent.ProcInfo](t, s.proc.Start, agent.ProcStartArgs{Argv: []string{"sleep", "0.3"}, Launch: sleep})
	time.Sleep(100 * time.Millisecond) // the thread that started it is gone by now
	info, err := s.proc.Keeper.Info(t.Context(), pi.ID, 5*time.Second)
	if err != nil || info.Running || info.ExitCode == nil || *info.ExitCode != 0 {
		t.Errorf("sleep 0.3 under [sleep]: %+v, %v; want exit 0", info, err)
	}
	pi = opResult[agent.ProcInfo](t, s.proc.Start, agent.ProcStartArgs{Argv: []string{"sleep", "30"}, Launch: sleep})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	raw, _ := json.Marshal(agent.ProcKillArgs{ID: pi.ID, GraceMS: 100})
	if _, err := s.proc.Kill(ctx, raw, nil, nil); err != nil {
		t.Errorf("kill sleep 30: %v", err)
	}
	if _, err := s.proc.Start(t.Context(), json.RawMessage(`{"argv":["sh","-c","true"],"launch":{"programs":["sleep"]}}`), nil, nil); err == nil {
		t.Error("sh under [sleep] started in the background")
	}

	for _, tc := range []struct {
		script string
		policy *agent.ExecPolicy
		exit   int
		stderr string
	}{
		{"env true", &agent.ExecPolicy{Programs: []string{"env", "true"}}, 0, ""},
		{"env true", &agent.ExecPolicy{Programs: []string{"env"}}, 126, "Permission denied"},
		{"sleep 0", &agent.ExecPolicy{Programs: []string{"env"}}, 126, "cws-sh: sleep: exec sleep: permission denied"},
	} {
		res := opResult[*agent.TermRunResult](t, s.termRun, agent.TermRunArgs{Command: tc.script, Background: true, Launch: tc.policy})
		if res.ExitCode != tc.exit || !strings.Contains(string(res.Stderr), tc.stderr) {
			t.Errorf("terminal %q under %v: exit %d, stderr %q; want %d, %q", tc.script, tc.policy.Programs, res.ExitCode, res.Stderr, tc.exit, tc.stderr)
		}
	}
}
