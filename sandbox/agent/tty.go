package agent

import (
	"context"
	"io"
	"time"

	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// Interactive terminals: a program on a pseudo-terminal that the agent keeps (package
// server/tty), with its scrollback and a screen from a VT emulator. Unlike the term.*
// operations (a shell interpreted inside the agent, one command line at a time), the
// program is a real process — a shell, a REPL, an editor — started as exec and
// proc.start start theirs: as the tool user, in its own session, under the call's
// exec policy.
const (
	OpTTYOpen   = "tty.open"
	OpTTYList   = "tty.list"
	OpTTYGet    = "tty.get"
	OpTTYClose  = "tty.close"
	OpTTYResize = "tty.resize"
	OpTTYSignal = "tty.signal"
	OpTTYInput  = "tty.input"  // the request body is typed into the terminal
	OpTTYAttach = "tty.attach" // streamed: the body is input, data events are output
	OpTTYScreen = "tty.screen"
)

// Events of a tty.attach call besides EventData (output).
const (
	// EventSkipped: the viewer fell behind and the agent dropped output it had not
	// sent yet; the body is the number of bytes dropped, in decimal.
	EventSkipped = "skipped"
)

// TTY bounds.
const (
	// TTYScrollback is the raw output a terminal keeps and replays on attach.
	TTYScrollback = 1 << 20
	// TTYMaxSize bounds cols and rows.
	TTYMaxSize = 1000
	// TTYDefaultCols and TTYDefaultRows are a terminal's size when none is given.
	TTYDefaultCols, TTYDefaultRows = 80, 24
)

// End reasons of a terminal (TTYInfo.EndReason).
const (
	TTYExited    = "exited"    // its program exited
	TTYClosed    = "closed"    // tty.close
	TTYIdle      = "idle"      // no viewer, no input and no output for its idle time
	TTYSuspended = "suspended" // its session was suspended (set by the host)
)

// TTYOpenArgs starts a program on a new terminal.
type TTYOpenArgs struct {
	// Argv is the program and its arguments; empty: the first of Shells found on
	// SafePath, interactive.
	Argv   []string          `json:"argv,omitempty"`
	Shells []string          `json:"shells,omitempty"`
	Cwd    string            `json:"cwd,omitempty"` // workspace-relative
	Env    map[string]string `json:"env,omitempty"` // added to the base environment (TERM is xterm-256color)
	Cols   int               `json:"cols,omitempty"`
	Rows   int               `json:"rows,omitempty"`
	// IdleMS ends the terminal after this long with no viewer, no input and no output;
	// 0: never.
	IdleMS int64 `json:"idleMs,omitempty"`
	// Max is how many running terminals the sandbox may have; 0: the agent's own bound.
	Max    int          `json:"max,omitempty"`
	Guard  *guard.Guard `json:"guard,omitempty"`
	Launch *ExecPolicy  `json:"launch,omitempty"` // as in ExecArgs
}

// TTYInfo describes a terminal.
type TTYInfo struct {
	ID        string     `json:"id"`
	Argv      []string   `json:"argv"`
	PID       int        `json:"pid"`
	Cols      int        `json:"cols"`
	Rows      int        `json:"rows"`
	Running   bool       `json:"running"`
	ExitCode  *int       `json:"exitCode,omitempty"`
	EndReason string     `json:"endReason,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   *time.Time `json:"endedAt,omitempty"`
	Viewers   int        `json:"viewers"`
	Title     string     `json:"title,omitempty"`
	// Unenforced: started with a Launch policy while Landlock was unavailable.
	Unenforced bool `json:"unenforced,omitempty"`
}

// TTYIDArgs names a terminal.
type TTYIDArgs struct {
	ID string `json:"id"`
}

// TTYResizeArgs sets a terminal's size.
type TTYResizeArgs struct {
	ID   string `json:"id"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
}

// TTYSignalArgs sends a signal ("INT", "TERM", "HUP", "KILL", "QUIT", "TSTP", "CONT",
// "WINCH", "USR1", "USR2") to the terminal's foreground process group.
type TTYSignalArgs struct {
	ID     string `json:"id"`
	Signal string `json:"signal"`
}

// TTYAttachArgs attaches a viewer: the call streams the scrollback (unless NoReplay),
// then the output as it comes, and ends with the terminal's TTYInfo when its program
// ended or the host cancels. Its streamed body is typed into the terminal, unless
// ReadOnly.
type TTYAttachArgs struct {
	ID       string `json:"id"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	NoReplay bool   `json:"noReplay,omitempty"`
}

// TTYScreenArgs reads a terminal's screen, after waiting (up to TimeoutMS) until
// WaitFor, a regexp, matches a visible line, and/or until no output came for WaitIdleMS.
type TTYScreenArgs struct {
	ID         string `json:"id"`
	WaitFor    string `json:"waitFor,omitempty"`
	WaitIdleMS int64  `json:"waitIdleMs,omitempty"`
	TimeoutMS  int64  `json:"timeoutMs,omitempty"`
	Scrollback int    `json:"scrollback,omitempty"` // the last lines that scrolled off, at most this many
}

// TTYScreen is a terminal's screen as text.
type TTYScreen struct {
	Info       TTYInfo  `json:"info"`
	Lines      []string `json:"lines"` // the visible rows, top to bottom, trailing spaces cut
	CursorRow  int      `json:"cursorRow"`
	CursorCol  int      `json:"cursorCol"`
	Scrollback []string `json:"scrollback,omitempty"`
	AltScreen  bool     `json:"altScreen,omitempty"`
	// Matched: WaitFor matched; TimedOut: a wait asked for ended at TimeoutMS.
	Matched  bool `json:"matched,omitempty"`
	TimedOut bool `json:"timedOut,omitempty"`
}

func (a TTYScreenArgs) callTimeout() time.Duration { return waitTimeout(a.TimeoutMS) }

// TTYOpen starts a program on a new terminal.
func (c *Client) TTYOpen(ctx context.Context, a TTYOpenArgs) (TTYInfo, error) {
	var r TTYInfo
	err := c.Call(ctx, OpTTYOpen, a, nil, nil, &r)
	return r, err
}

// TTYList lists the terminals, running and ended.
func (c *Client) TTYList(ctx context.Context) ([]TTYInfo, error) {
	var r []TTYInfo
	err := c.Call(ctx, OpTTYList, struct{}{}, nil, nil, &r)
	return r, err
}

// TTYGet describes one terminal.
func (c *Client) TTYGet(ctx context.Context, id string) (TTYInfo, error) {
	var r TTYInfo
	err := c.Call(ctx, OpTTYGet, TTYIDArgs{ID: id}, nil, nil, &r)
	return r, err
}

// TTYClose ends a terminal: its program's session is hung up, then killed.
func (c *Client) TTYClose(ctx context.Context, id string) (TTYInfo, error) {
	var r TTYInfo
	err := c.Call(ctx, OpTTYClose, TTYIDArgs{ID: id}, nil, nil, &r)
	return r, err
}

// TTYResize sets a terminal's size.
func (c *Client) TTYResize(ctx context.Context, a TTYResizeArgs) error {
	return c.Call(ctx, OpTTYResize, a, nil, nil, nil)
}

// TTYSignal signals a terminal's foreground process group.
func (c *Client) TTYSignal(ctx context.Context, a TTYSignalArgs) error {
	return c.Call(ctx, OpTTYSignal, a, nil, nil, nil)
}

// TTYInput types input into a terminal.
func (c *Client) TTYInput(ctx context.Context, id string, input []byte) error {
	return c.Call(ctx, OpTTYInput, TTYIDArgs{ID: id}, input, nil, nil)
}

// TTYAttach attaches a viewer (see TTYAttachArgs): input is typed into the terminal,
// onEvent gets EventData (output) and EventSkipped. It returns when the program ended
// (its TTYInfo) or ctx ends.
func (c *Client) TTYAttach(ctx context.Context, a TTYAttachArgs, input io.Reader, onEvent EventFunc) (TTYInfo, error) {
	var r TTYInfo
	err := c.CallStream(ctx, OpTTYAttach, a, input, onEvent, &r)
	return r, err
}

// TTYScreen reads a terminal's screen.
func (c *Client) TTYScreen(ctx context.Context, a TTYScreenArgs) (TTYScreen, error) {
	var r TTYScreen
	err := c.Call(ctx, OpTTYScreen, a, nil, nil, &r)
	return r, err
}
