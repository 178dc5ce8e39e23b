package agent

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
)

// Liveness says how long the client waits on an agent that has stopped answering: one
// stopped with SIGSTOP, wedged, or something else that holds its stream open and says
// nothing (or nonsense). A silent agent is declared unresponsive, never waited on: the
// calls waiting on it end with ErrUnresponsive, its connection is dropped, and
// OnUnresponsive is told, so that the host can heal the sandbox. Zero fields take the
// defaults.
type Liveness struct {
	// StallAfter is how long a connection may bring nothing from the agent while a call
	// waits on it before the client pings the agent on that connection (a command that
	// runs for minutes without output is fine: the agent answers the ping). Zero means
	// DefaultStallAfter.
	StallAfter time.Duration
	// IdlePing is how often an idle connection (no call waits on it) that brings nothing
	// is pinged, so that an agent that stopped is noticed, and healed, before the next
	// call needs it. It stands in for yamux's keepalive on the host's end. Zero means
	// DefaultIdlePing.
	IdlePing time.Duration
	// PingTimeout is how long that ping may take. An agent that does not answer it in
	// time is unresponsive. Zero means DefaultPingTimeout.
	PingTimeout time.Duration
	// HandshakeTimeout bounds the handshake on a fresh connection: the transport is up
	// (the socket accepted, the exec bridge runs) but the agent must still say hello. An
	// agent that does not is unresponsive. Zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// ConnectTimeout bounds one dial and its handshake together (the dial may start a
	// stopped sandbox first). Zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// OnUnresponsive is called, in a goroutine of its own, each time the client declares
	// the agent unresponsive, with the reason (at most once per connection). Nil: no one
	// is told.
	OnUnresponsive func(err error)
}

// Liveness defaults. A stopped agent is noticed within StallAfter+PingTimeout (plus a
// tick) of the last thing it said, while a call waits on it.
const (
	DefaultStallAfter       = 5 * time.Second
	DefaultIdlePing         = 20 * time.Second
	DefaultPingTimeout      = 5 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultConnectTimeout   = 30 * time.Second
)

func (l Liveness) withDefaults() Liveness {
	if l.StallAfter <= 0 {
		l.StallAfter = DefaultStallAfter
	}
	if l.IdlePing <= 0 {
		l.IdlePing = DefaultIdlePing
	}
	if l.PingTimeout <= 0 {
		l.PingTimeout = DefaultPingTimeout
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if l.ConnectTimeout <= 0 {
		l.ConnectTimeout = DefaultConnectTimeout
	}
	return l
}

// WithLiveness sets how the client notices an agent that stopped answering.
func (c *Client) WithLiveness(l Liveness) *Client {
	c.live = l.withDefaults()
	return c
}

// unresponsive is the error of a call whose agent was declared unresponsive.
func unresponsive(format string, a ...any) error {
	return fmt.Errorf("%w: %w: %s", ErrUnavailable, ErrUnresponsive, fmt.Sprintf(format, a...))
}

// link is one connection to the agent: its yamux session, what the watchdog needs to
// tell a silent agent from a busy one, and, once it is declared dead, why.
type link struct {
	sess    *yamux.Session
	heard   atomic.Int64 // when bytes last came from the agent (UnixNano)
	waiting atomic.Int32 // calls waiting on the agent now

	once sync.Once
	dead chan struct{} // closed when the link is declared dead
	err  error         // why; set before dead closes

	inbox *connInbox // the egress connections the agent sent (egressconn.go); nil: none come
}

func newLink() *link {
	l := &link{dead: make(chan struct{})}
	l.heard.Store(time.Now().UnixNano())
	return l
}

// deadErr is why the link was declared dead, or nil.
func (l *link) deadErr() error {
	select {
	case <-l.dead:
		return l.err
	default:
		return nil
	}
}

// heardConn notes when the agent last sent anything on the connection under a link.
type heardConn struct {
	io.ReadWriteCloser
	l *link
}

// Watched makes heardConn a ReadWatcher: writes may go to the connection under it.
func (h heardConn) Watched() io.ReadWriteCloser { return h.ReadWriteCloser }

func (h heardConn) Read(p []byte) (int, error) {
	n, err := h.ReadWriteCloser.Read(p)
	if n > 0 {
		h.l.heard.Store(time.Now().UnixNano())
	}
	return n, err
}

// watch pings the agent when calls wait on a link that has brought nothing for
// StallAfter (an idle link: IdlePing), and declares the link dead when the ping goes
// unanswered. It ends with the link.
func (c *Client) watch(l *link) {
	every := min(max(c.live.StallAfter/5, 10*time.Millisecond), time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-l.sess.CloseChan():
			return
		case <-l.dead:
			return
		case <-tick.C:
		}
		quiet := c.live.StallAfter
		if l.waiting.Load() == 0 {
			quiet = c.live.IdlePing
		}
		if time.Since(time.Unix(0, l.heard.Load())) < quiet {
			continue
		}
		if err := c.probe(l); err != nil {
			c.declareDead(l, unresponsive("it did not answer a ping within %s after %s of silence: %v",
				c.live.PingTimeout, quiet, err))
			return
		}
	}
}

// probe pings the agent on l: nil when it answers (with anything well-formed) within
// PingTimeout, or when the link closes meanwhile (its calls see that themselves).
func (c *Client) probe(l *link) error {
	res := make(chan error, 1)
	go func() {
		st, err := l.sess.OpenStream()
		if err != nil {
			res <- err
			return
		}
		defer st.Close()
		_ = st.SetDeadline(time.Now().Add(c.live.PingTimeout))
		if err := WriteFrame(st, &Header{Op: OpPing, Args: []byte("{}")}, nil); err != nil {
			res <- err
			return
		}
		for {
			h, _, err := ReadFrame(st)
			if err != nil || h.Done {
				res <- err
				return
			}
		}
	}()
	t := time.NewTimer(c.live.PingTimeout)
	defer t.Stop()
	select {
	case err := <-res:
		if err != nil && l.sess.IsClosed() {
			return nil
		}
		return err
	case <-l.sess.CloseChan():
		return nil
	case <-t.C:
		return errors.New("timed out")
	}
}

// declareDead marks l dead with err (the first reason wins): the client forgets it,
// its calls end with err, its connection closes, and OnUnresponsive is told.
func (c *Client) declareDead(l *link, err error) {
	first := false
	l.once.Do(func() {
		l.err = err
		close(l.dead)
		first = true
	})
	if !first {
		return
	}
	c.log.Warn("the agent stopped answering; its connection is dropped", "err", err)
	c.forget(l)
	go l.sess.Close()
	c.unresponsive(err)
}

// unresponsive tells OnUnresponsive, if anyone listens.
func (c *Client) unresponsive(err error) {
	if f := c.live.OnUnresponsive; f != nil {
		go f(err)
	}
}
