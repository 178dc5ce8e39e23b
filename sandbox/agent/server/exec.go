package server

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
)

// Exec defaults.
const (
	defaultOutputCap = 1 << 20
	defaultGrace     = 2 * time.Second
	// pipeDrain is how long output is still collected after the command itself exits
	// while a child it left behind holds the pipes open; then the group is killed.
	pipeDrain = 250 * time.Millisecond
)

// command prepares argv to run without a shell in a workspace directory, in its own
// process group, with the fixed base environment plus env, and restricted by Landlock
// when launch restricts what it may execute (launcher.go).
func (s *Server) command(argv []string, cwd string, env map[string]string, g *guard.Guard, launch *agent.ExecPolicy) (*prepared, error) {
	cmd, err := s.baseCommand(argv, cwd, env, g)
	if err != nil {
		return nil, err
	}
	return s.launchThrough(cmd, launch)
}

// baseCommand is command without the exec policy.
func (s *Server) baseCommand(argv []string, cwd string, env map[string]string, g *guard.Guard) (*exec.Cmd, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, agent.Errorf(agent.CodeInvalid, "", "argv must name a command")
	}
	if cwd == "" {
		cwd = "."
	}
	t, err := s.ws.open(cwd, g, false)
	if err != nil {
		return nil, err
	}
	if fi, err := s.ws.root.Stat(t.real); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, agent.Errorf(agent.CodeNotDir, t.rel, "working directory is not a directory")
	}
	bin, err := s.lookPath(argv[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Dir = filepath.Join(s.ws.dir, t.real)
	cmd.Env = s.environ(env)
	// As the tool user, never the agent's own uid (package ident).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: ident.Credential()}
	return cmd, nil
}

// errNotFound is a command that isn't on SafePath: an outcome, not a protocol error.
type errNotFound struct{ name string }

func (e errNotFound) Error() string {
	return "command not found: " + e.name + " (looked in " + agent.SafePath + ")"
}

// lookPath finds name on SafePath only, refusing anything that resolves into the
// workspace. Names with a slash are taken as they are (the host has vetted them).
func (s *Server) lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for _, dir := range filepath.SplitList(agent.SafePath) {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil && (real == s.ws.dir || strings.HasPrefix(real, s.ws.dir+"/")) {
			continue
		}
		return p, nil
	}
	return "", errNotFound{name}
}

func (s *Server) environ(extra map[string]string) []string {
	env := map[string]string{"HOME": "/tmp", "LANG": "C.UTF-8", "USER": "cws", "TERM": "dumb"}
	for k, v := range s.cfg.BaseEnv {
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

func outputLimit(asked int64) int64 {
	if asked <= 0 {
		return defaultOutputCap
	}
	return min(asked, maxOutputCap)
}

// capture keeps the first max bytes written, reports truncation, and never blocks the
// writer: past the cap it keeps draining, so the process is not stalled on a full pipe.
type capture struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	max       int64
	truncated bool
	stream    func([]byte) error // optional: forward what is kept as it arrives
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := p
	if room := c.max - int64(c.buf.Len()); int64(len(keep)) > room {
		keep = keep[:max(room, 0)]
		c.truncated = true
	}
	c.buf.Write(keep)
	if c.stream != nil && len(keep) > 0 {
		if err := c.stream(keep); err != nil {
			c.stream = nil // the host went away; keep running, stop streaming
		}
	}
	return len(p), nil
}

func (s *Server) exec(ctx context.Context, args json.RawMessage, stdin []byte, r *responder) (any, error) {
	var a agent.ExecArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	cmd, err := s.command(a.Argv, a.Cwd, a.Env, a.Guard, a.Launch)
	var nf errNotFound
	if errors.As(err, &nf) {
		return &agent.ExecResult{ExitCode: -1, StartError: nf.Error(), Unenforced: a.Launch != nil && s.landlock == 0}, nil
	}
	if err != nil {
		return nil, err
	}
	limit := outputLimit(a.OutputCap)
	stdout, stderr := &capture{max: limit}, &capture{max: limit}
	if a.Stream {
		stdout.stream = func(p []byte) error { return r.event(agent.EventStdout, p) }
		stderr.stream = func(p []byte) error { return r.event(agent.EventStderr, p) }
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if len(stdin) > 0 {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.WaitDelay = pipeDrain
	grace := defaultGrace
	if a.GraceMS > 0 {
		grace = time.Duration(a.GraceMS) * time.Millisecond
	}

	started, oomBefore := time.Now(), oomKills()
	if err := cmd.start(); err != nil {
		return &agent.ExecResult{ExitCode: -1, StartError: err.Error(), Unenforced: cmd.unenforced}, nil
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
	res := &agent.ExecResult{Unenforced: cmd.unenforced}
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
	res.ExitCode, res.Signal = exitStatus(cmd.Cmd, err)
	if oomKilled(oomBefore, res.ExitCode, res.Signal) { // oom.go
		res.OOMKilled, res.MemoryLimitBytes = true, memoryLimit()
	}
	stdout.mu.Lock()
	stderr.mu.Lock()
	res.Stdout, res.StdoutTruncated = stdout.buf.Bytes(), stdout.truncated
	res.Stderr, res.StderrTruncated = stderr.buf.Bytes(), stderr.truncated
	stdout.stream, stderr.stream = nil, nil
	stderr.mu.Unlock()
	stdout.mu.Unlock()
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

// exitStatus reads the exit code, or -1 and the signal's name when it was killed.
func exitStatus(cmd *exec.Cmd, _ error) (int, string) {
	ps := cmd.ProcessState
	if ps == nil {
		return -1, ""
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, ws.Signal().String()
	}
	return ps.ExitCode(), ""
}
