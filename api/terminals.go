package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/terminal"
)

// Interactive terminals (workspace.Service's OpenTerminal … AttachTerminal). The attach
// is a WebSocket: binary frames carry input (client → server) and output (server →
// client); text frames carry JSON control. From the client: {"type":"resize","cols":
// 100,"rows":30} and {"type":"signal","signal":"INT"}. From the server: {"type":
// "attached","terminal":{…},"readOnly":false} first, {"type":"skipped","bytes":n}
// when the viewer fell behind and output was dropped for it, {"type":"error","error":
// {…}} for a control frame it refused (the terminal lives on), and {"type":"exit",
// "code":0,"endReason":"exited"} before it closes the socket when the program ended.

// Bounds of an attach.
const (
	// wsWriteTimeout drops a viewer whose socket takes no output for this long.
	wsWriteTimeout = 30 * time.Second
	// wsReadLimit bounds one frame from a viewer (a paste).
	wsReadLimit = 1 << 20
)

// TerminalProtocol is the attach WebSocket's subprotocol. A browser, which can't set the
// Authorization header of a WebSocket, offers it together with "bearer.<token>".
const TerminalProtocol = "cws.terminal.v1"

// bearerProtocol prefixes a token offered as a WebSocket subprotocol.
const bearerProtocol = "bearer."

// wsBearer lets a WebSocket without an Authorization header authenticate with the
// token it offers as the subprotocol bearer.<token>; the answer never echoes it (the
// server selects TerminalProtocol).
func wsBearer(c *gin.Context) {
	r := c.Request
	if r.Header.Get("Authorization") != "" {
		return
	}
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if tok, ok := strings.CutPrefix(strings.TrimSpace(p), bearerProtocol); ok && tok != "" {
				r.Header.Set("Authorization", "Bearer "+tok)
				return
			}
		}
	}
}

// attachSet is the attached viewers, each by the func that ends its attach.
type attachSet struct {
	mu     sync.Mutex
	m      map[*context.CancelFunc]struct{}
	closed bool
}

// add registers an attach; false once closeAll ran (the server is draining).
func (as *attachSet) add(stop *context.CancelFunc) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.closed {
		return false
	}
	if as.m == nil {
		as.m = map[*context.CancelFunc]struct{}{}
	}
	as.m[stop] = struct{}{}
	return true
}

func (as *attachSet) remove(stop *context.CancelFunc) {
	as.mu.Lock()
	defer as.mu.Unlock()
	delete(as.m, stop)
}

// closeAll ends every attach, and every later one at once.
func (as *attachSet) closeAll() {
	as.mu.Lock()
	defer as.mu.Unlock()
	as.closed = true
	for stop := range as.m {
		(*stop)()
	}
}

func (s *Server) openTerminal(c *gin.Context) {
	var req terminal.Open
	if err := decodeOptionalJSON(c, &req); err != nil {
		fail(c, s.log, err)
		return
	}
	in, err := s.cfg.Service.OpenTerminal(c.Request.Context(), caller(c), c.Param("id"), req)
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusCreated, in)
}

func (s *Server) listTerminals(c *gin.Context) {
	ts, err := s.cfg.Service.ListTerminals(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"terminals": ts})
}

func (s *Server) getTerminal(c *gin.Context) {
	in, err := s.cfg.Service.GetTerminal(c.Request.Context(), caller(c), c.Param("id"), c.Param("tid"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, in)
}

func (s *Server) closeTerminal(c *gin.Context) {
	in, err := s.cfg.Service.CloseTerminal(c.Request.Context(), caller(c), c.Param("id"), c.Param("tid"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, in)
}

// control is a text frame of an attach, either way.
type control struct {
	Type      string         `json:"type"`
	Cols      int            `json:"cols,omitempty"`
	Rows      int            `json:"rows,omitempty"`
	Signal    string         `json:"signal,omitempty"`
	Code      *int           `json:"code,omitempty"`
	EndReason string         `json:"endReason,omitempty"`
	Bytes     int64          `json:"bytes,omitempty"`
	Terminal  *terminal.Info `json:"terminal,omitempty"`
	ReadOnly  bool           `json:"readOnly,omitempty"`
	Error     *ErrorDetail   `json:"error,omitempty"`
}

// attachTerminal serves GET …/terminals/:tid/attach (?readonly=1 for a viewer that
// can't type). Refusals come before the upgrade, as HTTP errors.
func (s *Server) attachTerminal(c *gin.Context) {
	ctx := c.Request.Context()
	readOnly := c.Query("readonly") == "1" || c.Query("readonly") == "true"
	ta, err := s.cfg.Service.AttachTerminal(ctx, caller(c), c.Param("id"), c.Param("tid"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	conn, err := websocket.Accept(c.Writer, c.Request, &websocket.AcceptOptions{Subprotocols: []string{TerminalProtocol}})
	if err != nil {
		return // Accept answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(wsReadLimit)
	// connCtx lives as long as the socket (a read or write whose context ends closes
	// it at once, without a close frame); ctx is the attach's, which the viewer's going,
	// a write that times out or a drain ends, after which the socket closes properly.
	connCtx, closeConn := context.WithCancel(context.WithoutCancel(ctx))
	defer closeConn()
	ctx, cancel := context.WithCancel(connCtx)
	defer cancel()
	if !s.attaches.add(&cancel) {
		conn.Close(websocket.StatusGoingAway, "cws is shutting down: attach again")
		return
	}
	defer s.attaches.remove(&cancel)

	send := func(v any) error {
		b, _ := json.Marshal(v)
		wctx, done := context.WithTimeout(connCtx, wsWriteTimeout)
		defer done()
		return conn.Write(wctx, websocket.MessageText, b)
	}
	if err := send(control{Type: "attached", Terminal: &ta.Info, ReadOnly: readOnly}); err != nil {
		return
	}
	refuse := func(err error) {
		_, body := errorResponse(nil, s.log, err)
		_ = send(control{Type: "error", Error: &body.Error})
	}

	// The viewer's frames: input into the pipe the attach reads, control at once.
	input, typed := io.Pipe()
	// Whatever ends the attach, a viewer's frame still being written into the pipe
	// returns (a Stream that ended, or never read input, leaves it unread).
	defer input.CloseWithError(io.ErrClosedPipe)
	go func() {
		defer cancel()
		defer typed.Close()
		for {
			typ, data, err := conn.Read(connCtx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				if readOnly {
					refuse(fmt.Errorf("%w: this viewer is read-only (?readonly=1): its input is not typed", workspace.ErrInvalid))
					continue
				}
				if _, err := typed.Write(data); err != nil {
					return
				}
				continue
			}
			if readOnly {
				refuse(fmt.Errorf("%w: this viewer is read-only (?readonly=1): it can't resize or signal the terminal", workspace.ErrInvalid))
				continue
			}
			if err := s.terminalControl(ctx, ta, data); err != nil {
				refuse(err)
			}
		}
	}()

	wctx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(connCtx, wsWriteTimeout) }
	info, err := ta.Stream(ctx, readOnly, input, func(p []byte) error {
		c, done := wctx()
		defer done()
		return conn.Write(c, websocket.MessageBinary, p)
	}, func(n int64) error {
		return send(control{Type: "skipped", Bytes: n})
	})
	switch {
	case err == nil:
		_ = send(control{Type: "exit", Code: info.ExitCode, EndReason: info.EndReason})
		conn.Close(websocket.StatusNormalClosure, "the program ended")
	case s.draining.Load():
		conn.Close(websocket.StatusGoingAway, "cws is shutting down: attach again")
	case ctx.Err() != nil: // the viewer went, or was too slow to write to
		conn.Close(websocket.StatusPolicyViolation, "viewer gone or too slow")
	default:
		refuse(err)
		conn.Close(websocket.StatusInternalError, "attach failed")
	}
}

// terminalControl applies one control frame.
func (s *Server) terminalControl(ctx context.Context, ta *workspace.TerminalAttachment, data []byte) error {
	var ctl control
	if err := json.Unmarshal(data, &ctl); err != nil {
		return fmt.Errorf("%w: a control frame is JSON such as {\"type\":\"resize\",\"cols\":100,\"rows\":30}: %v", workspace.ErrInvalid, err)
	}
	switch ctl.Type {
	case "resize":
		return ta.Resize(ctx, ctl.Cols, ctl.Rows)
	case "signal":
		return ta.Signal(ctx, ctl.Signal)
	}
	return fmt.Errorf("%w: unknown control type %q (want resize or signal)", workspace.ErrInvalid, ctl.Type)
}
