// Package exec serves the exec operation of package agent and prepares every command the
// agent starts (exec, background processes, the terminal's programs): in a workspace
// directory, in its own process group, with the fixed base environment, and restricted
// by Landlock when an exec policy says what it may execute (launcher.go).
package exec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/ident"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// Exec defaults.
const (
	defaultOutputCap = 1 << 20
	DefaultGrace     = 2 * time.Second // from SIGTERM to SIGKILL when the caller sets none
	// pipeDrain is how long output is still collected after the command itself exits
	// while a child it left behind holds the pipes open; then the group is killed.
	pipeDrain = 250 * time.Millisecond
)

// Runner prepares and runs commands in a workspace.
type Runner struct {
	WS      *fs.Workspace
	BaseEnv map[string]string // the environment every command starts from (PATH is always SafePath)
	// Landlock is the Landlock ABI commands are restricted with; 0: commands with an
	// ExecPolicy run unenforced (or are refused when it requires Landlock).
	Landlock int
	Rulesets *launch.Cache // each ExecPolicy's Landlock ruleset; nil without Landlock
	// Scope, when set, is the scope-only ruleset (launch.NewScopeRuleset) every command
	// without an ExecPolicy is restricted with, and Rulesets then scope the domains of
	// the commands with one alike: each command starts through Launcher (the agent's
	// binary, `launch -ruleset-fd`), in a scoped Landlock domain of its own that no
	// thread of the agent is in (same-uid mode: launch.Ruleset.StartVia). nil: commands
	// without a policy start unrestricted, those with one from a throwaway thread.
	Scope    *launch.Ruleset
	Launcher string
}

// Command prepares argv to run without a shell in a workspace directory, in its own
// process group, with the fixed base environment plus env, and restricted by Landlock
// when launch restricts what it may execute (launcher.go).
func (rn *Runner) Command(argv []string, cwd string, env map[string]string, g *guard.Guard, launch *agent.ExecPolicy) (*Prepared, error) {
	cmd, err := rn.BaseCommand(argv, cwd, env, g)
	if err != nil {
		return nil, err
	}
	return rn.LaunchThrough(cmd, launch)
}

// BaseCommand is Command without the exec policy.
func (rn *Runner) BaseCommand(argv []string, cwd string, env map[string]string, g *guard.Guard) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, agent.Errorf(agent.CodeInvalid, "", "argv must name a command")
	}
	if cwd == "" {
		cwd = "."
	}
	t, err := rn.WS.Open(cwd, g, false)
	if err != nil {
		return nil, err
	}
	if fi, err := rn.WS.Root().Stat(t.Real); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, agent.Errorf(agent.CodeNotDir, t.Rel, "working directory is not a directory")
	}
	bin, err := rn.lookPath(argv[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir = filepath.Join(rn.WS.Dir(), t.Real)
	cmd.Env = rn.Environ(env)
	// As the tool user, never the agent's own uid (package ident).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: ident.Credential()}
	return cmd, nil
}

// ErrNotFound is a command that isn't on SafePath: an outcome, not a protocol error.
type ErrNotFound struct{ Name string }

func (e ErrNotFound) Error() string {
	return "command not found: " + e.Name + " (looked in " + agent.SafePath + ")"
}

// LookPath finds name on SafePath as Command does.
func (rn *Runner) LookPath(name string) (string, error) { return rn.lookPath(name) }

// lookPath finds name on SafePath only, refusing anything that resolves into the
// workspace. Names with a slash are taken as they are (the host has vetted them).
func (rn *Runner) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(agent.SafePath) {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil && (real == rn.WS.Dir() || strings.HasPrefix(real, rn.WS.Dir()+"/")) {
			continue
		}
		return p, nil
	}
	return "", ErrNotFound{name}
}

// Environ is the environment a command gets: the fixed base, BaseEnv, then extra, and
// always PATH=SafePath.
func (rn *Runner) Environ(extra map[string]string) []string {
	env := map[string]string{"HOME": "/tmp", "LANG": "C.UTF-8", "USER": "cws", "TERM": "dumb"}
	for k, v := range rn.BaseEnv {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	env["PATH"] = agent.SafePath
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// maxOutputCap is the most one stream may keep: stdout and stderr travel together in
// one frame body.
const maxOutputCap = agent.MaxBody/2 - 4096

// OutputLimit is how much of each stream a command keeps when the caller asked for
// asked bytes (0: the default).
func OutputLimit(asked int64) int64 {
	if asked <= 0 {
		return defaultOutputCap
	}
	return min(asked, maxOutputCap)
}

// Capture keeps the first Max bytes written, reports truncation, and never blocks the
// writer: past the cap it keeps draining, so the process is not stalled on a full pipe.
type Capture struct {
	Max    int64
	Stream func([]byte) error // optional: forward what is kept as it arrives; set before the first Write

	mu        sync.Mutex
	buf       bytes.Buffer
	truncated bool
}

// Stop ends the streaming and returns what was kept and whether anything was dropped.
func (c *Capture) Stop() ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Stream = nil
	return c.buf.Bytes(), c.truncated
}

func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := p
	if room := c.Max - int64(c.buf.Len()); int64(len(keep)) > room {
		keep = keep[:max(room, 0)]
		c.truncated = true
	}
	c.buf.Write(keep)
	if c.Stream != nil && len(keep) > 0 {
		if err := c.Stream(keep); err != nil {
			c.Stream = nil // the host went away; keep running, stop streaming
		}
	}
	return len(p), nil
}

// Exec runs a command to its end and answers with its output (agent.ExecArgs).
func (rn *Runner) Exec(ctx context.Context, args json.RawMessage, stdin []byte, r *op.Responder) (any, error) {
	var a agent.ExecArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	cmd, err := rn.Command(a.Argv, a.Cwd, a.Env, a.Guard, a.Launch)
	var nf ErrNotFound
	if errors.As(err, &nf) {
		return &agent.ExecResult{ExitCode: -1, StartError: nf.Error(), Unenforced: a.Launch != nil && rn.Landlock == 0}, nil
	}
	if err != nil {
		return nil, err
	}
	limit := OutputLimit(a.OutputCap)
	stdout, stderr := &Capture{Max: limit}, &Capture{Max: limit}
	if a.Stream {
		stdout.Stream = func(p []byte) error { return r.Event(agent.EventStdout, p) }
		stderr.Stream = func(p []byte) error { return r.Event(agent.EventStderr, p) }
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if len(stdin) > 0 {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.WaitDelay = pipeDrain
	grace := DefaultGrace
	if a.GraceMS > 0 {
		grace = time.Duration(a.GraceMS) * time.Millisecond
	}

	started, oomBefore := time.Now(), oomKills()
	if err := cmd.Start(); err != nil {
		return &agent.ExecResult{ExitCode: -1, StartError: err.Error(), Unenforced: cmd.Unenforced}, nil
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var timeout <-chan time.Time
	if a.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(a.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	res := &agent.ExecResult{Unenforced: cmd.Unenforced}
	select {
	case err = <-done:
	case <-timeout:
		res.TimedOut = true
		err = stopGroup(pgid, grace, done)
	case <-ctx.Done():
		res.Canceled = true
		err = stopGroup(pgid, grace, done)
	}
	// Whatever the command left behind in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)

	res.DurationMS = time.Since(started).Milliseconds()
	res.ExitCode, res.Signal = ExitStatus(cmd.Cmd, err)
	if oomKilled(oomBefore, res.ExitCode, res.Signal) { // oom.go
		res.OOMKilled, res.MemoryLimitBytes = true, memoryLimit()
	}
	res.Stdout, res.StdoutTruncated = stdout.Stop()
	res.Stderr, res.StderrTruncated = stderr.Stop()
	return res, nil
}

// stopGroup asks the process group to stop (SIGTERM), and forces it (SIGKILL) when the
// grace runs out. It returns the leader's Wait result.
func stopGroup(pgid int, grace time.Duration, done <-chan error) error {
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return <-done
	}
}

// ExitStatus reads the exit code, or -1 and the signal's name when it was killed.
func ExitStatus(cmd *exec.Cmd, _ error) (int, string) {
	ps := cmd.ProcessState
	if ps == nil {
		return -1, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, ws.Signal().String()
	}
	return ps.ExitCode(), ""
}
