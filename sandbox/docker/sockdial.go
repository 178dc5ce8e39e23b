package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
)

// errNotSocket: what sits at the agent's socket name is not a socket (a link, a file,
// a FIFO, a directory the agent planted there). cws never follows or opens it.
var errNotSocket = errors.New("not a unix socket")

// dialAgentSocket connects to the agent socket in a container's socket directory
// without following anything the agent may have planted there. The agent can write in
// that directory (it binds its socket in it), so its entries are untrusted: a symlink
// to /var/run/docker.sock or to another session's socket must never be connected to.
//
//   - The directory is opened with O_NOFOLLOW: it sits in cws's own 0700 directory,
//     which the agent cannot reach (it sees only the bind mount), so it cannot be
//     swapped for a link; the flag makes sure of it.
//   - agent.sock is opened relative to it with O_PATH|O_NOFOLLOW: a symlink yields the
//     link itself, never its target; fstat must then say S_IFSOCK.
//   - connect goes to /proc/self/fd/N, which names that very inode: nothing the agent
//     does after the check (rename, unlink, a new link) changes what is dialed.
func dialAgentSocket(ctx context.Context, socketDir, key string) (net.Conn, error) {
	if !socketKeyRE.MatchString(key) {
		return nil, fmt.Errorf("socket directory key %q is malformed", key)
	}
	dir := filepath.Join(socketDir, key)
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, agent.SocketName, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s/%s: %w", dir, agent.SocketName, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s/%s: %w", dir, agent.SocketName, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, fmt.Errorf("%s/%s: %w (mode %#o): refused", dir, agent.SocketName, errNotSocket, st.Mode&unix.S_IFMT)
	}
	var dialer net.Dialer
	return dialer.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}

// socketAuthTimeout bounds the secret handshake when ctx has no earlier deadline. A
// live agent answers in a millisecond; one that does not (stopped, wedged) costs this
// much before the exec stream is tried.
const socketAuthTimeout = 5 * time.Second

// dialAgent dials a container's agent socket and proves it with the container's
// secret (agent.AuthenticateAgent). The returned connection is ready for the Hello.
func dialAgent(ctx context.Context, socketDir string, ss socketSetup) (net.Conn, error) {
	conn, err := dialAgentSocket(ctx, socketDir, ss.key)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(socketAuthTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	if err := agent.AuthenticateAgent(conn, []byte(ss.secret)); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("dial agent socket: got a %T", conn)
	}
	return &socketConn{Conn: uc, uc: uc}, nil
}

// socketConn is a connection to an agent's socket. Like the exec stream, it may be
// closed more than once, and Close never fails. The agent client may take the
// workspace root from it (agent.UnixConner).
type socketConn struct {
	net.Conn
	uc   *net.UnixConn
	once sync.Once

	target    agent.LocalTarget // the workspace, for local reads (see localTarget)
	hasTarget bool
}

// UnixConn and LocalTarget implement agent.UnixConner.
func (c *socketConn) UnixConn() *net.UnixConn { return c.uc }

func (c *socketConn) LocalTarget() (agent.LocalTarget, bool) { return c.target, c.hasTarget }

func (c *socketConn) Close() error {
	c.once.Do(func() { c.Conn.Close() })
	return nil
}
