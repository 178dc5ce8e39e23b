package agent

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Egress connections handed over. Where the host reaches the agent on a unix socket
// (the same kernel), an egress connection need not ride the multiplexer at all: the
// agent sends the host the descriptor of the connection the workspace process made
// to its proxy (SCM_RIGHTS), and the host serves that socket itself. A download then
// costs what the proxy's own copy costs: no agent, no frames, no windows. Over any
// other transport, or with a host that does not ask for it, the connection's bytes
// ride its stream as before.
//
// The protocol, for one connection:
//  1. The agent sends the descriptor attached to a frame the host's yamux ignores
//     (ConnSender), then opens the OpEgress stream with EgressArgs naming the
//     connection by its workspace end's address.
//  2. The host, having read the descriptor before the stream's first byte (a unix
//     socket delivers descriptors in order with the bytes), takes the one of that
//     address, checks it, and answers EgressAnswer.
//  3. Taken: the agent closes its copy and the stream, and the host serves the socket.
//     Not taken: the stream carries the connection, as without the handover.
//
// Nothing the agent sends is trusted: the host takes only a connected TCP socket
// whose peer is the address the stream names, and holds at most maxPendingConns that
// no stream claimed. Such a socket reaches nothing the stream did not: it belongs to
// the sandbox's network namespace, and cws only reads and writes it.

// EgressArgs are an OpEgress stream's request arguments where the agent sent the
// connection's descriptor: Conn is the address of the workspace process's end (the
// accepted connection's remote address). Empty: the stream carries the connection.
type EgressArgs struct {
	Conn string `json:"conn,omitempty"`
}

// EgressAnswer is the host's answer to an OpEgress stream with EgressArgs.Conn: Taken,
// the host serves the descriptor and the stream ends; else the stream carries the
// connection.
type EgressAnswer struct {
	Taken bool `json:"taken"`
}

// ConnSender is what MuxConn returns over a unix socket: SendConn sends a socket's
// descriptor to the peer, after every frame queued before it, attached to a window
// update of stream 0 (no stream: the peer's yamux drops it).
type ConnSender interface {
	SendConn(conn syscall.Conn) error
}

// errNoRights: the connection under the multiplexer can't carry descriptors.
var errNoRights = errors.New("the agent connection is not a unix socket")

// handoverFrame is the frame a descriptor rides: a window update (type 1) of stream
// 0, with no flags and no delta.
var handoverFrame = [yamuxHeaderSize]byte{yamuxVersion, yamuxTypeWindow}

// SendConn implements ConnSender. It waits for a frame boundary and for the queued
// frames to go out, so the descriptor arrives before any frame written after it.
func (c *frameConn) SendConn(conn syscall.Conn) error {
	uc, ok := c.vec.(*net.UnixConn)
	if !ok {
		return errNoRights
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.boundaryWaiters++
	for (c.hdr != 0 || len(c.out) > 0 || c.flushing) && c.werr == nil && !c.closed {
		c.kickFlusher()
		c.drained.Wait()
	}
	c.boundaryWaiters--
	if c.werr != nil {
		return c.werr
	}
	if c.raw {
		return errNoRights
	}
	if c.closed {
		return net.ErrClosed
	}
	var n int
	var werr error
	if err := rc.Control(func(fd uintptr) {
		n, _, werr = uc.WriteMsgUnix(handoverFrame[:], unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	if werr == nil && n < len(handoverFrame) {
		_, werr = uc.Write(handoverFrame[n:])
	}
	if werr != nil {
		c.werr = werr
		go c.ReadWriteCloser.Close()
	}
	return werr
}

// inboxConn reads the connection under the host's session through its connInbox;
// writes go to the connection itself.
type inboxConn struct {
	io.ReadWriteCloser
	in *connInbox
}

func (c inboxConn) Read(p []byte) (int, error) { return c.in.Read(p) }

// Watched makes inboxConn a ReadWatcher, so that MuxConn writes to the socket under it.
func (c inboxConn) Watched() io.ReadWriteCloser { return c.ReadWriteCloser }

// maxPendingConns bounds the descriptors the host holds that no stream claimed yet;
// past it the oldest is closed.
const maxPendingConns = 64

// connInbox takes the descriptors the agent sends on a unix socket (the reader under
// the host's yamux session) and keeps the egress connections among them for the
// streams that claim them.
type connInbox struct {
	uc  *net.UnixConn
	oob []byte

	mu      sync.Mutex
	pending []*net.TCPConn
	closed  bool
}

func newConnInbox(uc *net.UnixConn) *connInbox {
	return &connInbox{uc: uc, oob: make([]byte, unix.CmsgSpace(4*maxRightsPerRead))}
}

// maxRightsPerRead is how many descriptors one read takes; the kernel closes any more
// (the agent sends one per frame).
const maxRightsPerRead = 8

// Read reads the connection's bytes, keeping the descriptors that come with them.
func (in *connInbox) Read(p []byte) (int, error) {
	n, oobn, _, _, err := in.uc.ReadMsgUnix(p, in.oob)
	if oobn > 0 {
		in.take(in.oob[:oobn])
	}
	return max(n, 0), err // a failed read may say -1
}

func (in *connInbox) take(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			c, err := tcpFromFD(fd)
			if err != nil {
				continue // not a connected TCP socket: dropped
			}
			in.add(c)
		}
	}
}

// tcpFromFD makes a connected TCP socket of fd, which it closes (the connection has a
// copy of its own).
func tcpFromFD(fd int) (*net.TCPConn, error) {
	f := os.NewFile(uintptr(fd), "egress connection")
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, errors.New("not a socket")
	}
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != unix.SOCK_STREAM {
		return nil, errors.New("not a stream socket")
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok || tc.RemoteAddr() == nil {
		c.Close()
		return nil, fmt.Errorf("a %T, not a connected TCP socket", c)
	}
	return tc, nil
}

func (in *connInbox) add(c *net.TCPConn) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		c.Close()
		return
	}
	if len(in.pending) >= maxPendingConns {
		in.pending[0].Close()
		in.pending = in.pending[1:]
	}
	in.pending = append(in.pending, c)
}

// claim returns the pending connection whose remote address is addr, or nil.
func (in *connInbox) claim(addr string) *net.TCPConn {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, c := range in.pending {
		if c.RemoteAddr().String() == addr {
			in.pending = append(in.pending[:i], in.pending[i+1:]...)
			return c
		}
	}
	return nil
}

// close closes what no stream claimed; later descriptors are closed as they come.
func (in *connInbox) close() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.closed = true
	for _, c := range in.pending {
		c.Close()
	}
	in.pending = nil
}
