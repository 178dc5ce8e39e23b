// Package terminal is the `terminal` toolset: interactive terminals for agents — a
// program on a PTY in the workspace (a shell by default) that an agent types into with
// text and named keys, and reads back as a person sees it, the screen as text rather
// than a stream of escape codes. People reach the same terminals through the REST API's
// WebSocket. It sees the service only through workspace/tool.
package terminal

import (
	"context"
	"errors"
	"slices"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
	termapi "github.com/cwsdev/cws/workspace/terminal"
	"github.com/cwsdev/cws/workspace/tool"
)

// Bounds of the tools.
const (
	maxWaitMS       = 600_000 // terminalScreen's timeoutMs: ten minutes
	defaultWaitMS   = 30_000  // terminalScreen's timeoutMs when it waits and names none
	maxScrollback   = 1000    // terminalScreen's scrollback lines
	maxSendBytes    = 64 << 10
	maxSendKeyNames = 1000
)

// Tools returns the terminal toolset, in listing order.
func Tools() []*tool.Tool {
	return []*tool.Tool{
		tool.New("terminalOpen", policy.ToolsetTerminal, "Open terminal",
			"Start a program on a new interactive terminal (a PTY) in the workspace: by default the image's shell (bash, else sh), or a command with args (same policy as runCommand). Returns its id for terminalSend, terminalScreen and terminalClose. It runs until it exits, is closed, stays idle (no viewer, input or output) for the policy's terminalIdle, or its session is suspended.",
			tool.Runs, tool.Defaults{"cols": agent.TTYDefaultCols, "rows": agent.TTYDefaultRows}, open),
		tool.New("terminalSend", policy.ToolsetTerminal, "Send to terminal",
			"Type into a terminal: text as it is, then keys by name ("+termapi.KeyNames+"). An unknown key name is an error and nothing is typed.",
			tool.Runs, nil, send),
		tool.New("terminalScreen", policy.ToolsetTerminal, "Read terminal screen",
			"Read a terminal's screen as a person sees it: the visible rows as text, the cursor, whether the program runs (and its exit code), the title. waitFor (a regexp) waits until it appears on the screen, waitIdle until no output came for that many ms; both within timeoutMs (default 30000, at most 600000). scrollback adds the last N lines that scrolled off.",
			tool.Watches, nil, screen),
		tool.New("terminalClose", policy.ToolsetTerminal, "Close terminal",
			"End a terminal: its program is hung up (SIGHUP), then killed after 2 s.",
			tool.Stops, nil, closeTerm),
		tool.New("terminalList", policy.ToolsetTerminal, "List terminals",
			"List the session's terminals, running and ended (with exit code and endReason).",
			tool.Watches, nil, list),
	}
}

func open(ctx context.Context, env tool.Env, a *termapi.Open) (*termapi.Info, error) {
	req, err := a.Request(env.Policy(), env.Guard())
	if err != nil {
		return nil, err
	}
	t, err := env.Agent().TTYOpen(ctx, req)
	if err != nil {
		return nil, quota(err)
	}
	if t.Unenforced {
		env.ExecUnenforced()
	}
	count(ctx, env)
	in := termapi.InfoOf(t)
	return &in, nil
}

// quota turns the agent's maxTerminals refusal into the tool's.
func quota(err error) error {
	var we *agent.WireError
	if errors.As(err, &we) && we.Code == agent.CodeTooLarge && we.Rule == "maxTerminals" {
		return &policy.Violation{Err: policy.ErrQuota, Rule: "maxTerminals", Detail: we.Message}
	}
	return err
}

// count tells the service how many terminals run.
func count(ctx context.Context, env tool.Env) {
	if ts, err := env.Agent().TTYList(ctx); err == nil {
		n := 0
		for _, t := range ts {
			if t.Running {
				n++
			}
		}
		env.TerminalsRunning(n)
	}
}

type SendArgs struct {
	ID   string   `json:"id" jsonschema:"Terminal id from terminalOpen."`
	Text string   `json:"text,omitempty" jsonschema:"Text to type, as it is (a newline is typed as a newline; use keys: [\"Enter\"] to submit a line)."`
	Keys []string `json:"keys,omitempty" jsonschema:"Keys to press after the text, by name: Enter, Tab, Escape, Backspace, Up, Down, Left, Right, Home, End, PageUp, PageDown, Ctrl-A … Ctrl-Z."`
}

type SendResult struct {
	ID    string `json:"id"`
	Bytes int    `json:"bytes" jsonschema:"How many bytes were typed."`
}

func send(ctx context.Context, env tool.Env, a *SendArgs) (*SendResult, error) {
	if a.ID == "" {
		return nil, tool.Invalidf("id", "id names the terminal (terminalOpen's id)")
	}
	if len(a.Keys) > maxSendKeyNames {
		return nil, tool.Invalidf("keys", "at most %d keys at once", maxSendKeyNames)
	}
	keys, err := termapi.Keys(a.Keys)
	if err != nil {
		return nil, err
	}
	input := append([]byte(a.Text), keys...)
	switch {
	case len(input) == 0:
		return nil, tool.Invalidf("text", "give text, keys or both")
	case len(input) > maxSendBytes:
		return nil, tool.Invalidf("text", "%d bytes to type; at most %d at once", len(input), maxSendBytes)
	}
	if err := env.Agent().TTYInput(ctx, a.ID, input); err != nil {
		if _, ok := suspended(ctx, env, a.ID); ok {
			return nil, &tool.Fail{Code: "ended", Message: "terminal " + a.ID + " ended when its session was suspended"}
		}
		return nil, err
	}
	return &SendResult{ID: a.ID, Bytes: len(input)}, nil
}

type ScreenArgs struct {
	ID         string `json:"id" jsonschema:"Terminal id from terminalOpen."`
	WaitFor    string `json:"waitFor,omitempty" jsonschema:"A regular expression (RE2) to wait for on the screen, matched line by line."`
	WaitIdle   int64  `json:"waitIdle,omitempty" jsonschema:"Wait until no output came for this many milliseconds."`
	TimeoutMS  int64  `json:"timeoutMs,omitempty" jsonschema:"The most the waits may take, in milliseconds: at most 600000. Default 30000 when waiting."`
	Scrollback int    `json:"scrollback,omitempty" jsonschema:"Add the last N lines that scrolled off the top (at most 1000)."`
}

func screen(ctx context.Context, env tool.Env, a *ScreenArgs) (*termapi.Screen, error) {
	switch {
	case a.ID == "":
		return nil, tool.Invalidf("id", "id names the terminal (terminalOpen's id)")
	case a.TimeoutMS < 0 || a.TimeoutMS > maxWaitMS:
		return nil, tool.Invalidf("timeoutMs", "timeoutMs must be from 0 to %d", maxWaitMS)
	case a.WaitIdle < 0 || a.WaitIdle > maxWaitMS:
		return nil, tool.Invalidf("waitIdle", "waitIdle must be from 0 to %d", maxWaitMS)
	case a.Scrollback < 0 || a.Scrollback > maxScrollback:
		return nil, tool.Invalidf("scrollback", "scrollback must be from 0 to %d lines", maxScrollback)
	}
	timeout := a.TimeoutMS
	if timeout == 0 && (a.WaitFor != "" || a.WaitIdle > 0) {
		timeout = defaultWaitMS
	}
	s, err := env.Agent().TTYScreen(ctx, agent.TTYScreenArgs{ID: a.ID, WaitFor: a.WaitFor, WaitIdleMS: a.WaitIdle, TimeoutMS: timeout, Scrollback: a.Scrollback})
	if err != nil {
		if k, ok := suspended(ctx, env, a.ID); ok {
			out := termapi.ScreenOf(k.Screen)
			out.Scrollback = out.Scrollback[max(0, len(out.Scrollback)-a.Scrollback):]
			return &out, nil
		}
		var we *agent.WireError
		if errors.As(err, &we) && we.Code == agent.CodeInvalid && we.Path != "" {
			return nil, tool.Invalidf(we.Path, "%s", we.Message)
		}
		return nil, err
	}
	out := termapi.ScreenOf(s)
	return &out, nil
}

// suspended finds terminal id among those the last suspend ended.
func suspended(ctx context.Context, env tool.Env, id string) (termapi.Suspended, bool) {
	var kept []termapi.Suspended
	if _, err := env.State().Get(ctx, termapi.SuspendedKey, &kept); err != nil {
		return termapi.Suspended{}, false
	}
	return termapi.FindSuspended(kept, id)
}

type IDArgs struct {
	ID string `json:"id" jsonschema:"Terminal id from terminalOpen."`
}

func closeTerm(ctx context.Context, env tool.Env, a *IDArgs) (*termapi.Info, error) {
	if a.ID == "" {
		return nil, tool.Invalidf("id", "id names the terminal (terminalOpen's id)")
	}
	t, err := env.Agent().TTYClose(ctx, a.ID)
	if err != nil {
		if k, ok := suspended(ctx, env, a.ID); ok {
			in := termapi.InfoOf(k.Info)
			return &in, nil
		}
		return nil, err
	}
	count(ctx, env)
	in := termapi.InfoOf(t)
	return &in, nil
}

type ListResult struct {
	Terminals []termapi.Info `json:"terminals"`
}

func list(ctx context.Context, env tool.Env, _ *struct{}) (*ListResult, error) {
	ts, err := env.Agent().TTYList(ctx)
	if err != nil {
		return nil, err
	}
	res := &ListResult{Terminals: []termapi.Info{}}
	var kept []termapi.Suspended
	if _, err := env.State().Get(ctx, termapi.SuspendedKey, &kept); err == nil {
		for _, k := range kept {
			if !slices.ContainsFunc(ts, func(t agent.TTYInfo) bool { return t.ID == k.Info.ID }) {
				res.Terminals = append(res.Terminals, termapi.InfoOf(k.Info))
			}
		}
	}
	n := 0
	for _, t := range ts {
		res.Terminals = append(res.Terminals, termapi.InfoOf(t))
		if t.Running {
			n++
		}
	}
	env.TerminalsRunning(n)
	return res, nil
}
