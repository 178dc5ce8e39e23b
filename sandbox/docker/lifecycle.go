package docker

import (
	"context"
	"time"

	"github.com/docker/docker/api/types/container"
)

// Start starts a stopped sandbox. Starting a running one is a no-op.
func (d *Driver) Start(ctx context.Context, id string) error {
	if err := d.cli.ContainerStart(ctx, id, container.StartOptions{}); err != nil {
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
