package docker

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
)

// Start starts a stopped sandbox (after an engine restart or a docker stop), or
// unpauses a paused one. Starting a running one is a no-op.
func (d *Driver) Start(ctx context.Context, id string) error {
	c, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return notFound("start sandbox", id, err)
	}
	if c.State != nil && c.State.Paused {
		if err := d.cli.ContainerUnpause(ctx, c.ID); err != nil {
			// Unpaused by someone else meanwhile (the reconciler, another replica)?
			if now, ierr := d.cli.ContainerInspect(ctx, c.ID); ierr == nil && now.State != nil && !now.State.Paused {
				return nil
			}
			return notFound("unpause sandbox", id, err)
		}
		return nil
	}
	d.restoreSocketDir(c)
	// The image's ID: its tag may have been removed since, the container keeps the image.
	if err := d.startContainer(ctx, c.ID, c.Image); err != nil {
		return notFound("start sandbox", id, err)
	}
	return nil
}

// Stop stops a sandbox: SIGTERM to the agent, then SIGKILL after Config.StopTimeout.
// The workspace volume stays; Start brings the sandbox back. Stopping a stopped one is
// a no-op.
func (d *Driver) Stop(ctx context.Context, id string) error {
	secs := int(d.stopTimeout.Round(time.Second) / time.Second)
	if err := d.cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs}); err != nil {
		return notFound("stop sandbox", id, err)
	}
	return nil
}

// Suspend stops a sandbox and keeps its workspace volume (Stop): a suspended session
// costs its disk and nothing else, and Start brings it back.
func (d *Driver) Suspend(ctx context.Context, id string) error {
	d.pool.DropStream(id)
	return d.Stop(ctx, id)
}

// RemoveSessionDisk removes a session's workspace volume that no container uses (what
// an archive cut short left; workspace.SessionDiskRemover). A volume in use stays.
func (d *Driver) RemoveSessionDisk(ctx context.Context, session string) error {
	if err := d.cli.VolumeRemove(ctx, volumeName(session), false); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove volume %s: %w", volumeName(session), err)
	}
	return nil
}
