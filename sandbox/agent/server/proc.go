package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/keep"
)

// maxRunning bounds the background processes one sandbox may run at once.
const maxRunning = 64

// keeper holds the background processes' output and state (package keep): a
// *keep.Client of a keeper process that outlives serve, or a *keep.Keeper in this
// process's memory.
type keeper interface {
	Adopt(ctx context.Context, p keep.Proc, f keep.Files) (agent.ProcInfo, error)
	Exited(ctx context.Context, id string, code int) error
	List(ctx context.Context) ([]agent.ProcInfo, error)
	Running(ctx context.Context) (int, error)
	Output(ctx context.Context, a agent.ProcOutputArgs) (*agent.ProcOutput, error)
	Info(ctx context.Context, id string, wait time.Duration) (agent.ProcInfo, error)
}

// newKeeper keeps the processes in a keeper process when the agent has a directory
// for it and a binary to start it from (the launcher), so that they survive serve being
// killed and restarted; else in memory, where they die with this process.
func newKeeper(cfg Config) keeper {
	if cfg.ProcDir != "" && cfg.Launcher != "" {
		return keep.NewClient(cfg.ProcDir, cfg.Launcher, cfg.Log)
	}
	k, _ := keep.New("", cfg.Log) // in memory: it cannot fail
	return k
}

func (s *Server) procStart(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.ProcStartArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	running, err := s.procs.Running(ctx)
	if err != nil {
		return nil, err
	}
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
	err = cmd.start()
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
	pi, err := s.procs.Adopt(context.WithoutCancel(ctx),
		keep.Proc{Argv: a.Argv, PID: pid, StartedAt: started, Unenforced: cmd.unenforced, OutputCap: outputLimit(a.OutputCap)},
		keep.Files{Stdout: outR, Stderr: errR, PIDFD: openPIDFD(pid)})
	if err != nil {
		// Nothing would read its output.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = cmd.Wait()
		return nil, fmt.Errorf("keep background process %s: %w", a.Argv[0], err)
	}
	go s.reap(cmd, pi.ID)
	return pi, nil
}

// reap waits for a process serve started and tells the keeper its exit code. A
// process whose serve died first is reaped by init, which tells the keeper instead.
func (s *Server) reap(cmd *prepared, id string) {
	_ = cmd.Wait()
	code, _ := exitStatus(cmd.Cmd, nil)
	if err := s.procs.Exited(context.Background(), id, code); err != nil {
		s.log.Warn("background process exit not kept", "id", id, "code", code, "err", err)
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

func (s *Server) procList(ctx context.Context, _ json.RawMessage, _ []byte, _ *responder) (any, error) {
	return s.procs.List(ctx)
}

func (s *Server) procOutput(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.ProcOutputArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	return s.procs.Output(ctx, a)
}

func (s *Server) procKill(ctx context.Context, args json.RawMessage, _ []byte, _ *responder) (any, error) {
	var a agent.ProcKillArgs
	if err := decode(args, &a); err != nil {
		return nil, err
	}
	p, err := s.procs.Info(ctx, a.ID, 0)
	if err != nil {
		return nil, err
	}
	grace := defaultGrace
	if a.GraceMS > 0 {
		grace = time.Duration(a.GraceMS) * time.Millisecond
	}
	// The process may be another serve's child: serve signals its group as the tool
	// user's processes are signaled (package ident), and the keeper says when it ended.
	pgid := p.PID
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
		if p, err = s.procs.Info(ctx, a.ID, wait); err != nil {
			return nil, err
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // leftovers in the group
	return p, nil
}
