// Package tty serves the interactive terminals of package agent (tty.*): programs on
// pseudo-terminals (github.com/creack/pty) that the agent keeps for viewers that come
// and go, each with a raw scrollback replayed on attach and a screen kept by a VT
// emulator (github.com/charmbracelet/x/vt). The programs are prepared by package exec
// as every command is — as the tool user, with the base environment, under the call's
// exec policy — and start in a session of their own with the terminal as controlling
// tty.
//
// One goroutine per terminal reads the PTY; it feeds the scrollback and the emulator
// and hands each viewer its copy without ever waiting for one: a viewer that falls
// behind by more than viewerMax loses what it had not been sent (EventSkipped says how
// much), so neither the program nor the other viewers wait for it.
package tty

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/exec"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// Bounds of the manager.
const (
	// maxRunning bounds the running terminals when the host names no limit.
	maxRunning = 32
	// keptEnded is how many ended terminals stay listed with their screen.
	keptEnded = 16
	// hangupGrace is how long a closed terminal's program has between SIGHUP and SIGKILL.
	hangupGrace = 2 * time.Second
)

// Manager holds a sandbox's terminals. The zero value is not usable: set Exec.
type Manager struct {
	Exec *exec.Runner
	Log  *slog.Logger

	mu       sync.Mutex
	terms    map[string]*Term
	starting int // terminals being started, counted against the limit
}

// newID names a terminal: unique across the agent's restarts too, so that a terminal a
// suspend ended (the host keeps its screen) is never confused with a later one.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// Open starts a program on a new terminal (agent.TTYOpenArgs).
func (m *Manager) Open(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TTYOpenArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	cols, rows, err := size(a.Cols, a.Rows)
	if err != nil {
		return nil, err
	}
	argv := a.Argv
	if len(argv) == 0 {
		if argv, err = m.shell(a.Shells); err != nil {
			return nil, err
		}
	}
	limit := a.Max
	if limit <= 0 {
		limit = maxRunning
	}
	m.mu.Lock()
	if n := m.running() + m.starting; n >= limit {
		m.mu.Unlock()
		return nil, &agent.WireError{Code: agent.CodeTooLarge, Rule: "maxTerminals",
			Message: fmt.Sprintf("%d terminals are running, the most this session may have (maxTerminals %d): close one first", n, limit)}
	}
	id := newID()
	m.starting++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.starting--
		m.mu.Unlock()
	}()

	env := map[string]string{"TERM": "xterm-256color", "COLORTERM": "truecolor"}
	for k, v := range a.Env {
		env[k] = v
	}
	cmd, err := m.Exec.Command(argv, a.Cwd, env, a.Guard, a.Launch)
	if nf, ok := errorsAsNotFound(err); ok {
		return nil, agent.Errorf(agent.CodeNotFound, "", "%s", nf.Error())
	}
	if err != nil {
		return nil, err
	}
	ptmx, tty, err := openPTY(cols, rows)
	if err != nil {
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// A session of its own whose controlling terminal is the PTY (fd 0): job control,
	// ^C and a hangup reach its foreground group. A session leader leads its group too.
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	err = cmd.Start()
	tty.Close()
	if err != nil {
		ptmx.Close()
		return nil, agent.Errorf(agent.CodeInvalid, "", "start %s: %v", argv[0], err)
	}
	t := newTerm(id, argv, cmd, ptmx, cols, rows, time.Duration(a.IdleMS)*time.Millisecond)
	m.mu.Lock()
	if m.terms == nil {
		m.terms = map[string]*Term{}
	}
	m.terms[id] = t
	m.mu.Unlock()
	go t.run(m.Log)
	go func() {
		<-t.done
		m.prune()
	}()
	return t.info(), nil
}

// openPTY opens a pseudo-terminal of the size: its master non-blocking, so that
// closing it ends a pending read (pty.Open leaves it blocking).
func openPTY(cols, rows int) (ptmx, tty *os.File, err error) {
	p, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	defer p.Close()
	fd, err := unix.FcntlInt(p.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err == nil {
		err = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		tty.Close()
		return nil, nil, fmt.Errorf("set up the pseudo-terminal: %w", err)
	}
	return os.NewFile(uintptr(fd), "ptmx"), tty, nil
}

// shell is the first of shells (bash, then sh, when none is named) on SafePath.
func (m *Manager) shell(shells []string) ([]string, error) {
	if len(shells) == 0 {
		shells = []string{"bash", "sh"}
	}
	for _, sh := range shells {
		if _, err := m.Exec.LookPath(sh); err == nil {
			return []string{sh}, nil
		}
	}
	return nil, agent.Errorf(agent.CodeNotFound, "", "no shell: none of %v is on %s", shells, agent.SafePath)
}

// size checks a terminal's size; zero takes the default.
func size(cols, rows int) (int, int, error) {
	if cols == 0 {
		cols = agent.TTYDefaultCols
	}
	if rows == 0 {
		rows = agent.TTYDefaultRows
	}
	for _, d := range []struct {
		name string
		v    int
	}{{"cols", cols}, {"rows", rows}} {
		if d.v < 1 || d.v > agent.TTYMaxSize {
			return 0, 0, &agent.WireError{Code: agent.CodeInvalid, Path: d.name,
				Message: fmt.Sprintf("%s must be from 1 to %d, not %d", d.name, agent.TTYMaxSize, d.v)}
		}
	}
	return cols, rows, nil
}

// running counts the running terminals; m.mu is held.
func (m *Manager) running() int {
	n := 0
	for _, t := range m.terms {
		if !t.ended() {
			n++
		}
	}
	return n
}

// prune forgets the oldest ended terminals beyond keptEnded.
func (m *Manager) prune() {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ended []*Term
	for _, t := range m.terms {
		if t.ended() {
			ended = append(ended, t)
		}
	}
	if len(ended) <= keptEnded {
		return
	}
	slices.SortFunc(ended, func(a, b *Term) int { return a.endedAt().Compare(b.endedAt()) })
	for _, t := range ended[:len(ended)-keptEnded] {
		delete(m.terms, t.id)
	}
}

func (m *Manager) lookup(id string) (*Term, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.terms[id]
	if !ok {
		return nil, agent.Errorf(agent.CodeNotFound, "", "no terminal %q", id)
	}
	return t, nil
}

// List lists the terminals, oldest first.
func (m *Manager) List(ctx context.Context, _ json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	m.mu.Lock()
	ts := make([]*Term, 0, len(m.terms))
	for _, t := range m.terms {
		ts = append(ts, t)
	}
	m.mu.Unlock()
	slices.SortFunc(ts, func(a, b *Term) int { return a.started.Compare(b.started) })
	out := make([]agent.TTYInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.info())
	}
	return out, nil
}

// Get describes one terminal (agent.TTYIDArgs).
func (m *Manager) Get(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TTYIDArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	t, err := m.lookup(a.ID)
	if err != nil {
		return nil, err
	}
	return t.info(), nil
}

// Close ends a terminal: SIGHUP to its program's session, SIGKILL after hangupGrace
// (agent.TTYIDArgs). Closing an ended terminal forgets it.
func (m *Manager) Close(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TTYIDArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	t, err := m.lookup(a.ID)
	if err != nil {
		return nil, err
	}
	if t.ended() {
		m.mu.Lock()
		delete(m.terms, a.ID)
		m.mu.Unlock()
		return t.info(), nil
	}
	t.end(agent.TTYClosed)
	select {
	case <-t.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return t.info(), nil
}

// Resize sets a terminal's size (agent.TTYResizeArgs).
func (m *Manager) Resize(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TTYResizeArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	if a.Cols == 0 || a.Rows == 0 { // no default here: a resize names both
		return nil, &agent.WireError{Code: agent.CodeInvalid, Path: "cols", Message: "a resize needs cols and rows, from 1 to 1000"}
	}
	cols, rows, err := size(a.Cols, a.Rows)
	if err != nil {
		return nil, err
	}
	t, err := m.lookup(a.ID)
	if err != nil {
		return nil, err
	}
	return struct{}{}, t.resize(cols, rows)
}

// signals are the names tty.signal takes.
var signals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP, "KILL": syscall.SIGKILL,
	"QUIT": syscall.SIGQUIT, "TSTP": syscall.SIGTSTP, "CONT": syscall.SIGCONT, "WINCH": syscall.SIGWINCH,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
}

// signalNames lists the signals tty.signal takes.
func signalNames() []string {
	out := make([]string, 0, len(signals))
	for k := range signals {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Signal signals a terminal's foreground process group (agent.TTYSignalArgs).
func (m *Manager) Signal(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.TTYSignalArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	sig, ok := signals[a.Signal]
	if !ok {
		return nil, &agent.WireError{Code: agent.CodeInvalid, Path: "signal",
			Message: fmt.Sprintf("unknown signal %q (want one of %v)", a.Signal, signalNames())}
	}
	t, err := m.lookup(a.ID)
	if err != nil {
		return nil, err
	}
	return struct{}{}, t.signal(sig)
}

// Input types the body into a terminal (agent.TTYIDArgs).
func (m *Manager) Input(ctx context.Context, args json.RawMessage, body []byte, _ *op.Responder) (any, error) {
	var a agent.TTYIDArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	t, err := m.lookup(a.ID)
	if err != nil {
		return nil, err
	}
	return struct{}{}, t.input(body)
}

func errorsAsNotFound(err error) (exec.ErrNotFound, bool) {
	var nf exec.ErrNotFound
	ok := errors.As(err, &nf)
	return nf, ok
}
