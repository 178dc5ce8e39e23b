package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/exec"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
	"github.com/cwsdev/cws/sandbox/agent/server/keep"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
	"github.com/cwsdev/cws/sandbox/agent/server/shell"
	"golang.org/x/sys/unix"
)

// maxTerminals bounds the terminals one sandbox keeps.
const maxTerminals = 16

// terminals holds each Server's terminals. They belong to the Server, not to a
// connection, like background processes; the table hangs off the Server here so that
// registering the ops is all server.go needs to know of them.
var terminals sync.Map // *Server → *termTable

type termTable struct {
	mu    sync.Mutex
	terms map[string]*terminal

	tmpOnce sync.Once
	tmp     *fs.Workspace // /tmp, opened beneath like the workspace; nil if it can't be
}

func (s *Server) terms() *termTable {
	t, _ := terminals.LoadOrStore(s, &termTable{terms: map[string]*terminal{}})
	return t.(*termTable)
}

// terminal is one persistent shell and its scrollback.
type terminal struct {
	sh  *shell.Shell
	env []string // names the host set for it: they reach its programs
	run chan struct{}

	mu      sync.Mutex
	scroll  keep.Ring
	changed chan struct{}                   // closed and replaced on new output and when a run ends
	sink    func(ev string, p []byte) error // the running call's event stream, if asked
	cancel  context.CancelFunc
}

func (t *terminal) running() bool { return t.cancel != nil }

func (t *terminal) notify() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// termWriter appends one stream of a terminal to its scrollback.
type termWriter struct {
	t  *terminal
	ev string
}

func (w termWriter) Write(p []byte) (int, error) {
	t := w.t
	t.mu.Lock()
	defer t.mu.Unlock()
	t.scroll.Write(p)
	t.notify()
	if t.sink != nil && t.sink(w.ev, p) != nil {
		t.sink = nil // the host went away; keep running, stop streaming
	}
	return len(p), nil
}

func termID(id string) string {
	if id == "" {
		return agent.DefaultTerminal
	}
	return id
}

func (s *Server) termRun(ctx context.Context, args json.RawMessage, _ []byte, r *op.Responder) (any, error) {
	var a agent.TermRunArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	if a.Background {
		return s.termBackground(ctx, a, r)
	}
	t, err := s.terminal(termID(a.ID), a)
	if err != nil {
		return nil, err
	}
	select {
	case t.run <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-t.run }()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.mu.Lock()
	start := t.scroll.Total()
	t.cancel = cancel
	if a.Stream {
		t.sink = r.Event
	}
	t.mu.Unlock()

	began := time.Now()
	res, err := t.sh.Run(ctx, a.Command, s.termPolicy(a, t.env), termHost{s, a.Guard, a.Launch}, time.Duration(a.TimeoutMS)*time.Millisecond)

	t.mu.Lock()
	t.sink, t.cancel = nil, nil
	out, next, dropped := t.scroll.Since(start)
	t.notify()
	t.mu.Unlock()
	if err != nil {
		return nil, termError(err)
	}
	return &agent.TermRunResult{
		ExitCode: res.ExitCode, Stdout: out, Offset: start, NextOffset: next, Dropped: dropped,
		Cwd: s.termCwd(t.sh.Dir()), TimedOut: res.TimedOut, Canceled: res.Canceled, Exited: res.Exited,
		DurationMS: time.Since(began).Milliseconds(),
	}, nil
}

// terminal returns the terminal id, opening it (in a.Cwd, with a.Env) if it is new.
func (s *Server) terminal(id string, a agent.TermRunArgs) (*terminal, error) {
	tt := s.terms()
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if t, ok := tt.terms[id]; ok {
		return t, nil
	}
	if len(tt.terms) >= maxTerminals {
		return nil, agent.Errorf(agent.CodeTooLarge, "", "%d terminals are open, the limit is %d: close one first", len(tt.terms), maxTerminals)
	}
	t := &terminal{run: make(chan struct{}, 1), changed: make(chan struct{}), scroll: keep.NewRing(agent.TermScrollback)}
	sh, err := s.newShell(a, termWriter{t, agent.EventStdout}, termWriter{t, agent.EventStderr})
	if err != nil {
		return nil, err
	}
	t.sh = sh
	for k := range a.Env {
		t.env = append(t.env, k)
	}
	tt.terms[id] = t
	return t, nil
}

// newShell opens a shell in a.Cwd with the fixed base environment plus a.Env.
func (s *Server) newShell(a agent.TermRunArgs, stdout, stderr io.Writer) (*shell.Shell, error) {
	cwd := a.Cwd
	if cwd == "" {
		cwd = "."
	}
	t, err := s.ws.Open(cwd, a.Guard, false)
	if err != nil {
		return nil, err
	}
	if fi, err := s.ws.Root().Stat(t.Real); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, agent.Errorf(agent.CodeNotDir, t.Rel, "working directory is not a directory")
	}
	env := map[string]string{}
	for _, kv := range s.exec.Environ(a.Env) {
		k, v, _ := strings.Cut(kv, "=")
		if !shell.Forbidden(k) {
			env[k] = v
		}
	}
	return shell.New(shell.Config{
		Dir: filepath.Join(s.ws.Dir(), t.Real), Home: s.ws.Dir(), Env: env, Stdout: stdout, Stderr: stderr,
	})
}

func (s *Server) termPolicy(a agent.TermRunArgs, pass []string) shell.Policy {
	return shell.Policy{Allowed: a.Allowed, EnvAllowlist: a.EnvAllowlist, Pass: pass}
}

// termBackground runs a command in a fresh shell, capturing stdout and stderr apart.
func (s *Server) termBackground(ctx context.Context, a agent.TermRunArgs, r *op.Responder) (any, error) {
	limit := exec.OutputLimit(a.OutputCap)
	stdout, stderr := &exec.Capture{Max: limit}, &exec.Capture{Max: limit}
	if a.Stream {
		stdout.Stream = func(p []byte) error { return r.Event(agent.EventStdout, p) }
		stderr.Stream = func(p []byte) error { return r.Event(agent.EventStderr, p) }
	}
	sh, err := s.newShell(a, stdout, stderr)
	if err != nil {
		return nil, err
	}
	var pass []string
	for k := range a.Env {
		pass = append(pass, k)
	}
	began := time.Now()
	res, err := sh.Run(ctx, a.Command, s.termPolicy(a, pass), termHost{s, a.Guard, a.Launch}, time.Duration(a.TimeoutMS)*time.Millisecond)
	if err != nil {
		return nil, termError(err)
	}
	out := &agent.TermRunResult{
		ExitCode: res.ExitCode, Cwd: s.termCwd(sh.Dir()), TimedOut: res.TimedOut, Canceled: res.Canceled,
		Exited: res.Exited, DurationMS: time.Since(began).Milliseconds(),
	}
	out.Stdout, out.StdoutTruncated = stdout.Stop()
	out.Stderr, out.StderrTruncated = stderr.Stop()
	return out, nil
}

// termError puts the shell's refusals on the wire; the host's own refusals (paths, cd)
// are wire or guard errors already.
func termError(err error) error {
	var na *shell.NotAllowed
	if errors.As(err, &na) {
		return &agent.WireError{Code: agent.CodeCommand, Path: na.Program, Rule: "allowedCommands", Message: na.Error()}
	}
	return err
}

// termCwd is an absolute directory of the shell, workspace-relative.
func (s *Server) termCwd(dir string) string {
	if rel, err := s.ws.Clean(dir); err == nil {
		return rel
	}
	return dir
}

func (s *Server) lookupTerm(id string) (*terminal, bool) {
	tt := s.terms()
	tt.mu.Lock()
	defer tt.mu.Unlock()
	t, ok := tt.terms[termID(id)]
	return t, ok
}

func (s *Server) termRead(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TermReadArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	t, ok := s.lookupTerm(a.ID)
	if !ok {
		return nil, agent.Errorf(agent.CodeNotFound, "", "no terminal %q", termID(a.ID))
	}
	if err := keep.WaitFor(ctx, a.WaitMS, func() (bool, <-chan struct{}) {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.scroll.Total() > a.Offset || !t.running(), t.changed
	}); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	data, next, dropped := t.scroll.Since(a.Offset)
	out := &agent.TermOutput{Data: data, Offset: next - int64(len(data)), NextOffset: next, Dropped: dropped, Running: t.running()}
	if a.Limit > 0 && int64(len(out.Data)) > a.Limit {
		out.Data = out.Data[:a.Limit]
		out.NextOffset = out.Offset + a.Limit
	}
	return out, nil
}

func (s *Server) termInfo(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TermIDArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	info := agent.TermInfo{OSType: "Linux", OSVersion: osVersion(), Shell: shell.Name, Cwd: "."}
	if t, ok := s.lookupTerm(a.ID); ok {
		info.Open, info.Cwd = true, s.termCwd(t.sh.Dir())
		t.mu.Lock()
		info.Running = t.running()
		t.mu.Unlock()
	}
	return info, nil
}

func (s *Server) termClose(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TermIDArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	tt := s.terms()
	tt.mu.Lock()
	t, ok := tt.terms[termID(a.ID)]
	delete(tt.terms, termID(a.ID))
	tt.mu.Unlock()
	if !ok {
		return nil, agent.Errorf(agent.CodeNotFound, "", "no terminal %q", termID(a.ID))
	}
	t.mu.Lock()
	if t.cancel != nil {
		t.cancel() // the run kills its process groups and ends
	}
	t.mu.Unlock()
	return struct{}{}, nil
}

// osVersion is /etc/os-release's PRETTY_NAME and the kernel release.
func osVersion() string {
	name := "Linux"
	if f, err := os.Open("/etc/os-release"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
				name = strings.Trim(v, `"'`)
			}
		}
		f.Close()
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		name += " (kernel " + unix.ByteSliceToString(u.Release[:]) + ")"
	}
	return name
}

// termHost is what the shell may do in the workspace under one call's guard.
type termHost struct {
	s      *Server
	g      *guard.Guard
	launch *agent.ExecPolicy
}

// Command builds the command as exec and proc.start do.
func (h termHost) Command(argv []string, dir string, env map[string]string) (*osexec.Cmd, error) {
	rel, err := h.s.ws.Clean(dir)
	if err != nil {
		return nil, err
	}
	cmd, err := h.s.exec.BaseCommand(argv, rel, env, h.g)
	var nf exec.ErrNotFound
	if errors.As(err, &nf) {
		return nil, fmt.Errorf("%w: %s", shell.ErrNotFound, nf.Name)
	}
	if err != nil {
		return nil, err
	}
	if _, err := h.s.exec.LaunchThrough(cmd, h.launch); err != nil { // requireLandlock without Landlock
		return nil, err
	}
	return cmd, nil
}

// Start starts a command Command made, under the call's exec policy as exec does.
func (h termHost) Start(cmd *osexec.Cmd) error {
	pc, err := h.s.exec.LaunchThrough(cmd, h.launch)
	if err != nil {
		return err
	}
	return pc.Start()
}

// Chdir lets cd into a directory beneath the workspace that the guard allows.
func (h termHost) Chdir(dir string) error {
	rel, err := h.s.ws.Clean(dir)
	if err != nil {
		return err
	}
	_, err = h.s.ws.Open(rel, h.g, false)
	return err
}

// Open opens a file for the shell: beneath the workspace under the guard (writes under
// its write rules), beneath /tmp without following any symlink, or /dev/null. A write
// truncates only once the file passed every check.
func (h termHost) Open(path string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	write := flag&(os.O_WRONLY|os.O_RDWR|os.O_APPEND|os.O_CREATE|os.O_TRUNC) != 0
	trunc := flag&os.O_TRUNC != 0
	flag &^= os.O_TRUNC
	if flag&os.O_CREATE == 0 {
		perm = 0 // openat2 refuses a mode without O_CREAT
	}
	var f *os.File
	var err error
	ws := h.s.ws
	switch {
	case path == "/dev/null":
		return os.OpenFile(path, flag, 0)
	case path == ws.Dir() || strings.HasPrefix(path, ws.Dir()+"/"):
		var rel string
		if rel, err = ws.Clean(path); err != nil {
			return nil, err
		}
		_, f, err = ws.OpenChecked(rel, h.g, write, flag, uint32(perm.Perm()))
	case path == "/tmp" || strings.HasPrefix(path, "/tmp/"):
		tmp := h.s.terms().tmpDir()
		if tmp == nil {
			return nil, agent.Errorf(agent.CodeTraversal, path, "/tmp cannot be opened")
		}
		real := strings.TrimPrefix(strings.TrimPrefix(path, "/tmp"), "/")
		if real == "" {
			real = "."
		}
		if f, err = tmp.OpenReal(real, flag, uint32(perm.Perm())); err == nil && fs.Denies(h.g) {
			if err = fs.CheckLinks(f, h.g, path); err != nil {
				f.Close()
			}
		}
	default:
		return nil, agent.Errorf(agent.CodeTraversal, path, "the shell opens files only in the workspace, /tmp and /dev/null")
	}
	if err != nil {
		return nil, err
	}
	if trunc {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

func (tt *termTable) tmpDir() *fs.Workspace {
	tt.tmpOnce.Do(func() {
		tt.tmp, _ = fs.OpenWorkspace("/tmp")
	})
	return tt.tmp
}
