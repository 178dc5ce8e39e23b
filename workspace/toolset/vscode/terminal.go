package vscode

import (
	"context"
	"strings"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/tool"
)

// The terminal is the agent's persistent shell interpreter (sandbox/agent/server/shell),
// one per session (agent.DefaultTerminal): cd, exported variables and functions carry
// over from one execute_terminal_command to the next. Every program it would run — in
// pipelines, $(…), backticks, sh -c, env, xargs, find -exec — is checked against
// allowedCommands before anything starts (-32004), every redirection against the path
// rules, and only envAllowlist names reach its programs. Its combined output goes to
// the terminal's scrollback (1 MiB), which get_terminal_info returns (scrollback, from
// scrollbackOffset) and execute_terminal_command reports per run (output, offsets).

func terminalTools() []*tool.Tool {
	return []*tool.Tool{
		tool.Streaming(def("execute_terminal_command", "Terminal command", "Execute shell syntax in the session's persistent terminal (cd, variables and functions carry over). Every program must be allowed by policy. Returns {status: \"executed\"} with the exit code and this run's output (cws extension); the output stays in the terminal's scrollback (get_terminal_info).",
			tool.Runs, executeTerminalCommand)),
		def("run_command_on_background", "Background command", "Execute shell syntax in a fresh shell (not the terminal) and return its stdout, stderr and exitCode. timeout is in milliseconds (default 300000).",
			tool.Runs, runCommandOnBackground),
		def("wait", "Wait", "Wait for a number of milliseconds (at most 600000), or until the call is cancelled.", tool.Watches, wait),
		def("get_terminal_info", "Terminal info", "Describe the terminal and the container's OS: osType, osVersion, terminalType (the shell), its cwd, whether a command runs, and its scrollback (the last 64 KiB, or from scrollbackOffset: cws extension).",
			tool.Watches, getTerminalInfo),
		tool.Streaming(def("execute_os_specific_command", "OS-specific command", "Execute the command for this OS (Linux: unixCommand, else command) in the terminal, like execute_terminal_command.",
			tool.Runs, executeOSSpecificCommand)),
	}
}

// Terminal limits.
const (
	termTimeout    = 300 * time.Second // a terminal command's and a background command's default
	maxTermTimeout = time.Hour
	maxWait        = 600_000 // ms
	scrollbackTail = 64 << 10
)

type CommandArgs struct {
	Command string `json:"command" jsonschema:"Shell syntax to execute."`
}

type TerminalRun struct {
	Status           string `json:"status" jsonschema:"executed"`
	ExitCode         int    `json:"exitCode" jsonschema:"cws extension: the exit status (-1: timed out or cancelled)."`
	Output           string `json:"output" jsonschema:"cws extension: this run's combined output, as the scrollback keeps it."`
	Cwd              string `json:"cwd" jsonschema:"cws extension: the terminal's directory after the run, relative to the project root."`
	ScrollbackOffset int64  `json:"scrollbackOffset" jsonschema:"cws extension: where this run's output starts in the scrollback."`
	NextOffset       int64  `json:"nextOffset" jsonschema:"cws extension: the scrollback offset after it."`
	TimedOut         bool   `json:"timedOut,omitempty"`
}

// shellArgs are a run's policy: the programs, the environment, the path rules, and what
// the started programs may execute in turn.
func (c *call) shellArgs(a agent.TermRunArgs) agent.TermRunArgs {
	pol := c.env.Policy()
	a.Allowed = pol.AllowedCommands()
	a.EnvAllowlist = pol.EnvAllowlist()
	a.Guard = c.env.Guard()
	a.Launch = c.core.ExecPolicy()
	return a
}

func (c *call) terminal(ctx context.Context, command string) (*TerminalRun, error) {
	if strings.TrimSpace(command) == "" {
		return nil, tool.Invalidf("command", "command must not be empty")
	}
	var onOut agent.EventFunc
	if out := c.env.Output(); out != nil {
		onOut = func(ev string, data []byte) error { out(ev, data); return nil }
	}
	r, err := c.env.Agent().TermRun(ctx, c.shellArgs(agent.TermRunArgs{ID: agent.DefaultTerminal, Command: command,
		TimeoutMS: termTimeout.Milliseconds(), Stream: onOut != nil}), onOut)
	if err != nil {
		return nil, err
	}
	return &TerminalRun{Status: "executed", ExitCode: r.ExitCode, Output: toText(r.Stdout), Cwd: r.Cwd,
		ScrollbackOffset: r.Offset, NextOffset: r.NextOffset, TimedOut: r.TimedOut}, nil
}

func executeTerminalCommand(ctx context.Context, c *call, a *CommandArgs) (*TerminalRun, error) {
	return c.terminal(ctx, a.Command)
}

type BackgroundArgs struct {
	Command string            `json:"command" jsonschema:"Shell syntax to execute."`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"The working directory, relative to the project root."`
	Env     map[string]string `json:"env,omitempty" jsonschema:"Environment variables for the command (envAllowlist applies)."`
	Timeout int64             `json:"timeout,omitempty" jsonschema:"Timeout in milliseconds. Default 300000, at most 3600000."`
}

type BackgroundResult struct {
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exitCode" jsonschema:"-1 when it timed out."`
	TimedOut bool   `json:"timedOut,omitempty"`
}

func runCommandOnBackground(ctx context.Context, c *call, a *BackgroundArgs) (*BackgroundResult, error) {
	if strings.TrimSpace(a.Command) == "" {
		return nil, tool.Invalidf("command", "command must not be empty")
	}
	timeout := time.Duration(a.Timeout) * time.Millisecond
	switch {
	case a.Timeout < 0 || timeout > maxTermTimeout:
		return nil, tool.Invalidf("timeout", "timeout must be between 1 and %d milliseconds", maxTermTimeout.Milliseconds())
	case a.Timeout == 0:
		timeout = termTimeout
	}
	if err := c.env.Policy().CheckEnv(a.Env); err != nil {
		return nil, err
	}
	cwd := "."
	if a.Cwd != "" {
		r, err := rel(a.Cwd)
		if err != nil {
			return nil, err
		}
		if cwd, err = c.core.Resolve(r, false, 0); err != nil {
			return nil, err
		}
	}
	r, err := c.env.Agent().TermRun(ctx, c.shellArgs(agent.TermRunArgs{Command: a.Command, Background: true, Cwd: cwd, Env: a.Env,
		TimeoutMS: timeout.Milliseconds()}), nil)
	if err != nil {
		return nil, err
	}
	return &BackgroundResult{Stdout: toText(r.Stdout), Stderr: toText(r.Stderr), ExitCode: r.ExitCode, TimedOut: r.TimedOut}, nil
}

type WaitArgs struct {
	Milliseconds int64 `json:"milliseconds" jsonschema:"The duration to wait in milliseconds (at most 600000)."`
}

type Waited struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func wait(ctx context.Context, _ *call, a *WaitArgs) (*Waited, error) {
	if a.Milliseconds < 0 || a.Milliseconds > maxWait {
		return nil, tool.Invalidf("milliseconds", "milliseconds must be between 0 and %d", maxWait)
	}
	t := time.NewTimer(time.Duration(a.Milliseconds) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return &Waited{Status: "completed", Message: sprintf("Waited for %d milliseconds", a.Milliseconds)}, nil
}

type TerminalInfoArgs struct {
	ScrollbackOffset *int64 `json:"scrollbackOffset,omitempty" jsonschema:"cws extension: return the scrollback from this offset (an earlier nextOffset) instead of its last 64 KiB."`
}

type TerminalInfo struct {
	OSType               string `json:"osType"`
	OSVersion            string `json:"osVersion"`
	TerminalType         string `json:"terminalType" jsonschema:"The shell: an in-agent POSIX shell interpreter."`
	IsIntegratedTerminal bool   `json:"isIntegratedTerminal"`
	IsDefault            bool   `json:"isDefault"`
	Cwd                  string `json:"cwd" jsonschema:"cws extension: the terminal's directory, relative to the project root."`
	Running              bool   `json:"running" jsonschema:"cws extension: a command is running in the terminal."`
	Scrollback           string `json:"scrollback" jsonschema:"cws extension: the terminal's output."`
	ScrollbackOffset     int64  `json:"scrollbackOffset" jsonschema:"cws extension: where scrollback starts."`
	NextOffset           int64  `json:"nextOffset" jsonschema:"cws extension: pass it as scrollbackOffset to read only newer output."`
}

func getTerminalInfo(ctx context.Context, c *call, a *TerminalInfoArgs) (*TerminalInfo, error) {
	ag := c.env.Agent()
	ti, err := ag.TermInfo(ctx, agent.TermIDArgs{ID: agent.DefaultTerminal})
	if err != nil {
		return nil, err
	}
	res := &TerminalInfo{OSType: ti.OSType, OSVersion: ti.OSVersion, TerminalType: ti.Shell, IsIntegratedTerminal: true, IsDefault: true,
		Cwd: ti.Cwd, Running: ti.Running}
	if !ti.Open {
		return res, nil
	}
	var from int64
	if a.ScrollbackOffset != nil {
		from = max(*a.ScrollbackOffset, 0)
	}
	o, err := ag.TermRead(ctx, agent.TermReadArgs{ID: agent.DefaultTerminal, Offset: from})
	if err != nil {
		return nil, err
	}
	data, off := o.Data, o.Offset
	if a.ScrollbackOffset == nil && len(data) > scrollbackTail {
		off += int64(len(data) - scrollbackTail)
		data = data[len(data)-scrollbackTail:]
	}
	res.Scrollback, res.ScrollbackOffset, res.NextOffset = toText(data), off, o.NextOffset
	return res, nil
}

type OSCommandArgs struct {
	WindowsCommand string `json:"windowsCommand,omitempty" jsonschema:"Command for Windows (not used: the workspace runs Linux)."`
	UnixCommand    string `json:"unixCommand,omitempty" jsonschema:"Command for Linux/Unix: used when given."`
	MacCommand     string `json:"macCommand,omitempty" jsonschema:"Command for macOS (not used)."`
	Command        string `json:"command,omitempty" jsonschema:"Generic command, used without unixCommand."`
}

type OSCommandResult struct {
	OSType   string `json:"osType"`
	Command  string `json:"command"`
	Executed bool   `json:"executed"`
	ExitCode int    `json:"exitCode" jsonschema:"cws extension."`
	Output   string `json:"output" jsonschema:"cws extension: the run's output, also in the terminal's scrollback."`
}

func executeOSSpecificCommand(ctx context.Context, c *call, a *OSCommandArgs) (*OSCommandResult, error) {
	cmd := a.UnixCommand
	if cmd == "" {
		cmd = a.Command
	}
	if cmd == "" {
		return nil, tool.Invalidf("unixCommand", "give unixCommand or command: the workspace runs Linux")
	}
	r, err := c.terminal(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return &OSCommandResult{OSType: "Linux", Command: cmd, Executed: true, ExitCode: r.ExitCode, Output: r.Output}, nil
}
