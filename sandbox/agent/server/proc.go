package server

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// maxRunning bounds the background processes one sandbox may run at once.
const maxRunning = 64

// procTable owns the background processes. It belongs to the Server, not to a
// connection, so processes outlive the host's stream.
type procTable struct {
	mu    sync.Mutex
	next  int
	procs map[string]*proc
}

func newProcTable() *procTable { return &procTable{procs: map[string]*proc{}} }

// proc is one background process and its output rings.
type proc struct {
	id         string
	argv       []string
	cmd        *exec.Cmd
	started    time.Time
	unenforced bool // started with an ExecPolicy Landlock could not enforce

	mu       sync.Mutex
	stdout   ring
	stderr   ring
	ended    *time.Time
	exitCode int
	changed  chan struct{} // closed and replaced on new output or exit
}

func (p *proc) info() agent.ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	pi := agent.ProcInfo{ID: p.id, Argv: p.argv, PID: p.cmd.Process.Pid, Running: p.ended == nil, StartedAt: p.started, Unenforced: p.unenforced}
	if p.ended != nil {
		code, end := p.exitCode, *p.ended
		pi.ExitCode, pi.EndedAt = &code, &end
	}
	return pi
}

func (p *proc) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// procWriter appends to one of a proc's rings.
type procWriter struct {
	p   *proc
	out *ring
}

func (w procWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	w.out.write(b)
	w.p.notify()
	w.p.mu.Unlock()
	return len(b), nil
}

func (s *Server) procStart(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.ProcStartArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	t := s.procs
	t.mu.Lock()
	running := 0
	for _, p := range t.procs {
		if p.info().Running {
			running++
		}
	}
	t.mu.Unlock()
	if running >= maxRunning {
		return nil, agent.Errorf(agent.CodeTooLarge, "", "%d background processes are running, the limit is %d: kill one first", running, maxRunning)
	}
	cmd, err := s.command(a.Argv, a.Cwd, a.Env, a.Guard, a.Launch)
	var nf errNotFound
	if errors.As(err, &nf) {
		return nil, agent.Errorf(agent.CodeNotFound, "", "%s", nf.Error())
	}
	if err != nil {
		return nil, err
	}
	limit := outputLimit(a.OutputCap)
	p := &proc{argv: a.Argv, cmd: cmd.Cmd, unenforced: cmd.unenforced, changed: make(chan struct{}), stdout: newRing(int(limit)), stderr: newRing(int(limit))}
	cmd.Stdout, cmd.Stderr = procWriter{p, &p.stdout}, procWriter{p, &p.stderr}
	if err := cmd.start(); err != nil {
		return nil, agent.Errorf(agent.CodeInvalid, "", "start %s: %v", a.Argv[0], err)
	}
	p.started = time.Now().UTC()
	t.mu.Lock()
	t.next++
	p.id = "p" + strconv.Itoa(t.next)
	t.procs[p.id] = p
	t.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		code, _ := exitStatus(cmd.Cmd, nil)
		now := time.Now().UTC()
		p.mu.Lock()
		p.ended, p.exitCode = &now, code
		p.notify()
		p.mu.Unlock()
	}()
	return p.info(), nil
}

func (s *Server) lookupProc(id string) (*proc, error) {
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	p, ok := s.procs.procs[id]
	if !ok {
		return nil, agent.Errorf(agent.CodeNotFound, "", "no background process %q", id)
	}
	return p, nil
}

func (s *Server) procList(ctx context.Context, _ json.RawMessage, _ []byte, _ *responder) (any, error) {
	s.procs.mu.Lock()
	ps := make([]*proc, 0, len(s.procs.procs))
	for _, p := range s.procs.procs {
		ps = append(ps, p)
	}
	s.procs.mu.Unlock()
	out := make([]agent.ProcInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out, nil
}

func (s *Server) procOutput(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.ProcOutputArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	p, err := s.lookupProc(a.ID)
	if err != nil {
		return nil, err
	}
	err = waitForOutput(ctx, a.WaitMS, func() (bool, <-chan struct{}) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.stdout.total > a.StdoutOffset || p.stderr.total > a.StderrOffset || p.ended != nil, p.changed
	})
	if err != nil {
		return nil, err
	}
	out := agent.ProcOutput{Proc: p.info()}
	p.mu.Lock()
	var d1, d2 bool
	out.Stdout, out.StdoutOffset, d1 = p.stdout.since(a.StdoutOffset)
	out.Stderr, out.StderrOffset, d2 = p.stderr.since(a.StderrOffset)
	p.mu.Unlock()
	out.Dropped = d1 || d2
	return &out, nil
}

func (s *Server) procKill(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.ProcKillArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	p, err := s.lookupProc(a.ID)
	if err != nil {
		return nil, err
	}
	grace := defaultGrace
	if a.GraceMS > 0 {
		grace = time.Duration(a.GraceMS) * time.Millisecond
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.After(grace)
	for {
		p.mu.Lock()
		ended, changed := p.ended != nil, p.changed
		p.mu.Unlock()
		if ended {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			deadline = nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // leftovers in the group
	return p.info(), nil
}

// ring keeps the last len(buf) bytes of a stream and counts all bytes ever written.
type ring struct {
	buf   []byte
	total int64 // bytes ever written; offsets are in this space
}

func newRing(n int) ring { return ring{buf: make([]byte, 0, n)} }

func (r *ring) write(b []byte) {
	c := cap(r.buf)
	r.total += int64(len(b))
	if len(b) >= c {
		r.buf = append(r.buf[:0], b[len(b)-c:]...)
		return
	}
	if over := len(r.buf) + len(b) - c; over > 0 {
		r.buf = append(r.buf[:0], r.buf[over:]...)
	}
	r.buf = append(r.buf, b...)
}

// since returns what was written from offset on, the next offset, and whether some of
// it had already been overwritten.
func (r *ring) since(off int64) ([]byte, int64, bool) {
	first := r.total - int64(len(r.buf))
	dropped := false
	if off < first {
		off, dropped = first, true
	}
	if off > r.total {
		off = r.total
	}
	return append([]byte(nil), r.buf[off-first:]...), r.total, dropped
}

// waitForOutput waits up to waitMS (at most a minute) until state reports something new,
// or ctx ends. state returns whether there is something new and the channel that is
// closed on the next change (read under the caller's lock).
func waitForOutput(ctx context.Context, waitMS int64, state func() (fresh bool, changed <-chan struct{})) error {
	deadline := time.Now().Add(time.Duration(min(waitMS, 60_000)) * time.Millisecond)
	for {
		fresh, changed := state()
		wait := time.Until(deadline)
		if fresh || wait <= 0 {
			return nil
		}
		select {
		case <-changed:
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
