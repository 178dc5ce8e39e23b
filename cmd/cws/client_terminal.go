package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/coder/websocket"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func execCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	var interactive, tty bool
	var cwd string
	cmd := &cobra.Command{
		Use:   "exec SESSION [-- COMMAND ARGS...]",
		Short: "Run a program on a terminal in a session's workspace, attached (like docker exec -it)",
		Long: `Open an interactive terminal in the workspace — the image's shell, or COMMAND with
ARGS — and attach to it: with -t your terminal is put in raw mode and its size follows
the window; with -i what you type is sent. The command exits with the program's exit
code. Type ~. at the start of a line to detach: the terminal keeps running, and
cws attach SESSION TERMINAL takes it back. The token needs the tools:exec scope.

Examples:
  cws exec -it s-abc…                 # a shell
  cws exec -it s-abc… -- python3      # a REPL
  cws exec s-abc… -- make test         # output only, exit code passed on`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			id := args[0]
			req := map[string]any{}
			if len(args) > 1 {
				req["command"], req["args"] = args[1], args[2:]
			}
			if cwd != "" {
				req["cwd"] = cwd
			}
			if cols, rows, ok := windowSize(tty); ok {
				req["cols"], req["rows"] = cols, rows
			}
			var opened struct {
				ID string `json:"id"`
			}
			if err := c.call(cmd.Context(), http.MethodPost, sessionPath(id, "terminals"), req, &opened, nil); err != nil {
				return err
			}
			return c.attach(cmd.Context(), id, opened.ID, interactive, tty, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cf.register(cmd.Flags(), getenv)
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "send what you type to the program")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "put your terminal in raw mode and follow its size")
	cmd.Flags().StringVar(&cwd, "cwd", "", "working directory, relative to the workspace root")
	return cmd
}

func attachCmd(getenv func(string) string) *cobra.Command {
	var cf clientFlags
	var readOnly bool
	cmd := &cobra.Command{
		Use:   "attach SESSION TERMINAL",
		Short: "Attach to a running terminal of a session",
		Long: `Attach to a terminal opened by cws exec, the API or an agent's terminalOpen: its
scrollback is replayed, then you see and type into it as its other viewers do. ~. at
the start of a line detaches; the program's exit ends the command with its exit code.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			return c.attach(cmd.Context(), args[0], args[1], !readOnly, true, cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cf.register(cmd.Flags(), getenv)
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "watch without typing")
	return cmd
}

// windowSize is stdout's terminal size, when tty asks for it and stdout is one.
func windowSize(tty bool) (cols, rows int, ok bool) {
	if !tty || !term.IsTerminal(int(os.Stdout.Fd())) {
		return 0, 0, false
	}
	cols, rows, err := term.GetSize(int(os.Stdout.Fd()))
	return cols, rows, err == nil
}

// attach runs one viewer of terminal tid until the program exits (its exit code is the
// command's) or ~. detaches.
func (c *client) attach(ctx context.Context, id, tid string, interactive, tty bool, stdin io.Reader, stdout, stderr io.Writer) error {
	u, err := url.Parse(c.base + sessionPath(id, "terminals", tid, "attach"))
	if err != nil {
		return err
	}
	u.Scheme = map[string]string{"https": "wss", "http": "ws"}[u.Scheme]
	if !interactive {
		u.RawQuery = "readonly=1"
	}
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: c.http,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + c.token}, "User-Agent": {"cws-cli"}}})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return fmt.Errorf("attach %s: HTTP %d", tid, resp.StatusCode)
		}
		return connError(c.base, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(4 << 20)

	if tty && term.IsTerminal(int(os.Stdin.Fd())) {
		if old, err := term.MakeRaw(int(os.Stdin.Fd())); err == nil {
			defer term.Restore(int(os.Stdin.Fd()), old)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resize := func() {
		if cols, rows, ok := windowSize(tty); ok {
			b, _ := json.Marshal(map[string]any{"type": "resize", "cols": cols, "rows": rows})
			_ = conn.Write(ctx, websocket.MessageText, b)
		}
	}
	if tty {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-winch:
					resize()
				case <-ctx.Done():
					return
				}
			}
		}()
		resize()
	}
	detached := make(chan struct{})
	if interactive {
		go func() {
			if copyInput(ctx, conn, stdin) {
				close(detached)
				cancel()
			}
		}()
	}
	code, err := readOutput(ctx, conn, stdout, stderr)
	select {
	case <-detached:
		fmt.Fprintf(stderr, "\r\ndetached from %s: cws attach %s %s\r\n", tid, id, tid)
		conn.Close(websocket.StatusNormalClosure, "detached")
		return nil
	default:
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return exitError{code}
	}
	return nil
}

// copyInput sends what is typed, and reports true when ~. at the start of a line asked
// to detach (a ~ followed by anything else is sent as it is).
func copyInput(ctx context.Context, conn *websocket.Conn, stdin io.Reader) bool {
	buf := make([]byte, 32<<10)
	lineStart, tilde := true, false
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			var out []byte
			for _, b := range buf[:n] {
				switch {
				case tilde && b == '.':
					if len(out) > 0 {
						_ = conn.Write(ctx, websocket.MessageBinary, out)
					}
					return true
				case tilde:
					out, tilde = append(out, '~', b), false
				case lineStart && b == '~':
					tilde = true
					continue
				default:
					out = append(out, b)
				}
				lineStart = b == '\r' || b == '\n'
			}
			if len(out) > 0 {
				if conn.Write(ctx, websocket.MessageBinary, out) != nil {
					return false
				}
			}
		}
		if err != nil {
			return false // end of input: the program's output still comes
		}
	}
}

// readOutput copies the terminal's output until the program exits (its code) or the
// connection ends.
func readOutput(ctx context.Context, conn *websocket.Conn, stdout, stderr io.Writer) (int, error) {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, nil
			}
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return 0, fmt.Errorf("the terminal's connection closed: %s", ce.Reason)
			}
			return 0, err
		}
		if typ == websocket.MessageBinary {
			if _, err := stdout.Write(data); err != nil {
				return 0, err
			}
			continue
		}
		var ctl struct {
			Type      string `json:"type"`
			Code      *int   `json:"code"`
			EndReason string `json:"endReason"`
			Bytes     int64  `json:"bytes"`
			Error     struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(data, &ctl) != nil {
			continue
		}
		switch ctl.Type {
		case "exit":
			if ctl.Code == nil {
				fmt.Fprintf(stderr, "\r\nthe terminal ended (%s)\r\n", ctl.EndReason)
				return 1, nil
			}
			return *ctl.Code, nil
		case "skipped":
			fmt.Fprintf(stderr, "\r\n[cws: %d bytes of output skipped: this viewer fell behind]\r\n", ctl.Bytes)
		case "error":
			fmt.Fprintf(stderr, "\r\ncws: %s\r\n", strings.TrimSpace(ctl.Error.Message))
		}
	}
}
