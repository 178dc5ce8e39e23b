package docker

import (
	"context"
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
)

// Healing a sandbox whose agent stopped answering (workspace.Healer). Neither step
// touches the workspace volume.

// reviveTimeout bounds RestartAgent's exec: revive waits a few seconds for the new serve.
const reviveTimeout = 20 * time.Second

// RestartAgent brings back a sandbox's agent in place. The engine first sends SIGCONT
// to the container's init (PID 1), in case it was stopped: only the engine reaches
// PID 1 from outside. Then `cws-agent revive`, run through docker exec as the agent's
// own uid (no capability needed to signal its own processes), continues every
// `cws-agent serve` and kills it; init starts a new one, which revive waits for. A
// paused container (docker pause) is unpaused instead. A stopped or removed sandbox,
// or one being removed, is not touched.
func (d *Driver) RestartAgent(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, reviveTimeout)
	defer cancel()
	c, err := d.healable(ctx, "restart agent of", id)
	if err != nil {
		return err
	}
	if !c.State.Running {
		return fmt.Errorf("restart agent of sandbox %s: %w", id, ErrStopped)
	}
	if c.State.Paused {
		if err := d.cli.ContainerUnpause(ctx, c.ID); err != nil {
			return notFound("unpause sandbox", id, err)
		}
		d.log.Warn("sandbox was paused; unpaused it", "container", c.ID)
		return nil
	}
	if err := d.cli.ContainerKill(ctx, c.ID, "SIGCONT"); err != nil {
		d.log.Debug("continue the container's init", "container", c.ID, "err", err)
	}
	out, code, err := d.Exec(ctx, c.ID, []string{agentPath, "revive"}, agentUser(c))
	if err != nil {
		return fmt.Errorf("restart agent of sandbox %s: %w", id, err)
	}
	if code != 0 {
		return fmt.Errorf("restart agent of sandbox %s: cws-agent revive exited with %d: %s", id, code, out)
	}
	d.log.Info("agent restarted", "container", c.ID, "revive", string(out))
	return nil
}

// Restart restarts a sandbox's container when its agent could not be brought back in
// place: SIGTERM to init and SIGKILL a second later (an agent that does not answer
// gets no longer grace), then a fresh start with the same workspace volume. A sandbox
// that is removed, or being removed, is not touched.
func (d *Driver) Restart(ctx context.Context, id string) error {
	c, err := d.healable(ctx, "restart", id)
	if err != nil {
		return err
	}
	d.restoreSocketDir(c)
	if c.State.Paused {
		_ = d.cli.ContainerUnpause(ctx, c.ID)
	}
	grace := 1
	if err := d.cli.ContainerRestart(ctx, c.ID, container.StopOptions{Timeout: &grace}); err != nil {
		return notFound("restart sandbox", id, err)
	}
	d.log.Warn("sandbox restarted: its agent did not answer", "container", c.ID)
	return nil
}

// healable inspects a sandbox that is to be healed: managed, and not being removed.
func (d *Driver) healable(ctx context.Context, op, id string) (container.InspectResponse, error) {
	d.pool.DropStream(id)
	c, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return container.InspectResponse{}, notFound(op+" sandbox", id, err)
	}
	if !managed(c) {
		return container.InspectResponse{}, fmt.Errorf("%s sandbox %s: %w: container is not managed by cws", op, id, ErrNotFound)
	}
	if deletedName(c.Name) {
		return container.InspectResponse{}, fmt.Errorf("%s sandbox %s: %w: it is being removed", op, id, ErrNotFound)
	}
	if c.State == nil {
		return container.InspectResponse{}, fmt.Errorf("%s sandbox %s: the engine reports no state", op, id)
	}
	return c, nil
}
