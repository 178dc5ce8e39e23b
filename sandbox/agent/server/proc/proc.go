// Package proc serves the background-process operations of package agent (proc.start,
// proc.list, proc.output, proc.kill): commands prepared by package exec, handed to a
// keeper (package keep) that holds them and their output.
package proc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/exec"
	"github.com/cwsdev/cws/sandbox/agent/server/keep"
	"github.com/cwsdev/cws/sandbox/agent/server/op"
)

// maxRunning bounds the background processes one sandbox may run at once.
const maxRunning = 64

// Keeper holds the background processes' output and state (package keep): a
// *keep.Client of a keeper process that outlives serve, or a *keep.Keeper in this
// process's memory.
type Keeper interface {
	Adopt(ctx context.Context, p keep.Proc, f keep.Files) (agent.ProcInfo, error)
	Exited(ctx context.Context, id string, code int) error
	List(ctx context.Context) ([]agent.ProcInfo, error)
	Running(ctx context.Context) (int, error)
	Output(ctx context.Context, a agent.ProcOutputArgs) (*agent.ProcOutput, error)
	Info(ctx context.Context, id string, wait time.Duration) (agent.ProcInfo, error)
}

// NewKeeper keeps the processes in a keeper process when the agent has a directory
// for it and a binary to start it from (the launcher), so that they survive serve being
// killed and restarted; else in memory, where they die with this process.
func NewKeeper(dir, launcher string, log *slog.Logger) Keeper {
	if dir != "" && launcher != "" {
		return keep.NewClient(dir, launcher, log)
	}
	k, _ := keep.New("", log) // in memory: it cannot fail
	return k
}

// Handlers serves the background-process operations.
type Handlers struct {
	Keeper Keeper
	Exec   *exec.Runner // prepares the commands
	Log    *slog.Logger
}

// Start starts a background process (agent.ProcStartArgs).
func (h *Handlers) Start(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.ProcStartArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	running, err := h.Keeper.Running(ctx)
	if err != nil {
		return nil, err
	}
	if running >= maxRunning {
		return nil, agent.Errorf(agent.CodeTooLarge, "", "%d background processes are running, the limit is %d: kill one first", running, maxRunning)
	}
	cmd, err := h.Exec.Command(a.Argv, a.Cwd, a.Env, a.Guard, a.Launch)
	var nf exec.ErrNotFound
	if errors.As(err, &nf) {
		return nil, agent.Errorf(agent.CodeNotFound, "", "%s", nf.Error())
	}
	if err != nil {
		return nil, err
	}
	// The output goes to pipes whose read ends the keeper takes.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, agent.Errorf(agent.CodeInvalid, "", "start %s: %v", a.Argv[0], err)
	}
	pid := cmd.Process.Pid
	started := time.Now().UTC()
	// Once started, the process is kept even if the host gives up on this call.
	pi, err := h.Keeper.Adopt(context.WithoutCancel(ctx),
		keep.Proc{Argv: a.Argv, PID: pid, StartedAt: started, Unenforced: cmd.Unenforced, OutputCap: exec.OutputLimit(a.OutputCap)},
		keep.Files{Stdout: outR, Stderr: errR, PIDFD: openPIDFD(pid)})
	if err != nil {
		// Nothing would read its output.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return nil, fmt.Errorf("keep background process %s: %w", a.Argv[0], err)
	}
	go h.reap(cmd, pi.ID)
	return pi, nil
}

// reap waits for a process serve started and tells the keeper its exit code. A
// process whose serve died first is reaped by init, which tells the keeper instead.
func (h *Handlers) reap(cmd *exec.Prepared, id string) {
	_ = cmd.Wait()
	code, _ := exec.ExitStatus(cmd.Cmd, nil)
	if err := h.Keeper.Exited(context.Background(), id, code); err != nil {
		h.Log.Warn("background process exit not kept", "id", id, "code", code, "err", err)
	}
}

// openPIDFD opens a non-blocking pidfd of pid, a child not reaped yet; nil where the
// kernel has none (before 5.3: then the keeper learns its end only from serve).
func openPIDFD(pid int) *os.File {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.EINVAL) { // before 5.10: no PIDFD_NONBLOCK
		if fd, err = unix.PidfdOpen(pid, 0); err == nil {
			_ = unix.SetNonblock(fd, true)
		}
	}
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "pidfd")
}

// List lists the background processes.
func (h *Handlers) List(ctx context.Context, _ json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	return h.Keeper.List(ctx)
}

// Output reads a background process's output (agent.ProcOutputArgs).
func (h *Handlers) Output(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.ProcOutputArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	return h.Keeper.Output(ctx, a)
}

// Kill stops a background process's group (agent.ProcKillArgs).
func (h *Handlers) Kill(ctx context.Context, args json.RawMessage, _ []byte, _ *op.Responder) (any, error) {
	var a agent.ProcKillArgs
	if err := op.Decode(args, &a); err != nil {
		return nil, err
	}
	p, err := h.Keeper.Info(ctx, a.ID, 0)
	if err != nil {
		return nil, err
	}
	grace := exec.DefaultGrace
	if a.GraceMS > 0 {
		grace = time.Duration(a.GraceMS) * time.Millisecond
	}
	// The process may be another serve's child: serve signals its group as the tool
	// user's processes are signaled (package ident), and the keeper says when it ended.
	pgid := p.PID
	if pgid <= 1 || pgid == os.Getpid() {
		// Never a group serve started (each is its own, led by a process of its
		// making): -1 would signal every process serve may signal.
		return nil, agent.Errorf(agent.CodeInternal, "", "background process %s has no process group of its own (pid %d): not signalled", a.ID, pgid)
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline, killed := time.Now().Add(grace), false
	for p.Running {
		wait := time.Until(deadline)
		if wait <= 0 {
			if !killed {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				killed = true
			}
			wait = time.Minute
		}
		if p, err = h.Keeper.Info(ctx, a.ID, wait); err != nil {
			return nil, err
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // leftovers in the group
	return p, nil
}
