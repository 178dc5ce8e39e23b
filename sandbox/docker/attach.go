package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
)

// Attach opens a stream to a sandbox's agent. On the socket path (see Transport) it
// dials the agent's socket in the container's socket directory and proves it with the
// container's secret; if that fails for any reason (the agent not listening yet, a
// container made without the directory, something planted at the socket's name), it
// falls back to the exec stream, so a session never breaks because of the fast path.
//
// The exec stream is one `docker exec` of `/.cws/cws-agent attach`, as the tool
// uid:gid, whose stdin and stdout carry the agent protocol. ctx bounds only the setup;
// the stream lives until Close or until the bridge exits (reads then return io.EOF).
// The bridge's stderr goes to the debug log.
func (d *Driver) Attach(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	if s := d.pool.Preopened(id); s != nil { // a pooled container's, opened before its hand-out
		return s, nil
	}
	c, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, notFound("attach sandbox", id, err)
	}
	if !managed(c) {
		return nil, fmt.Errorf("attach sandbox %s: %w: container is not managed by cws", id, ErrNotFound)
	}
	if deletedName(c.Name) {
		return nil, fmt.Errorf("attach sandbox %s: %w: it is being removed", id, ErrNotFound)
	}
	if c.State == nil || !c.State.Running || c.State.Restarting || c.State.Paused {
		return nil, fmt.Errorf("attach sandbox %s: %w", id, ErrStopped)
	}
	if ss, ok := socketOf(c.Config.Labels, c.Config.Env); ok && d.dialSockets {
		conn, err := d.attachSocket(ctx, c, ss)
		if err == nil {
			return conn, nil
		}
		lvl := slog.LevelDebug
		if errors.Is(err, errNotSocket) || errors.Is(err, agent.ErrAuth) {
			lvl = slog.LevelWarn // something that is not the agent sits at its socket
		}
		d.log.Log(ctx, lvl, "agent socket unusable, using the exec stream", "container", c.ID, "err", err)
	}
	return d.attachExec(ctx, c)
}

// attachExec opens the exec stream to the agent of c.
func (d *Driver) attachExec(ctx context.Context, c container.InspectResponse) (io.ReadWriteCloser, error) {
	id := c.ID
	exec, err := d.cli.ContainerExecCreate(ctx, c.ID, container.ExecOptions{
		Cmd:          []string{agentPath, "attach"},
		User:         agentUser(c), // the agent refuses the tool uid on its socket
		WorkingDir:   sandbox.WorkspaceDir,
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return nil, notFound("attach sandbox", id, err)
	}
	hj, err := d.cli.ContainerExecAttach(ctx, exec.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("attach sandbox %s: exec attach: %w", id, err)
	}
	pr, pw := io.Pipe()
	b := &bridge{hj: hj, pr: pr}
	log := d.log.With("container", c.ID, "exec", exec.ID)
	go func() {
		stderr := newLogWriter(log, "agent bridge stderr")
		_, err := stdcopy.StdCopy(pw, stderr, hj.Reader)
		stderr.Flush()
		if err == nil {
			err = io.EOF
		}
		log.Debug("agent bridge ended", "err", err)
		pw.CloseWithError(err)
	}()
	return b, nil
}

// A container that started less than socketYoung ago may not have its agent listening
// yet: its socket is awaited up to socketWait before falling back (the exec stream's
// bridge would wait for the same agent, so waiting costs nothing when the socket path
// works; on a loaded host an agent's start can take seconds). An older one is dialed
// once.
const (
	socketYoung = time.Minute
	socketWait  = 15 * time.Second
)

// attachSocket dials the agent socket of c, waiting for it on a young container.
func (d *Driver) attachSocket(ctx context.Context, c container.InspectResponse, ss socketSetup) (io.ReadWriteCloser, error) {
	until := time.Now()
	if started, err := time.Parse(time.RFC3339Nano, c.State.StartedAt); err == nil && time.Since(started) < socketYoung {
		until = until.Add(socketWait)
	}
	for {
		conn, err := dialAgent(ctx, d.socketDir, ss)
		if err == nil {
			if sc, ok := conn.(*socketConn); ok {
				sc.target, sc.hasTarget = localTarget(c)
			}
			return conn, nil
		}
		notYet := errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED)
		if !notYet || time.Now().After(until) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// bridge is the attached exec: reads come demultiplexed from its stdout, writes go
// straight to its stdin.
type bridge struct {
	hj   types.HijackedResponse
	pr   *io.PipeReader
	once sync.Once
}

func (b *bridge) Read(p []byte) (int, error)  { return b.pr.Read(p) }
func (b *bridge) Write(p []byte) (int, error) { return b.hj.Conn.Write(p) }

// Close ends the stream: it half-closes stdin (the bridge sees EOF and exits), then
// closes the connection. It is safe to call more than once, and never fails: the
// stream may already be gone, which is what the caller wants.
func (b *bridge) Close() error {
	b.once.Do(func() {
		_ = b.hj.CloseWrite()
		b.hj.Close()
		b.pr.CloseWithError(io.ErrClosedPipe)
	})
	return nil
}

// localTarget is what cws knows of c's workspace for local reads (agent.LocalTarget):
// its workspace volume's directory on this host (device and inode) and the uid:gid its
// tools run as. ok false when cws cannot see that directory (cws in a container without
// the engine's volumes, a tmpfs workspace): reads then go to the agent.
func localTarget(c container.InspectResponse) (t agent.LocalTarget, ok bool) {
	uid, gid, ok := parseUser(toolUser(c))
	if !ok || uid == 0 || gid == 0 {
		return t, false // a file-system uid 0 would keep cws's file capabilities
	}
	for _, m := range c.Mounts {
		if m.Destination != sandbox.WorkspaceDir || m.Type != "volume" || m.Source == "" {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(m.Source, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return t, false
		}
		return agent.LocalTarget{Dir: sandbox.WorkspaceDir, UID: uid, GID: gid, Dev: uint64(st.Dev), Ino: st.Ino}, true
	}
	return t, false
}

// parseUser reads a numeric "uid:gid".
func parseUser(u string) (uid, gid int, ok bool) {
	a, b, found := strings.Cut(u, ":")
	if !found {
		return 0, 0, false
	}
	uid, err1 := strconv.Atoi(a)
	gid, err2 := strconv.Atoi(b)
	return uid, gid, err1 == nil && err2 == nil && uid >= 0 && gid >= 0
}
