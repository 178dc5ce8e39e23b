package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
)

// execOutputMax bounds the stdout Exec keeps; the rest is read and dropped.
const execOutputMax = 4 << 20

// Exec runs argv in a sandbox with a plain `docker exec` and returns its stdout (at
// most 4 MiB) and exit code. This is the slow path (tens of milliseconds per call),
// for benchmarks and `cws doctor`; tools go through Attach and the agent. user is a
// uid:gid; empty means the sandbox's tool user ("0:0" asks for root). stderr goes to
// the debug log. If ctx ends first, Exec returns its error, but the process keeps
// running in the container: Docker cannot kill an exec.
func (d *Driver) Exec(ctx context.Context, id string, argv []string, user string) ([]byte, int, error) {
	if len(argv) == 0 {
		return nil, -1, fmt.Errorf("exec in sandbox %s: %w: empty argv", id, ErrInvalid)
	}
	c, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, -1, notFound("exec in sandbox", id, err)
	}
	if !managed(c) {
		return nil, -1, fmt.Errorf("exec in sandbox %s: %w: container is not managed by cws", id, ErrNotFound)
	}
	if user == "" {
		user = toolUser(c)
	}
	var env []string
	if user != agentUser(c) {
		// An exec inherits the container's environment: only the agent may hold its secret.
		env = []string{agent.EnvSecret + "="}
	}
	exec, err := d.cli.ContainerExecCreate(ctx, c.ID, container.ExecOptions{
		Cmd:          argv,
		User:         user,
		Env:          env,
		WorkingDir:   sandbox.WorkspaceDir,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return nil, -1, notFound("exec in sandbox", id, err)
	}
	hj, err := d.cli.ContainerExecAttach(ctx, exec.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, -1, fmt.Errorf("exec in sandbox %s: attach: %w", id, err)
	}
	defer hj.Close()
	stop := context.AfterFunc(ctx, hj.Close) // unblocks the copy below
	defer stop()

	stdout := &capped{max: execOutputMax}
	stderr := newLogWriter(d.log.With("container", c.ID, "argv0", argv[0]), "exec stderr")
	_, err = stdcopy.StdCopy(stdout, stderr, hj.Reader)
	stderr.Flush()
	if ctx.Err() != nil {
		return stdout.Bytes(), -1, fmt.Errorf("exec in sandbox %s: %w", id, ctx.Err())
	}
	if err != nil {
		return stdout.Bytes(), -1, fmt.Errorf("exec in sandbox %s: read output: %w", id, err)
	}
	code, err := d.execExitCode(ctx, exec.ID)
	if err != nil {
		return stdout.Bytes(), -1, fmt.Errorf("exec in sandbox %s: %w", id, err)
	}
	return stdout.Bytes(), code, nil
}

// execExitCode waits for Docker to record the exec's exit: the output stream can end
// a moment before the exec is marked as no longer running.
func (d *Driver) execExitCode(ctx context.Context, execID string) (int, error) {
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		st, err := d.cli.ContainerExecInspect(ctx, execID)
		if err != nil {
			return -1, fmt.Errorf("inspect exec: %w", err)
		}
		if !st.Running {
			return st.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// capped is a buffer that keeps the first max bytes written and discards the rest.
type capped struct {
	bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

var _ io.Writer = (*capped)(nil)
