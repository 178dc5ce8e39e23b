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
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// DialFunc opens a fresh byte stream to the agent (for Docker: one `docker exec` of
// `cws-agent attach`). The stream must stay usable after ctx ends.
type DialFunc func(ctx context.Context) (io.ReadWriteCloser, error)

// Client calls one agent. It dials lazily, keeps one multiplexed session, and redials
// transparently when the stream breaks (the agent and its background processes live on
// in the container). It never waits on a silent agent: every call has a deadline (see
// Call), and an agent that stops answering is declared unresponsive (see Liveness). It
// is safe for concurrent use.
type Client struct {
	dial    DialFunc
	log     *slog.Logger
	version string
	live    Liveness

	localOpen LocalOpener // nil: every call goes to the agent (see local.go)
	egress    EgressFunc  // nil: the agent's egress streams are refused (netedge.go)

	closed chan struct{} // closed by Shutdown

	mu       sync.Mutex
	shut     bool     // Shutdown was called
	cur      *link    // the live connection, or nil
	connects *connect // the dial under way, or nil
	peer     Hello
	local    Local // answers reads locally while cur lives; nil when there is none
}

// NewClient returns a client that reaches the agent through dial. version is the host's
// release, sent in the handshake for the agent's logs.
func NewClient(dial DialFunc, version string, log *slog.Logger) *Client {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{dial: dial, log: log, version: version, live: Liveness{}.withDefaults(), closed: make(chan struct{})}
}

// errClosed is what every call of a client that was shut down returns.
var errClosed = fmt.Errorf("%w: %w", ErrUnavailable, ErrClosed)

// Close ends the current stream: the calls in flight on it end (those that may be
// retried are, on a fresh stream), and a later call redials. The agent keeps running.
// Close never waits on the agent: a stopped agent's stream is cut.
func (c *Client) Close() error {
	c.mu.Lock()
	l := c.cur
	c.cur = nil
	c.closeLocal()
	c.mu.Unlock()
	if l != nil {
		return l.sess.Close()
	}
	return nil
}

// Shutdown ends the client for good: its stream closes, the calls in flight end at
// once with ErrClosed (the agent is told to stop them), and later calls fail the same
// way. The agent keeps running. Shutdown never waits on the agent.
func (c *Client) Shutdown() {
	c.mu.Lock()
	if c.shut {
		c.mu.Unlock()
		return
	}
	c.shut = true
	close(c.closed)
	l := c.cur
	c.cur = nil
	c.closeLocal()
	c.mu.Unlock()
	if l != nil {
		l.sess.Close()
	}
}

// closeLocal drops the local reader with the session it came with. Called with mu.
func (c *Client) closeLocal() {
	if c.local != nil {
		_ = c.local.Close()
		c.local = nil
	}
}

// Connected reports whether the client holds a live connection now (a call would not
// have to dial).
func (c *Client) Connected() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.shut && c.cur != nil && !c.cur.sess.IsClosed()
}

// Peer returns the agent's handshake, once connected.
func (c *Client) Peer() Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peer
}

// StreamWindow is the most one stream may have in flight or unread at its receiver.
// It bounds what a peer can make the other end hold for a stream whose reader is slow
// (a preview's client, an egress upload to a slow server): cws holds at most this per
// stream. 4 MiB moves as fast as 16 MiB on the socket (BenchmarkMuxConnBulk), and
// keeps a 1 GB/s stream going over a 4 ms link.
const StreamWindow = 4 << 20

// YamuxConfig is the multiplexer's configuration, the same on both ends.
func YamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.AcceptBacklog = 1024
	cfg.MaxStreamWindowSize = StreamWindow
	cfg.KeepAliveInterval = 20 * time.Second
	cfg.ConnectionWriteTimeout = 30 * time.Second
	cfg.StreamCloseTimeout = time.Minute
	cfg.LogOutput = io.Discard
	return cfg
}

// connect is a dial under way; the calls that need a connection meanwhile share its
// outcome, so that a silent agent costs them one bounded wait, not one each.
type connect struct {
	done chan struct{}
	l    *link
	err  error
}

// session returns the live connection, dialing and handshaking when there is none. The
// dial runs on its own, bounded by ConnectTimeout and by Close: a caller that gives up
// leaves it to the others.
func (c *Client) session(ctx context.Context) (*link, error) {
	c.mu.Lock()
	if c.shut {
		c.mu.Unlock()
		return nil, errClosed
	}
	if l := c.cur; l != nil && !l.sess.IsClosed() {
		c.mu.Unlock()
		return l, nil
	}
	d := c.connects
	if d == nil {
		d = &connect{done: make(chan struct{})}
		c.connects = d
		go c.connect(context.WithoutCancel(ctx), d)
	}
	c.mu.Unlock()
	select {
	case <-d.done:
		return d.l, d.err
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: connect: %w", ErrUnavailable, ctxErr(ctx))
	case <-c.closed:
		return nil, errClosed
	}
}

// connect dials, and makes the connection current when it works.
func (c *Client) connect(ctx context.Context, d *connect) {
	ctx, cancel := context.WithTimeout(ctx, c.live.ConnectTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	l, local, peer, err := c.open(ctx)
	c.mu.Lock()
	c.connects = nil
	if err == nil && c.shut {
		err = errClosed
	}
	if err == nil {
		c.closeLocal()
		c.cur, c.local, c.peer = l, local, peer
	}
	c.mu.Unlock()
	if err != nil && l != nil {
		if local != nil {
			local.Close()
		}
		l.sess.Close()
		l = nil
	}
	d.l, d.err = l, err
	close(d.done)
	if l != nil {
		c.log.Debug("agent connected", "agent_version", peer.Version, "protocol", peer.Protocol)
		go c.watch(l)
	}
}

// open dials the agent, shakes hands and starts the multiplexed session, with the local
// reader when the agent sent its workspace root.
func (c *Client) open(ctx context.Context) (*link, Local, Hello, error) {
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, nil, Hello{}, fmt.Errorf("%w: dial: %w", ErrUnavailable, err)
	}
	ours := Hello{Protocol: ProtocolVersion, Version: c.version, Egress: c.egress != nil}
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
	var inbox *connInbox
	if uc, ok := conn.(UnixConner); ok && c.egress != nil {
		ours.EgressConns, inbox = true, newConnInbox(uc.UnixConn())
	}
	peer, err := handshake(ctx, conn, rd, ours, c.live.HandshakeTimeout)
	if err != nil {
		if rights != nil {
			rights.discard()
		}
		conn.Close()
		if errors.Is(err, ErrUnresponsive) {
			c.unresponsive(err)
		}
		return nil, nil, Hello{}, err
	}
	l := newLink()
	cfg := YamuxConfig()
	cfg.EnableKeepAlive = false // the watchdog pings instead, and says when the agent went silent (watch)
	var under io.ReadWriteCloser = conn
	if inbox != nil {
		under, l.inbox = inboxConn{conn, inbox}, inbox
	}
	sess, err := yamux.Client(MuxConn(heardConn{under, l}), cfg)
	if err != nil {
		if rights != nil {
			rights.discard()
		}
		conn.Close()
		return nil, nil, Hello{}, fmt.Errorf("%w: start session: %v", ErrUnavailable, err)
	}
	l.sess = sess
	if c.egress != nil {
		go c.acceptEgress(l)
	}
	var local Local
	if rights != nil {
		if root := rights.takeRoot(); root != nil {
			local = c.openLocal(root, target)
		}
	}
	return l, local, peer, nil
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
// descriptor from it), bounded by ctx and by limit: an agent that does not say hello
// within limit is unresponsive.
func handshake(ctx context.Context, conn io.ReadWriteCloser, rd io.Reader, ours Hello, limit time.Duration) (Hello, error) {
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
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-ctx.Done():
		conn.Close()
		return Hello{}, fmt.Errorf("%w: handshake: %v", ErrUnavailable, ctx.Err())
	case <-t.C:
		conn.Close()
		return Hello{}, unresponsive("the connection is up but the agent did not answer the handshake within %s", limit)
	case r := <-ch:
		if r.err != nil && garbled(r.err) { // something answers, but not an agent
			return Hello{}, unresponsive("the agent's handshake does not parse: %v", r.err)
		}
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

// garbled reports whether a handshake failed on what came back (a frame that does not
// parse), not on the stream.
func garbled(err error) bool {
	var we *WireError
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	return errors.As(err, &we) || errors.As(err, &se) || errors.As(err, &te)
}

// drop forgets a broken connection so that the next call redials.
func (c *Client) drop(l *link) {
	c.forget(l)
	l.sess.Close()
}

// forget makes l no longer the current connection, if it was.
func (c *Client) forget(l *link) {
	c.mu.Lock()
	if c.cur == l {
		c.cur = nil
		c.closeLocal()
	}
	c.mu.Unlock()
}

// EventFunc receives a call's event frames (file data, stdout, stderr) in order.
type EventFunc func(event string, data []byte) error

// Call runs one operation: args are JSON-encoded, body is the request payload, events
// arrive through onEvent, and the done frame's result is decoded into result (if not nil).
//
// When the stream breaks, reads are retried on a fresh stream, and so are the
// operations that change files (write, remove, rename, mkdir, proc.kill): they carry a
// request id, and the agent answers a repeated id with its first outcome, so each is
// applied exactly once. A call whose events had begun to reach onEvent (a read's
// data) is not: its retry would give them again; ReadFile, which owns its buffer,
// starts such a read again from nothing. Commands (exec, proc.start) are never
// retried: they fail with an *InterruptedError that says whether the command had
// started.
//
// Every call has a deadline of its own (see callTimeout): the timeout it carries (a
// command's, a long poll's wait) plus a margin, or a default. A streamed read or archive
// is bounded instead by how long it may move nothing (StreamIdleTimeout). A call that
// passes its bound, or whose agent stops answering (see Liveness), ends with
// ErrUnresponsive, and the agent is told to stop it.
func (c *Client) Call(ctx context.Context, op string, args any, body []byte, onEvent EventFunc, result any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("encode %s args: %w", op, err)
	}
	ctx, cancel := withCallTimeout(ctx, op, callTimeout(op, args))
	defer cancel()
	req := &Header{Op: op, Args: raw}
	if localOp(op) && ctx.Value(agentOnly{}) == nil {
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
	// A retry starts the answer again from its beginning: once any of it reached
	// onEvent (a read's first data), the call can't be retried, or the caller would get
	// that part twice.
	var delivered atomic.Bool
	events := onEvent
	if onEvent != nil {
		events = func(ev string, data []byte) error {
			delivered.Store(true)
			return onEvent(ev, data)
		}
	}
	for attempt := 0; ; attempt++ {
		var started bool
		err = c.do(ctx, op, req, body, nil, events, result, &started)
		if err == nil {
			return nil
		}
		if command(op) && (errors.Is(err, errRetryable) || errors.Is(err, ErrUnresponsive)) {
			return &InterruptedError{Op: op, Started: started, Err: err}
		}
		if !errors.Is(err, errRetryable) {
			return err
		}
		if attempt >= maxRetries || !(idempotent(op) || req.ID != "") || delivered.Load() {
			return err
		}
		c.log.Debug("agent stream broke, retrying on a fresh one", "op", op, "attempt", attempt+1, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", op, ctxErr(ctx))
		case <-c.closed:
			return errClosed
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
	case OpPing, OpStat, OpRead, OpList, OpSearch, OpProcList, OpProcOutput, OpCheck, OpUsage, OpTTYList, OpTTYGet:
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
//
// The call ends early, and the agent is told to stop it, when ctx ends, the client
// closes, the connection is declared dead, or (for the streams of streamIdle) nothing
// moves for the stream's idle bound.
func (c *Client) do(ctx context.Context, op string, req *Header, body []byte, in io.Reader, onEvent EventFunc, result any, started *bool) error {
	l, err := c.session(ctx)
	if err != nil {
		return err
	}
	l.waiting.Add(1) // from here the watchdog pings a silent agent
	defer l.waiting.Add(-1)
	st, err := l.sess.OpenStream()
	if err != nil {
		return c.broken(l, fmt.Errorf("%w: %w: open stream: %v", ErrUnavailable, errRetryable, err))
	}
	defer st.Close()

	// stop ends the read below with reason (the first one wins), then tells the agent to
	// stop. The read is unblocked first: a stopped agent may never take the cancel frame.
	var (
		wmu      sync.Mutex // one writer at a time on the stream: the body sender, then the canceller
		sent     atomic.Bool
		stopOnce sync.Once
		stopMu   sync.Mutex
		stopErr  error
	)
	stop := func(reason error) {
		stopOnce.Do(func() {
			stopMu.Lock()
			stopErr = reason
			stopMu.Unlock()
			_ = st.SetReadDeadline(time.Now())
			if !sent.Load() { // the request is stuck on its way: give it up
				_ = st.SetWriteDeadline(time.Now())
			}
			go func() {
				wmu.Lock()
				defer wmu.Unlock()
				_ = WriteFrame(st, &Header{Cancel: true}, nil)
			}()
		})
	}
	stopped := func() error {
		stopMu.Lock()
		defer stopMu.Unlock()
		return stopErr
	}
	idle := streamIdle(op)
	var idleTimer *time.Timer
	if idle > 0 {
		idleTimer = time.AfterFunc(idle, func() {
			stop(unresponsive("%s moved nothing for %s", op, idle))
		})
		defer idleTimer.Stop()
	}
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case <-finished:
		case <-ctx.Done():
			stop(fmt.Errorf("%s: %w", op, ctxErr(ctx)))
		case <-c.closed:
			stop(errClosed)
		case <-l.dead:
			stop(l.err)
		}
	}()

	wmu.Lock()
	err = WriteFrame(st, req, body)
	sent.Store(true)
	wmu.Unlock()
	if err != nil {
		if errors.Is(err, ErrTooLarge) { // nothing was sent, and the same request never fits
			return fmt.Errorf("%s: %w", op, err)
		}
		if reason := stopped(); reason != nil {
			return reason
		}
		return c.broken(l, fmt.Errorf("%w: %w: send %s: %v", ErrUnavailable, errRetryable, op, err))
	}
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
				if idleTimer != nil && stopped() == nil {
					idleTimer.Reset(idle) // the upload moves
				}
			}
		}()
	}

	for {
		if idleTimer != nil {
			idleTimer.Reset(idle)
		}
		h, data, err := ReadFrame(st)
		if idleTimer != nil {
			idleTimer.Stop()
		}
		if err != nil {
			if reason := stopped(); reason != nil {
				return reason
			}
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w", op, ctxErr(ctx))
			}
			if l.sess.IsClosed() || closedSoon(l.sess) {
				return c.broken(l, fmt.Errorf("%w: %w: %s: %v", ErrUnavailable, errRetryable, op, err))
			}
			return fmt.Errorf("%w: %s: read answer: %v", ErrUnavailable, op, err)
		}
		if done, err := takeFrame(h, data, op, onEvent, result, started); done || err != nil {
			return err
		}
	}
}

// broken is the error of a call whose connection l broke under it: why l was declared
// dead or the client closed, if so (nothing to retry), else err, and l is dropped.
func (c *Client) broken(l *link, err error) error {
	if e := l.deadErr(); e != nil {
		return e
	}
	select {
	case <-c.closed:
		return errClosed
	default:
	}
	c.drop(l)
	return err
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
// It is bounded like Call.
func (c *Client) CallStream(ctx context.Context, op string, args any, body io.Reader, onEvent EventFunc, result any) error {
	raw, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("encode %s args: %w", op, err)
	}
	ctx, cancel := withCallTimeout(ctx, op, callTimeout(op, args))
	defer cancel()
	return c.callStream(ctx, op, raw, body, onEvent, result)
}
