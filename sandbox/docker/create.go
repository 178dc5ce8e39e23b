package docker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/cwsdev/cws/sandbox"
)

// Create makes the session's workspace volume and hardened container and starts it,
// or takes a started one from the warm pool when one fits (pool.go, bind.go).
// It returns once the container runs; it does not wait for the agent inside (the agent
// client pings with retry). If a step after the volume fails, Create removes what it
// made. A session whose container or volume already exists is ErrExists.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if err := validate(spec); err != nil {
		return sandbox.Info{}, err
	}
	if info, ok, err := d.fromPool(ctx, spec); ok {
		return info, err
	}
	log := d.log.With("session", spec.Session, "tenant", spec.Tenant, "image", spec.Image)
	if err := d.ensureAgentVolume(ctx, spec.Image); err != nil {
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: %w", spec.Session, err)
	}

	vol := volumeName(spec.Session)
	// VolumeCreate returns an existing volume silently; look first so that Create never
	// adopts (and on failure, deletes) another sandbox's workspace.
	if _, err := d.cli.VolumeInspect(ctx, vol); err == nil {
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: volume %s: %w", spec.Session, vol, ErrExists)
	} else if !cerrdefs.IsNotFound(err) {
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: inspect volume %s: %w", spec.Session, vol, err)
	}
	cfg, host := d.containerConfig(spec)
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: cfg.Labels}); err != nil {
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: create volume: %w", spec.Session, err)
	}

	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, containerName(spec.Session))
	if err != nil {
		switch {
		case cerrdefs.IsConflict(err):
			// The name is taken: that container may be using the volume; leave it be.
			return sandbox.Info{}, fmt.Errorf("create sandbox %s: %w: %v", spec.Session, ErrExists, err)
		case cerrdefs.IsNotFound(err):
			err = fmt.Errorf("%w: image %q is not on the engine: %v", ErrInvalid, spec.Image, err)
		}
		d.cleanup(ctx, log, "", vol)
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: create container: %w", spec.Session, err)
	}
	for _, w := range resp.Warnings {
		log.Warn("container create warning", "container", resp.ID, "warning", w)
	}

	if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		d.cleanup(ctx, log, resp.ID, vol)
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: start container: %w", spec.Session, err)
	}
	log.Info("sandbox created", "container", resp.ID, "volume", vol)
	info := sandbox.Info{
		ID:      resp.ID,
		Session: spec.Session,
		Tenant:  spec.Tenant,
		Subject: spec.Subject,
		Image:   spec.Image,
		Running: true,
		Volume:  vol,
	}
	if !spec.Expires.IsZero() {
		// As it reads back from the label: UTC, whole seconds.
		info.Expires = spec.Expires.UTC().Truncate(time.Second)
	}
	return info, nil
}

// cleanup removes a half-made sandbox, even when ctx is already cancelled.
func (d *Driver) cleanup(ctx context.Context, log *slog.Logger, id, vol string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if id != "" {
		if err := d.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			log.Warn("cleanup: remove container", "container", id, "err", err)
		}
	}
	if err := d.cli.VolumeRemove(ctx, vol, true); err != nil && !cerrdefs.IsNotFound(err) {
		log.Warn("cleanup: remove volume", "volume", vol, "err", err)
	}
}
