package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// DialFunc opens a fresh byte stream to the agent (for Docker: one `docker exec` of
// `cws-agent attach`). The stream must stay usable after ctx ends.
type DialFunc func(ctx context.Context) (io.ReadWriteCloser, error)

// Client calls one agent. It dials lazily, keeps one multiplexed session, and redials
// transparently when the stream breaks (the agent and its background processes live on
// in the container). It is safe for concurrent use.
type Client struct {
	dial    DialFunc
	log     *slog.Logger
	version string

	localOpen LocalOpener // nil: every call goes to the agent (see local.go)

	mu    sync.Mutex
	sess  *yamux.Session
	peer  Hello
	local Local // answers reads locally while sess lives; nil when there is none
}

// NewClient returns a client that reaches the agent through dial. version is the host's
// release, sent in the handshake for the agent's logs.
func NewClient(dial DialFunc, version string, log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{dial: dial, log: log, version: version}
}

// Close ends the current stream. The agent keeps running; a later call redials.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocal()
	if c.sess == nil {
		return nil
	}
	err := c.sess.Close()
	c.sess = nil
	return err
}

// closeLocal drops the local reader with the session it came with. Called with mu.
func (c *Client) closeLocal() {
	if c.local != nil {
		_ = c.local.Close()
		c.local = nil
	}
}

// Peer returns the agent's handshake, once connected.
func (c *Client) Peer() Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peer
}

// YamuxConfig is the multiplexer's configuration, the same on both ends.
func YamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.AcceptBacklog = 1024
	cfg.MaxStreamWindowSize = 16 << 20
	cfg.KeepAliveInterval = 20 * time.Second
	cfg.ConnectionWriteTimeout = 30 * time.Second
	cfg.StreamCloseTimeout = time.Minute
	cfg.LogOutput = io.Discard
	return cfg
}

// session returns the live session, dialing and handshaking when there is none.
func (c *Client) session(ctx context.Context) (*yamux.Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sess != nil && !c.sess.IsClosed() {
		return c.sess, nil
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: dial: %w", ErrUnavailable, err)
	}
	ours := Hello{Protocol: ProtocolVersion, Version: c.version}
	var rights *rightsReader
	var target LocalTarget
	var rd io.Reader = conn
	if uc, ok := conn.(UnixConner); ok && c.localOpen != nil {
		if t, ok := uc.LocalTarget(); ok {
			ours.Root, target = true, t
			rights = &rightsReader{c: uc.UnixConn()}
			rd = rights
		}
	}
	peer, err := handshake(ctx, conn, rd, ours)
	if err != nil {
		if rights != nil {
			rights.discard()
		}
		conn.Close()
		return nil, err
	}
	sess, err := yamux.Client(MuxConn(conn), YamuxConfig())
	if err != nil {
		if rights != nil {
			rights.discard()
		}
		conn.Close()
		return nil, fmt.Errorf("%w: start session: %v", ErrUnavailable, err)
	}
	c.closeLocal()
	if rights != nil {
		if root := rights.takeRoot(); root != nil {
			c.local = c.openLocal(root, target)
		}
	}
	c.sess, c.peer = sess, peer
	c.log.Debug("agent connected", "agent_version", peer.Version, "protocol", peer.Protocol)
	return sess, nil
}

// openLocal makes the local reader from the root the agent sent, or returns nil (and
// every call goes to the agent) when it cannot be used.
func (c *Client) openLocal(root *os.File, t LocalTarget) Local {
	if err := CheckRoot(root, t); err != nil {
		root.Close()
		c.log.Warn("refused the workspace root the agent sent; reads go to the agent", "err", err)
		return nil
	}
	l, err := c.localOpen(root, t)
	if err != nil {
		c.log.Debug("local reads unavailable; reads go to the agent", "err", err)
		return nil
	}
	return l
}

// handshake sends ours and reads theirs from rd (conn, or a reader that also takes a
// descriptor from it), bounded by ctx.
func handshake(ctx context.Context, conn io.ReadWriteCloser, rd io.Reader, ours Hello) (Hello, error) {
	type res struct {
		h   Hello
		err error
	}
	ch := make(chan res, 1)
	go func() {
		if err := WriteHello(conn, ours); err != nil {
			ch <- res{err: err}
			return
		}
		h, err := ReadHello(rd)
		ch <- res{h, err}
	}()
	select {
	case <-ctx.Done():
		conn.Close()
		return Hello{}, fmt.Errorf("%w: handshake: %v", ErrUnavailable, ctx.Err())
	case r := <-ch:
		if r.err != nil {
			return Hello{}, fmt.Errorf("%w: handshake: %v", ErrUnavailable, r.err)
		}
		if r.h.Error != "" || r.h.Protocol != ProtocolVersion {
			return r.h, fmt.Errorf("%w: the agent (cws-agent %s) speaks protocol %d, this cws speaks %d: recreate the session so it gets the current agent",
				ErrVersion, r.h.Version, r.h.Protocol, ProtocolVersion)
		}
		return r.h, nil
	}
}

// drop forgets a broken session so that the next call redials.
func (c *Client) drop(s *yamux.Session) {
	c.mu.Lock()
	if c.sess == s {
		c.sess = nil
		c.closeLocal()
	}
	c.mu.Unlock()
	s.Close()
}

// EventFunc receives a call's event frames (file data, stdout, stderr) in order.
type EventFunc func(event string, data []byte) error

// Call runs one operation: args are JSON-encoded, body is the request payload, events
// arrive through onEvent, and the done frame's result is decoded into result (if not nil).
//
// When the stream breaks, reads are retried on a fresh stream, and so are the
// operations that change files (write, remove, rename, mkdir, proc.kill): they carry a
// request id, and the agent answers a repeated id with its first outcome, so each is
// applied exactly once. Commands (exec, proc.start) are never retried: they fail with
// an *InterruptedError that says whether the command had started.
func (c *Client) Call(ctx context.Context, op string, args any, body []byte, onEvent EventFunc, result any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("encode %s args: %w", op, err)
	}
	req := &Header{Op: op, Args: raw}
	if localOp(op) {
		if _, err := c.session(ctx); err != nil { // a first call connects, and may bring the root
			return err // as do would: not a broken stream, nothing to retry
		}
		if err, ok := c.callLocal(ctx, op, req, body, onEvent, result); ok {
			return err
		}
	}
	if deduplicated(op) {
		req.ID = newRequestID()
	}
	for attempt := 0; ; attempt++ {
		var started bool
		err = c.do(ctx, op, req, body, nil, onEvent, result, &started)
		if err == nil || !errors.Is(err, errRetryable) {
			return err
		}
		if command(op) {
			return &InterruptedError{Op: op, Started: started, Err: err}
		}
		if attempt >= maxRetries || !(idempotent(op) || req.ID != "") {
			return err
		}
		c.log.Debug("agent stream broke, retrying on a fresh one", "op", op, "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", op, ctx.Err())
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// maxRetries bounds the retries of one call after broken streams (a killed agent is
// restarted by its init within a fraction of a second; the redial waits for it).
const maxRetries = 3

// errRetryable marks failures where the request provably never reached the agent's
// handler or its answer was lost with the stream.
var errRetryable = errors.New("stream broken")

func idempotent(op string) bool {
	switch op {
	case OpPing, OpStat, OpRead, OpList, OpSearch, OpProcList, OpProcOutput, OpCheck:
		return true
	}
	return false
}

// deduplicated ops carry a request id so that a retry is applied exactly once.
func deduplicated(op string) bool {
	switch op {
	case OpWrite, OpRemove, OpRename, OpMkdir, OpProcKill:
		return true
	}
	return false
}

// Command ops start processes (a terminal's command line included): never retried,
// since they are not idempotent and an id cannot make a half-run command whole.
func command(op string) bool {
	return op == OpExec || op == OpProcStart || op == OpTermRun
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (c *Client) callStream(ctx context.Context, op string, args json.RawMessage, in io.Reader, onEvent EventFunc, result any) error {
	return c.do(ctx, op, &Header{Op: op, Args: args, Stream: true}, nil, in, onEvent, result, new(bool))
}

// do sends the request (and, for a streamed one, its body as data events) and reads
// events until the done frame. *started is set when the agent says a command started.
func (c *Client) do(ctx context.Context, op string, req *Header, body []byte, in io.Reader, onEvent EventFunc, result any, started *bool) error {
	sess, err := c.session(ctx)
	if err != nil {
		return err
	}
	st, err := sess.OpenStream()
	if err != nil {
		c.drop(sess)
		return fmt.Errorf("%w: %w: open stream: %v", ErrUnavailable, errRetryable, err)
	}
	defer st.Close()
	if err := WriteFrame(st, req, body); err != nil {
		c.drop(sess)
		return fmt.Errorf("%w: %w: send %s: %v", ErrUnavailable, errRetryable, op, err)
	}

	// One writer at a time on the stream: the body sender, then the canceller.
	var wmu sync.Mutex
	if in != nil {
		go func() {
			buf := make([]byte, ChunkSize)
			for {
				n, rerr := in.Read(buf)
				wmu.Lock()
				var werr error
				if n > 0 {
					werr = WriteFrame(st, &Header{Event: EventData}, buf[:n])
				}
				if rerr != nil && werr == nil {
					werr = WriteFrame(st, &Header{Event: EventEOF}, nil)
				}
				wmu.Unlock()
				if rerr != nil || werr != nil {
					return
				}
			}
		}()
	}

	// A canceled ctx tells the agent to stop (it kills the process group) and ends the read.
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-finished:
		case <-ctx.Done():
			wmu.Lock()
			_ = WriteFrame(st, &Header{Cancel: true}, nil)
			wmu.Unlock()
			_ = st.SetReadDeadline(time.Now()) // unblock the read below now
		}
	}()

	for {
		h, data, err := ReadFrame(st)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w", op, ctx.Err())
			}
			if sess.IsClosed() || closedSoon(sess) {
				c.drop(sess)
				return fmt.Errorf("%w: %w: %s: %v", ErrUnavailable, errRetryable, op, err)
			}
			return fmt.Errorf("%w: %s: read answer: %v", ErrUnavailable, op, err)
		}
		if done, err := takeFrame(h, data, op, onEvent, result, started); done || err != nil {
			return err
		}
	}
}

// takeFrame handles one frame of an answer; done is true at its done frame, err is the
// call's outcome then (or a failed event handler's error).
func takeFrame(h *Header, data []byte, op string, onEvent EventFunc, result any, started *bool) (done bool, err error) {
	if h.Done {
		if h.Error != nil {
			return true, h.Error
		}
		if result != nil && len(h.Result) > 0 {
			if err := json.Unmarshal(h.Result, result); err != nil {
				return true, fmt.Errorf("decode %s result: %w", op, err)
			}
		}
		if bc, ok := result.(BodyCarrier); ok {
			bc.SetBody(data)
		}
		return true, nil
	}
	if h.Event == EventStarted {
		*started = true
		return false, nil
	}
	if onEvent != nil && h.Event != "" {
		return false, onEvent(h.Event, data)
	}
	return false, nil
}

// closedSoon reports whether the session closes within a moment: a stream can see its
// end a little before the session notices that the whole connection went.
func closedSoon(s *yamux.Session) bool {
	select {
	case <-s.CloseChan():
		return true
	case <-time.After(100 * time.Millisecond):
		return false
	}
}

// CallStream is Call with a streamed request body: body is sent in chunks while the
// agent reads it, so an upload of any size never sits in memory. It is never retried.
func (c *Client) CallStream(ctx context.Context, op string, args any, body io.Reader, onEvent EventFunc, result any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("encode %s args: %w", op, err)
	}
	return c.callStream(ctx, op, raw, body, onEvent, result)
}
