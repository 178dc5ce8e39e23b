package core

import (
	"context"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/tool"
)

type StartProcessArgs struct {
	Root
	Command string               `json:"command" jsonschema:"Program to run in the background (same rules as runCommand)."`
	Args    []string             `json:"args,omitempty"`
	Options *StartProcessOptions `json:"options,omitempty"`
}

type StartProcessOptions struct {
	Cwd       string            `json:"cwd,omitempty" jsonschema:"Working directory, relative to the workspace root."`
	Env       map[string]string `json:"env,omitempty" jsonschema:"Environment variables (envAllowlist applies)."`
	Confirmed bool              `json:"confirmed,omitempty" jsonschema:"Confirmation flag, required when the policy lists startProcess in confirmationRequired."`
}

type ProcessInfo struct {
	ID        string   `json:"id" jsonschema:"Process id for readProcessOutput and killProcess."`
	PID       int      `json:"pid"`
	Command   string   `json:"command"`
	Args      []string `json:"args"`
	Running   bool     `json:"running"`
	ExitCode  *int     `json:"exitCode,omitempty"`
	StartedAt string   `json:"startedAt"`
	EndedAt   string   `json:"endedAt,omitempty"`
	// EndReason says why it ended when it did not end by itself: "suspended" (its
	// session was suspended; its output up to then is kept).
	EndReason string `json:"endReason,omitempty" jsonschema:"Why the process ended when not by itself: suspended (its session was suspended, which ends every process)."`
}

func processInfo(p agent.ProcInfo) ProcessInfo {
	pi := ProcessInfo{ID: p.ID, PID: p.PID, Running: p.Running, ExitCode: p.ExitCode, StartedAt: isoTime(p.StartedAt), Args: []string{}}
	if len(p.Argv) > 0 {
		pi.Command, pi.Args = p.Argv[0], append(pi.Args, p.Argv[1:]...)
	}
	if p.EndedAt != nil {
		pi.EndedAt = isoTime(*p.EndedAt)
	}
	return pi
}

func startProcess(ctx context.Context, c *call, a *StartProcessArgs) (*ProcessInfo, error) {
	o := a.Options
	if o == nil {
		o = &StartProcessOptions{}
	}
	cwd, err := c.checkCommand(a.WorkspaceRoot, a.Command, o.Cwd, o.Env, o.Confirmed)
	if err != nil {
		return nil, err
	}
	p, err := c.agent.ProcStart(ctx, agent.ProcStartArgs{Argv: append([]string{a.Command}, a.Args...), Cwd: cwd, Env: o.Env, OutputCap: outputCap, Guard: c.guard,
		Launch: c.execPolicy()})
	if err != nil {
		return nil, err
	}
	if p.Unenforced {
		c.env.ExecUnenforced()
	}
	pi := processInfo(p)
	return &pi, nil
}

type ReadProcessOutputArgs struct {
	ID           string `json:"id" jsonschema:"Process id from startProcess."`
	StdoutOffset int64  `json:"stdoutOffset,omitempty" jsonschema:"Read stdout from this offset (the stdoutOffset of the previous read). Default 0."`
	StderrOffset int64  `json:"stderrOffset,omitempty" jsonschema:"Read stderr from this offset. Default 0."`
	WaitMS       int64  `json:"waitMs,omitempty" jsonschema:"Follow the output for up to this many milliseconds (at most 60000), streaming it as progress, or until the process exits. Default 0: return at once."`
}

type ProcessOutput struct {
	Process      ProcessInfo `json:"process"`
	Stdout       string      `json:"stdout"`
	Stderr       string      `json:"stderr"`
	StdoutOffset int64       `json:"stdoutOffset" jsonschema:"Pass back to read only newer output."`
	StderrOffset int64       `json:"stderrOffset"`
	Dropped      bool        `json:"dropped,omitempty" jsonschema:"Older output was overwritten (each stream keeps its last 1 MiB)."`
}

func readProcessOutput(ctx context.Context, c *call, a *ReadProcessOutputArgs) (*ProcessOutput, error) {
	if a.WaitMS < 0 || a.WaitMS > 60000 {
		return nil, invalidf("waitMs", "waitMs must be between 0 and 60000")
	}
	deadline := time.Now().Add(time.Duration(a.WaitMS) * time.Millisecond)
	res := &ProcessOutput{StdoutOffset: a.StdoutOffset, StderrOffset: a.StderrOffset}
	var stdout, stderr []byte
	for {
		wait := max(time.Until(deadline), 0)
		o, err := c.agent.ProcOutput(ctx, agent.ProcOutputArgs{ID: a.ID, StdoutOffset: res.StdoutOffset, StderrOffset: res.StderrOffset, WaitMS: min(wait.Milliseconds(), 1000)})
		if err != nil {
			// The agent of before the session's suspend knew it: what the suspend kept.
			if sp, ok := suspendedProc(ctx, c, a.ID); ok && len(stdout)+len(stderr) == 0 {
				return suspendedOutput(sp, a), nil
			}
			return nil, err
		}
		if c.out != nil {
			if len(o.Stdout) > 0 {
				c.out(agent.EventStdout, o.Stdout)
			}
			if len(o.Stderr) > 0 {
				c.out(agent.EventStderr, o.Stderr)
			}
		}
		stdout, stderr = append(stdout, o.Stdout...), append(stderr, o.Stderr...)
		res.Process, res.StdoutOffset, res.StderrOffset = processInfo(o.Proc), o.StdoutOffset, o.StderrOffset
		res.Dropped = res.Dropped || o.Dropped
		if !o.Proc.Running || time.Now().After(deadline) || len(stdout)+len(stderr) > outputCap {
			break
		}
	}
	res.Stdout, res.Stderr = toText(stdout), toText(stderr)
	return res, nil
}

type NoArgs struct{}

type ListProcessesResult struct {
	Processes []ProcessInfo `json:"processes"`
	Count     int           `json:"count"`
}

func listProcesses(ctx context.Context, c *call, _ *NoArgs) (*ListProcessesResult, error) {
	ps, err := c.agent.ProcList(ctx)
	if err != nil {
		return nil, err
	}
	res := &ListProcessesResult{Processes: make([]ProcessInfo, 0, len(ps))}
	live := map[string]bool{}
	for _, p := range ps {
		live[p.ID] = true
	}
	for _, sp := range suspendedProcs(ctx, c) {
		if live[sp.Info.ID] {
			continue // the agent still has it (a suspend that did not stop the sandbox)
		}
		pi := processInfo(sp.Info)
		pi.EndReason = sp.EndReason
		res.Processes = append(res.Processes, pi)
	}
	for _, p := range ps {
		res.Processes = append(res.Processes, processInfo(p))
	}
	res.Count = len(res.Processes)
	return res, nil
}

type KillProcessArgs struct {
	ID string `json:"id" jsonschema:"Process id from startProcess. Its whole process group is stopped: SIGTERM, then SIGKILL after 2 s."`
}

func killProcess(ctx context.Context, c *call, a *KillProcessArgs) (*ProcessInfo, error) {
	p, err := c.agent.ProcKill(ctx, agent.ProcKillArgs{ID: a.ID})
	if err != nil {
		return nil, err
	}
	pi := processInfo(p)
	return &pi, nil
}

// suspendedProcs are the processes the session's suspends ended (tool.SuspendedProc).
func suspendedProcs(ctx context.Context, c *call) []tool.SuspendedProc {
	var ps []tool.SuspendedProc
	if _, err := c.env.State().Get(ctx, tool.SuspendedProcsKey, &ps); err != nil {
		return nil
	}
	return ps
}

func suspendedProc(ctx context.Context, c *call, id string) (tool.SuspendedProc, bool) {
	for _, sp := range suspendedProcs(ctx, c) {
		if sp.Info.ID == id {
			return sp, true
		}
	}
	return tool.SuspendedProc{}, false
}

// suspendedOutput answers readProcessOutput from what a suspend kept: the output from
// the offsets asked for (or from the start of what was kept, Dropped then set).
func suspendedOutput(sp tool.SuspendedProc, a *ReadProcessOutputArgs) *ProcessOutput {
	res := &ProcessOutput{Process: processInfo(sp.Info)}
	res.Process.EndReason = sp.EndReason
	var dropOut, dropErr bool
	res.Stdout, res.StdoutOffset, dropOut = keptFrom(sp.Stdout, sp.StdoutStart, a.StdoutOffset)
	res.Stderr, res.StderrOffset, dropErr = keptFrom(sp.Stderr, sp.StderrStart, a.StderrOffset)
	res.Dropped = dropOut || dropErr
	return res
}

// keptFrom is the part of kept (which begins at start in its stream) from offset on,
// the offset after it, and whether output before it was asked for but not kept.
func keptFrom(kept []byte, start, offset int64) (string, int64, bool) {
	end := start + int64(len(kept))
	switch {
	case offset >= end:
		return "", max(offset, end), false
	case offset < start:
		return toText(kept), end, true
	default:
		return toText(kept[offset-start:]), end, false
	}
}
