package docker

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/cwsdev/cws/sandbox"
)

// Attach opens the bridge to a sandbox's agent: one `docker exec` of
// `/.cws/cws-agent attach`, as the tool uid:gid, whose stdin and stdout carry the agent
// protocol. ctx bounds only the setup; the stream lives until Close or until the
// bridge exits (reads then return io.EOF). The bridge's stderr goes to the debug log.
func (d *Driver) Attach(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	if s := d.preopened(id); s != nil { // a pooled container's, opened before its hand-out
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
	exec, err := d.cli.ContainerExecCreate(ctx, c.ID, container.ExecOptions{
		Cmd:          []string{agentPath, "attach"},
		User:         toolUser(c),
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
