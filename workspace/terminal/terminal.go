// Package terminal is what the two ways into a session's interactive terminals share —
// the REST API and its WebSocket (workspace.Service) and the `terminal` toolset for
// MCP: an open request checked against the session's policy, the shapes a terminal and
// its screen are reported in, the named keys an agent sends, and what a suspend keeps.
// The terminals themselves are the agent's (sandbox/agent/server/tty).
package terminal

import (
	"fmt"
	"strings"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/workspace/policy"
)

// Open asks for a terminal.
type Open struct {
	Command string            `json:"command,omitempty" jsonschema:"Program to run on the terminal (same rules as runCommand). Default: the image's shell (bash, else sh)."`
	Args    []string          `json:"args,omitempty" jsonschema:"The program's arguments."`
	Cwd     string            `json:"cwd,omitempty" jsonschema:"Working directory, relative to the workspace root."`
	Env     map[string]string `json:"env,omitempty" jsonschema:"Environment variables (envAllowlist applies)."`
	Cols    *int              `json:"cols,omitempty" jsonschema:"Width in columns, 1 to 1000. Default 80."`
	Rows    *int              `json:"rows,omitempty" jsonschema:"Height in rows, 1 to 1000. Default 24."`
}

// shells are what a terminal runs when no command is given, the first found first.
var shells = []string{"bash", "sh"}

// Request checks o against the session's policy and returns the agent's request: sizes
// from 1 to agent.TTYMaxSize, the program on allowedCommands (the default shell too),
// the environment on envAllowlist, the directory readable; the terminal runs under the
// policy's launch rules, idle time and maxTerminals.
func (o *Open) Request(pol *policy.Effective, g *guard.Guard) (agent.TTYOpenArgs, error) {
	a := agent.TTYOpenArgs{Env: o.Env, Guard: g, Launch: pol.Launch(),
		IdleMS: pol.TerminalIdle().Milliseconds(), Max: pol.MaxTerminals()}
	var err error
	if a.Cols, err = checkSize("cols", o.Cols); err != nil {
		return a, err
	}
	if a.Rows, err = checkSize("rows", o.Rows); err != nil {
		return a, err
	}
	switch {
	case o.Command != "":
		if err := pol.CheckCommand(o.Command); err != nil {
			return a, err
		}
		a.Argv = append([]string{o.Command}, o.Args...)
	case len(o.Args) > 0:
		return a, invalidf("args", "args need a command")
	default:
		for _, sh := range shells {
			if pol.CheckCommand(sh) == nil {
				a.Shells = append(a.Shells, sh)
			}
		}
		if len(a.Shells) == 0 {
			return a, pol.CheckCommand(shells[0]) // names the rule
		}
	}
	if err := pol.CheckEnv(o.Env); err != nil {
		return a, err
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = "."
	}
	if a.Cwd, err = policy.Normalize(".", cwd); err != nil {
		return a, err
	}
	return a, pol.CheckRead(a.Cwd)
}

// checkSize checks a size given (nil: 0, the agent's default).
func checkSize(field string, v *int) (int, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 1 || *v > agent.TTYMaxSize {
		return 0, invalidf(field, "%s must be from 1 to %d, not %d", field, agent.TTYMaxSize, *v)
	}
	return *v, nil
}

// Resize checks a new size.
func Resize(cols, rows int) error {
	if _, err := checkSize("cols", &cols); err != nil {
		return err
	}
	_, err := checkSize("rows", &rows)
	return err
}

func invalidf(field, format string, a ...any) error {
	return &policy.Violation{Err: policy.ErrInvalid, Rule: field, Detail: fmt.Sprintf(format, a...)}
}

// Info is a terminal as the API and the tools report it.
type Info struct {
	ID        string   `json:"id" jsonschema:"Terminal id, for the other terminal tools and the attach WebSocket."`
	PID       int      `json:"pid"`
	Command   string   `json:"command"`
	Args      []string `json:"args"`
	Cols      int      `json:"cols"`
	Rows      int      `json:"rows"`
	Running   bool     `json:"running"`
	ExitCode  *int     `json:"exitCode,omitempty"`
	EndReason string   `json:"endReason,omitempty" jsonschema:"Why it ended: exited, closed, idle (no viewer, input or output for the policy's terminalIdle) or suspended (its session was suspended)."`
	StartedAt string   `json:"startedAt"`
	EndedAt   string   `json:"endedAt,omitempty"`
	Viewers   int      `json:"viewers"`
	Title     string   `json:"title,omitempty"`
}

// InfoOf reports an agent's terminal.
func InfoOf(t agent.TTYInfo) Info {
	in := Info{ID: t.ID, PID: t.PID, Cols: t.Cols, Rows: t.Rows, Running: t.Running, ExitCode: t.ExitCode,
		EndReason: t.EndReason, StartedAt: iso(t.StartedAt), Viewers: t.Viewers, Title: t.Title, Args: []string{}}
	if len(t.Argv) > 0 {
		in.Command, in.Args = t.Argv[0], append(in.Args, t.Argv[1:]...)
	}
	if t.EndedAt != nil {
		in.EndedAt = iso(*t.EndedAt)
	}
	return in
}

func iso(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Cursor is a position on the screen, 0-based.
type Cursor struct {
	Row int `json:"row"`
	Col int `json:"col"`
}

// Screen is what a terminal shows.
type Screen struct {
	Lines      []string `json:"lines" jsonschema:"The visible rows as text, top to bottom (trailing spaces cut)."`
	Cursor     Cursor   `json:"cursor"`
	Running    bool     `json:"running"`
	ExitCode   *int     `json:"exitCode,omitempty"`
	EndReason  string   `json:"endReason,omitempty"`
	Title      string   `json:"title,omitempty"`
	Scrollback []string `json:"scrollback,omitempty" jsonschema:"The last lines that scrolled off the top, oldest first (when asked)."`
	Matched    bool     `json:"matched,omitempty" jsonschema:"waitFor matched the screen."`
	TimedOut   bool     `json:"timedOut,omitempty" jsonschema:"A wait ended at timeoutMs without its condition."`
}

// ScreenOf reports an agent's screen.
func ScreenOf(s agent.TTYScreen) Screen {
	return Screen{Lines: s.Lines, Cursor: Cursor{s.CursorRow, s.CursorCol}, Running: s.Info.Running, ExitCode: s.Info.ExitCode,
		EndReason: s.Info.EndReason, Title: s.Info.Title, Scrollback: s.Scrollback, Matched: s.Matched, TimedOut: s.TimedOut}
}

// keys are the named keys and what they type (xterm's sequences, normal cursor mode).
var keys = map[string]string{
	"Enter": "\r", "Tab": "\t", "Escape": "\x1b", "Backspace": "\x7f", "Space": " ", "Delete": "\x1b[3~",
	"Up": "\x1b[A", "Down": "\x1b[B", "Right": "\x1b[C", "Left": "\x1b[D",
	"Home": "\x1b[H", "End": "\x1b[F", "PageUp": "\x1b[5~", "PageDown": "\x1b[6~", "Insert": "\x1b[2~",
}

func init() {
	for c := 'A'; c <= 'Z'; c++ {
		keys["Ctrl-"+string(c)] = string(rune(c - 'A' + 1))
	}
}

// KeyNames lists the keys Keys knows, for the tool's description.
const KeyNames = "Enter, Tab, Escape, Backspace, Space, Delete, Insert, Up, Down, Left, Right, Home, End, PageUp, PageDown, Ctrl-A … Ctrl-Z"

// Keys is what the named keys type, in order; a name is matched without regard to
// case. An unknown name is an error naming it, and nothing is typed.
func Keys(names []string) ([]byte, error) {
	var out []byte
	for i, n := range names {
		seq, ok := keys[n]
		if !ok {
			for k, v := range keys {
				if strings.EqualFold(k, n) {
					seq, ok = v, true
					break
				}
			}
		}
		if !ok {
			return nil, invalidf("keys", "keys[%d]: unknown key %q (known: %s)", i, n, KeyNames)
		}
		out = append(out, seq...)
	}
	return out, nil
}

// SuspendedKey is the session State key under which the service keeps the terminals a
// suspend ended, with their last screen: after the wake they are reported ended with
// endReason "suspended".
const SuspendedKey = "terminals.suspended"

// Suspended is a terminal as it was when its session was suspended.
type Suspended struct {
	Info   agent.TTYInfo   `json:"info"`
	Screen agent.TTYScreen `json:"screen"`
}

// FindSuspended returns the kept terminal id.
func FindSuspended(kept []Suspended, id string) (Suspended, bool) {
	for _, s := range kept {
		if s.Info.ID == id {
			return s, true
		}
	}
	return Suspended{}, false
}
