package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Local reads. On the socket path the host and the agent share a kernel, so the agent
// can hand the host its workspace root as a descriptor (SCM_RIGHTS, with its Hello).
// The host then answers reads and stats itself, running the agent's own code (package
// server) on that descriptor: no wake-up of the agent's process, no trip through the
// multiplexer. Everything that changes the workspace, runs a command or keeps state
// still goes to the agent.
//
// Nothing the peer says is trusted: whatever sits at the socket may be a process of
// the workspace's user posing as the agent. The host takes the descriptor only if it is
// the very directory it knows as the workspace (device and inode of the volume, from
// the engine), and reads as the identity the container was made with (LocalTarget),
// never one the peer names.

// LocalTarget is what the host knows of a workspace, from the engine: its directory
// as the agent sees it, the uid:gid its tools run as, and the device and inode of its
// root on the host.
type LocalTarget struct {
	Dir      string
	UID, GID int
	Dev, Ino uint64
}

// Local answers some calls in the host's own process.
type Local interface {
	// Answer runs one call and writes its encoded answer frames to w as they come
	// (events, then the done frame; whole frames in each Write). ok false, with nothing
	// written: the call must go to the agent (an operation Local does not serve, or a
	// failure only the agent can judge, such as a permission refused to the host).
	Answer(ctx context.Context, h *Header, body []byte, w io.Writer) (ok bool)
	Close() error
}

// LocalReader is a Local that also answers a read as a Go call: the arguments and
// result as they are, the data written to w, no frames encoded and decoded. ok false,
// with nothing written: the read must go to the agent, as with Answer.
type LocalReader interface {
	ReadLocal(ctx context.Context, a ReadArgs, w io.Writer) (res ReadResult, ok bool, err error)
}

// LocalOpener makes a Local from the workspace root the agent sent, checked against
// target. It takes ownership of root.
type LocalOpener func(root *os.File, target LocalTarget) (Local, error)

// WithLocal lets a client answer reads and stats locally where the agent sends its
// workspace root (a unix socket in the same kernel).
func (c *Client) WithLocal(open LocalOpener) *Client {
	c.localOpen = open
	return c
}

// UnixConner is a dialed connection that is a unix socket underneath, to a workspace
// the dialer knows (ok false: it does not, and reads go to the agent).
type UnixConner interface {
	UnixConn() *net.UnixConn
	LocalTarget() (t LocalTarget, ok bool)
}

// localOp says which operations Local may answer: the reads that keep no state.
func localOp(op string) bool {
	return op == OpRead || op == OpStat
}

// rightsReader reads the Hello from a unix socket and keeps the descriptor that comes
// with it. A peer may attach at most one; extra ones are closed.
type rightsReader struct {
	c *net.UnixConn

	mu     sync.Mutex // the handshake's reader may outlive a handshake that timed out
	root   *os.File
	closed bool
}

// takeRoot returns the descriptor received, if any; the reader keeps nothing after.
func (r *rightsReader) takeRoot() *os.File {
	r.mu.Lock()
	defer r.mu.Unlock()
	root := r.root
	r.root, r.closed = nil, true
	return root
}

// discard closes what was received and whatever still comes.
func (r *rightsReader) discard() {
	if root := r.takeRoot(); root != nil {
		root.Close()
	}
}

func (r *rightsReader) Read(p []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, oob)
	if oobn > 0 {
		r.take(oob[:oobn])
	}
	if n < 0 { // recvmsg's -1 on an error: a Reader never returns less than 0
		n = 0
	}
	return n, err
}

func (r *rightsReader) take(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		r.mu.Lock()
		for _, fd := range fds {
			if r.root == nil && !r.closed && fd >= 0 {
				r.root = os.NewFile(uintptr(fd), "agent workspace root")
			} else {
				unix.Close(fd)
			}
		}
		r.mu.Unlock()
	}
}

// CheckRoot makes sure a descriptor the agent sent is the workspace's root directory:
// the same device and inode as the engine's workspace directory.
func CheckRoot(root *os.File, t LocalTarget) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(root.Fd()), &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return errors.New("the descriptor the agent sent is not a directory")
	}
	if uint64(st.Dev) != t.Dev || st.Ino != t.Ino {
		return fmt.Errorf("the directory the agent sent (device %d, inode %d) is not the workspace (device %d, inode %d)", st.Dev, st.Ino, t.Dev, t.Ino)
	}
	return nil
}

// readLocal answers a read with a LocalReader when there is one and it can (ok false:
// send it to the agent; tried: the LocalReader declined it, and so would Answer). Its
// error is what the agent's answer would have been.
func (c *Client) readLocal(ctx context.Context, a ReadArgs, w io.Writer) (res ReadResult, ok, tried bool, err error) {
	if c.localOpen == nil {
		return res, false, false, nil
	}
	if _, err := c.session(ctx); err != nil { // a first call connects, and may bring the root
		return res, true, false, err
	}
	c.mu.Lock()
	lr, _ := c.local.(LocalReader)
	c.mu.Unlock()
	if lr == nil {
		return res, false, false, nil
	}
	ctx, cancel := withCallTimeout(ctx, OpRead, callTimeout(OpRead, a))
	defer cancel()
	res, ok, err = lr.ReadLocal(ctx, a, w)
	return res, ok, !ok, err
}

// agentOnly marks a call's context: it goes to the agent, not to Local (a read the
// LocalReader declined).
type agentOnly struct{}

// callLocal answers a call with Local when it can (ok false: send it to the agent).
func (c *Client) callLocal(ctx context.Context, op string, req *Header, body []byte, onEvent EventFunc, result any) (err error, ok bool) {
	c.mu.Lock()
	l := c.local
	c.mu.Unlock()
	if l == nil {
		return nil, false
	}
	sink := &frameSink{op: op, onEvent: onEvent, result: result}
	if !l.Answer(ctx, req, body, sink) {
		return nil, false
	}
	if !sink.done && sink.err == nil {
		sink.err = fmt.Errorf("%s: the local answer ended without its done frame", op)
	}
	return sink.err, true
}

// frameSink takes a local answer's frames as they are written, as a stream's reader
// would.
type frameSink struct {
	op      string
	onEvent EventFunc
	result  any
	done    bool
	err     error
}

func (s *frameSink) Write(p []byte) (int, error) {
	if s.done || s.err != nil {
		return 0, io.ErrClosedPipe
	}
	r := bytes.NewReader(p)
	for r.Len() > 0 {
		h, data, err := ReadFrame(r)
		if err != nil {
			s.err = fmt.Errorf("%s: local answer: %w", s.op, err)
			return 0, s.err
		}
		if s.done, s.err = takeFrame(h, data, s.op, s.onEvent, s.result, new(bool)); s.done || s.err != nil {
			if !s.done {
				return 0, s.err // the event handler failed: the reader stops
			}
			break
		}
	}
	return len(p), nil
}
