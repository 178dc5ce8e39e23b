package core

import (
	"bytes"
	"context"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
)

// Command limits.
const (
	defaultTimeout = 300 // seconds, the seed's default
	maxTimeout     = 3600
	outputCap      = 1 << 20 // bytes kept per stream
)

type RunCommandArgs struct {
	Root
	Command string             `json:"command" jsonschema:"Program to run: a bare name on the fixed PATH, allowed by policy. No shell: put arguments in args."`
	Args    []string           `json:"args,omitempty" jsonschema:"Command arguments."`
	Options *RunCommandOptions `json:"options,omitempty"`
}

type RunCommandOptions struct {
	Cwd       string            `json:"cwd,omitempty" jsonschema:"Working directory, relative to the workspace root. Default the root."`
	Env       map[string]string `json:"env,omitempty" jsonschema:"Environment variables to set (only names the policy's envAllowlist allows)."`
	Timeout   int               `json:"timeout,omitempty" jsonschema:"Timeout in seconds. Default 300, at most 3600."`
	Confirmed bool              `json:"confirmed,omitempty" jsonschema:"Confirmation flag, required when the policy lists this tool in confirmationRequired."`
}

type RunCommandResult struct {
	Command         string   `json:"command"`
	Args            []string `json:"args"`
	ExitCode        int      `json:"exitCode" jsonschema:"Exit code; -1 when killed (timeout) or not started."`
	Stdout          string   `json:"stdout"`
	Stderr          string   `json:"stderr"`
	TimedOut        bool     `json:"timedOut,omitempty" jsonschema:"The command ran past its timeout and was killed."`
	StdoutTruncated bool     `json:"stdoutTruncated,omitempty" jsonschema:"stdout was cut at 1 MiB."`
	StderrTruncated bool     `json:"stderrTruncated,omitempty" jsonschema:"stderr was cut at 1 MiB."`
	DurationMS      int64    `json:"durationMs"`
	Reason          string   `json:"reason,omitempty" jsonschema:"Why it failed beyond its exit code: oom when the workspace's memory limit killed it."`
	Hint            string   `json:"hint,omitempty" jsonschema:"What to do about reason."`
}

// checkCommand applies confirmation, the command allowlist, env and cwd rules.
func (c *call) checkCommand(root, command, cwd string, env map[string]string, confirmed bool) (string, error) {
	if err := c.pol.CheckConfirmed(c.tool, confirmed); err != nil {
		return "", err
	}
	if err := c.pol.CheckCommand(command); err != nil {
		return "", err
	}
	if err := c.pol.CheckEnv(env); err != nil {
		return "", err
	}
	if cwd == "" {
		cwd = "."
	}
	return c.resolve(root, cwd, false, 0)
}

func toText(b []byte) string { return string(bytes.ToValidUTF8(b, []byte("\uFFFD"))) }

func runCommand(ctx context.Context, c *call, a *RunCommandArgs) (*RunCommandResult, error) {
	o := a.Options
	if o == nil {
		o = &RunCommandOptions{}
	}
	cwd, err := c.checkCommand(a.WorkspaceRoot, a.Command, o.Cwd, o.Env, o.Confirmed)
	if err != nil {
		return nil, err
	}
	timeout := o.Timeout
	switch {
	case timeout < 0 || timeout > maxTimeout:
		return nil, invalidf("options.timeout", "timeout must be between 1 and %d seconds", maxTimeout)
	case timeout == 0:
		timeout = defaultTimeout
	}
	var onOut agent.EventFunc
	if c.out != nil {
		onOut = func(ev string, data []byte) error { c.out(ev, data); return nil }
	}
	r, err := c.exec(ctx, agent.ExecArgs{Argv: append([]string{a.Command}, a.Args...), Cwd: cwd, Env: o.Env,
		TimeoutMS: int64(timeout) * int64(time.Second/time.Millisecond), OutputCap: outputCap, Stream: onOut != nil, Guard: c.guard,
		Launch: c.execPolicy()}, nil, onOut)
	if err != nil {
		return nil, err
	}
	args := a.Args
	if args == nil {
		args = []string{}
	}
	res := &RunCommandResult{Command: a.Command, Args: args, ExitCode: r.ExitCode, Stdout: toText(r.Stdout), Stderr: toText(r.Stderr),
		TimedOut: r.TimedOut, StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated, DurationMS: r.DurationMS}
	if r.StartError != "" {
		res.Stderr = r.StartError
	}
	explainOOM(res, r) // oom.go
	return res, nil
}

// failed marks a non-zero exit or a timeout as an execution failure (isError).
func (r *RunCommandResult) Failed() bool { return r.ExitCode != 0 || r.TimedOut }
