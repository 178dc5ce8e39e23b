// Package sandboxtest provides Local, an in-process sandbox driver for tests of the
// layers above the sandbox: each "container" is a temp directory served by a real
// agent server (sandbox/agent/server) over net.Pipe, so the wire protocol, path
// resolution and guard are the real ones; only Docker is left out. Commands run on the
// host as the test's user.
package sandboxtest

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent/server"
)

// Local is an in-process sandbox driver.
type Local struct {
	t  testing.TB
	mu sync.Mutex
	sb map[string]*local
	n  int
	// Attaches counts Attach calls, so tests can assert that no sandbox was touched.
	Attaches int
	// Creates counts Create calls.
	Creates int
	// Starts counts Start calls.
	Starts int
	// StartDelay is how long Start takes before the sandbox runs (docker start takes
	// about 200 ms).
	StartDelay              time.Duration
	agentRestarts, restarts int // see Heals
	// StuckAfterAgentRestart keeps a frozen agent frozen through RestartAgent, so that
	// only Restart brings it back.
	StuckAfterAgentRestart bool
}

type local struct {
	info   sandbox.Info
	dir    string
	srv    *server.Server
	lbl    map[string]string
	frozen *gate
}

// gate stops an agent's connections as SIGSTOP stops a process: while closed, the agent
// neither reads nor writes on them.
type gate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	closed bool
}

func newGate() *gate {
	g := &gate{}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gate) set(closed bool) {
	g.mu.Lock()
	g.closed = closed
	g.mu.Unlock()
	g.cond.Broadcast()
}

func (g *gate) wait() {
	g.mu.Lock()
	for g.closed {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

// gatedConn is the agent's end of a connection, held while its gate is closed.
type gatedConn struct {
	net.Conn
	g *gate
}

func (c gatedConn) Read(p []byte) (int, error) {
	c.g.wait()
	n, err := c.Conn.Read(p)
	c.g.wait()
	return n, err
}

func (c gatedConn) Write(p []byte) (int, error) {
	c.g.wait()
	return c.Conn.Write(p)
}

// New returns an empty Local whose sandboxes are removed when the test ends.
func New(t testing.TB) *Local {
	l := &Local{t: t, sb: map[string]*local{}}
	t.Cleanup(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, s := range l.sb {
			s.frozen.set(false)
			s.srv.Close()
			os.RemoveAll(s.dir)
		}
	})
	return l
}

// Create makes a sandbox: a fresh temp directory with an agent server on it.
func (l *Local) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if l.has(spec.Session) {
		return sandbox.Info{}, fmt.Errorf("sandbox of session %s: %w", spec.Session, sandbox.ErrExists)
	}
	dir, err := os.MkdirTemp("", "cws-local-")
	if err != nil {
		return sandbox.Info{}, err
	}
	srv, err := server.New(server.Config{Root: dir, Version: "test"})
	if err != nil {
		return sandbox.Info{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hasLocked(spec.Session) { // made meanwhile
		srv.Close()
		os.RemoveAll(dir)
		return sandbox.Info{}, fmt.Errorf("sandbox of session %s: %w", spec.Session, sandbox.ErrExists)
	}
	l.n++
	l.Creates++
	id := fmt.Sprintf("local-%d", l.n)
	info := sandbox.Info{ID: id, Session: spec.Session, Tenant: spec.Tenant, Subject: spec.Subject, Image: spec.Image, Expires: spec.Expires, Running: true, Volume: dir}
	lbl := maps.Clone(spec.Labels)
	if lbl == nil {
		lbl = map[string]string{}
	}
	lbl[sandbox.LabelManaged], lbl[sandbox.LabelSession], lbl[sandbox.LabelTenant] = "true", spec.Session, spec.Tenant
	lbl[sandbox.LabelSubject] = spec.Subject
	if spec.Default {
		lbl[sandbox.LabelDefault] = "true"
		info.Default = true
	}
	l.sb[id] = &local{info: info, dir: dir, srv: srv, lbl: lbl, frozen: newGate()}
	return info, nil
}

// has says whether session has a sandbox: as with the real drivers, whose sandbox of
// a session has its name (cws-<session>), a second one is refused (ErrExists).
func (l *Local) has(session string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hasLocked(session)
}

func (l *Local) hasLocked(session string) bool {
	for _, b := range l.sb {
		if b.info.Session == session {
			return true
		}
	}
	return false
}

// Attach opens a fresh stream to the sandbox's agent.
func (l *Local) Attach(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.Attaches++
	s, ok := l.sb[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if !s.info.Running {
		return nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrStopped)
	}
	c, srvSide := net.Pipe()
	go s.srv.ServeConn(gatedConn{srvSide, s.frozen})
	return c, nil
}

// Freeze stops a sandbox's agent as SIGSTOP would: it neither reads nor answers, on
// its connections and on new ones, until Thaw, RestartAgent or Restart.
func (l *Local) Freeze(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.sb[id]; ok {
		s.frozen.set(true)
	}
}

// Thaw lets a frozen agent run again.
func (l *Local) Thaw(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.sb[id]; ok {
		s.frozen.set(false)
	}
}

// Heals counts the RestartAgent and Restart calls (workspace.Healer) so far.
func (l *Local) Heals() (agent, whole int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.agentRestarts, l.restarts
}

// RestartAgent restarts the sandbox's agent (workspace.Healer): its connections end
// and a fresh, running agent serves the same directory. With StuckAfterAgentRestart,
// a frozen agent stays frozen.
func (l *Local) RestartAgent(ctx context.Context, id string) error {
	return l.restart(id, false)
}

// Restart restarts the sandbox (workspace.Healer), keeping its directory.
func (l *Local) Restart(ctx context.Context, id string) error {
	return l.restart(id, true)
}

func (l *Local) restart(id string, whole bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sb[id]
	if !ok {
		return fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if whole {
		l.restarts++
	} else {
		l.agentRestarts++
		if l.StuckAfterAgentRestart && s.frozen.closed {
			return nil
		}
	}
	srv, err := server.New(server.Config{Root: s.dir, Version: "test"})
	if err != nil {
		return err
	}
	s.frozen.set(false) // continued, then killed: its connections end
	s.srv.Close()
	s.srv, s.frozen, s.info.Running = srv, newGate(), true
	return nil
}

// Start starts a stopped sandbox again (Stop's undo); unknown ids are ErrNotFound.
func (l *Local) Start(ctx context.Context, id string) error {
	if l.StartDelay > 0 {
		select {
		case <-time.After(l.StartDelay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sb[id]
	if !ok {
		return fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	s.info.Running = true
	l.Starts++
	return nil
}

// Stop stops a sandbox as `docker stop` would: its streams end, its files stay.
func (l *Local) Stop(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.sb[id]; ok {
		s.info.Running = false
		s.frozen.set(false) // a stopped agent is killed all the same
		s.srv.Close()
	}
}

// Remove deletes the sandbox and its directory; unknown ids are not an error.
func (l *Local) Remove(ctx context.Context, id string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.sb[id]; ok {
		s.frozen.set(false) // a stopped agent is killed all the same
		s.srv.Close()
		os.RemoveAll(s.dir)
		delete(l.sb, id)
	}
	return nil
}

// List returns the sandboxes carrying all the given labels.
func (l *Local) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sandbox.Info
next:
	for _, s := range l.sb {
		for k, v := range labels {
			if s.lbl[k] != v {
				continue next
			}
		}
		out = append(out, s.info)
	}
	return out, nil
}

// Dir is the sandbox's workspace directory on the host, for tests to inspect.
func (l *Local) Dir(id string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.sb[id]; ok {
		return s.dir
	}
	return ""
}

// Path joins a workspace-relative path onto the sandbox's directory.
func (l *Local) Path(id, rel string) string { return filepath.Join(l.Dir(id), rel) }

// Count is the number of live sandboxes.
func (l *Local) Count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sb)
}

// Suspend is Stop (the workspace.Suspender a Docker driver is), and what a stopped
// container loses: the agent that serves it after Start is a fresh one, which knows
// none of the background processes of before (they keep running on the host, as
// orphans of the test).
func (l *Local) Suspend(ctx context.Context, id string) error {
	l.mu.Lock()
	s, ok := l.sb[id]
	l.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	l.Stop(id)
	srv, err := server.New(server.Config{Root: s.dir, Version: "test"})
	if err != nil {
		return err
	}
	l.mu.Lock()
	s.srv = srv
	l.mu.Unlock()
	return nil
}
