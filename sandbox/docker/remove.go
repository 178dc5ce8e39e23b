package docker

import (
	"context"
	"fmt"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/cwsdev/cws/sandbox"
)

// Remove force-removes a sandbox's container, its workspace volume and its socket
// directory. It is idempotent: a sandbox that is already gone is success.
//
// The volume is found from the container (its /workspace mount, else its session
// label). A volume whose container is already gone is left for reconciliation. A
// pooled container's bind record (bind.go) goes after the container.
//
// The container is marked first (renamed to cws-deleted-<id>), so that a removal cut
// short by a crash or an engine error can never be taken for a live session and
// re-adopted: List reports it Deleted, and the next reconcile finishes the job.
func (d *Driver) Remove(ctx context.Context, id string) error {
	d.pool.DropStream(id)
	c, err := d.cli.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove sandbox %s: inspect: %w", id, err)
	}
	if !managed(c) {
		return fmt.Errorf("remove sandbox %s: %w: container is not managed by cws", id, ErrNotFound)
	}
	d.pool.DropStream(c.ID)
	vol := workspaceVolume(c.Mounts)
	if vol == "" && c.Config != nil {
		if s := c.Config.Labels[sandbox.LabelSession]; s != "" {
			vol = volumeName(s)
		}
	}
	if !deletedName(c.Name) {
		if err := d.cli.ContainerRename(ctx, c.ID, deletedPrefix+c.ID[:12]); err != nil {
			if cerrdefs.IsNotFound(err) {
				return nil
			}
			// Renamed by a concurrent removal in the meantime: the mark is there.
			if now, ierr := d.cli.ContainerInspect(ctx, c.ID); ierr != nil || !deletedName(now.Name) {
				return fmt.Errorf("remove sandbox %s: mark deleted: %w", id, err)
			}
		}
	}
	if err := d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		if !cerrdefs.IsConflict(err) {
			return fmt.Errorf("remove sandbox %s: remove container: %w", id, err)
		}
		// Another replica (or the reconciler) is removing it already: wait for it.
		if err := d.waitGone(ctx, c.ID); err != nil {
			return fmt.Errorf("remove sandbox %s: remove container: %w", id, err)
		}
	}
	if c.Config != nil {
		d.removeSocketDir(c.Config.Labels[sandbox.LabelSocketDir])
	}
	if c.Config != nil && c.Config.Labels[LabelPool] != "" {
		if err := d.removeBindings(ctx, c.ID); err != nil {
			return fmt.Errorf("remove sandbox %s: %w", id, err)
		}
	}
	if vol != "" {
		var err error
		for try := 0; try < 10; try++ { // "in use" while a concurrent removal finishes
			if err = d.cli.VolumeRemove(ctx, vol, true); err == nil || cerrdefs.IsNotFound(err) || !cerrdefs.IsConflict(err) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil && !cerrdefs.IsNotFound(err) {
			return fmt.Errorf("remove sandbox %s: remove volume %s: %w", id, vol, err)
		}
	}
	d.log.Info("sandbox removed", "container", c.ID, "volume", vol)
	return nil
}

// deletedPrefix starts the name of a container whose removal has begun.
const deletedPrefix = "cws-deleted-"

// deletedName reports whether a container name (with or without Docker's leading
// slash) marks a removal in progress.
func deletedName(name string) bool {
	return strings.HasPrefix(strings.TrimPrefix(name, "/"), deletedPrefix)
}

// waitGone waits until a container another caller is removing is gone.
func (d *Driver) waitGone(ctx context.Context, id string) error {
	for try := 0; ; try++ {
		_, err := d.cli.ContainerInspect(ctx, id)
		switch {
		case cerrdefs.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case try >= 150:
			return fmt.Errorf("container %s is still being removed", id)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
