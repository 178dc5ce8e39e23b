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
	"github.com/cwsdev/cws/sandbox/agent"
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
	ss := d.socketFor(log, spec)
	cfg, host := d.containerConfig(spec, ss)
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: d.labels(spec)}); err != nil {
		d.removeSocketDir(ss.key)
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: create volume: %w", spec.Session, err)
	}

	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, containerName(spec.Session))
	if err != nil && ss.key != "" && cerrdefs.IsInvalidArgument(err) {
		// The engine refused the bind mount: the socket directory is not at the same
		// path on the engine's host (cws in a container without it mounted at the same
		// path). The exec stream needs no mount: create without it, and stop trying.
		d.removeSocketDir(ss.key)
		refused := err
		cfg, host = d.containerConfig(spec, socketSetup{})
		if resp, err = d.cli.ContainerCreate(ctx, cfg, host, nil, nil, containerName(spec.Session)); err == nil {
			why := fmt.Sprintf("the engine cannot mount the socket directory %s (mount it at the same path in cws's container): %v", d.socketDir, refused)
			d.transport.set(TransportExec, why)
			log.Warn("agent transport: falling back to the exec stream", "why", why)
		}
		ss = socketSetup{}
	}
	if err != nil {
		switch {
		case cerrdefs.IsConflict(err):
			// The name is taken: that container may be using the volume; leave it be.
			d.removeSocketDir(ss.key)
			return sandbox.Info{}, fmt.Errorf("create sandbox %s: %w: %v", spec.Session, ErrExists, err)
		case cerrdefs.IsNotFound(err):
			err = fmt.Errorf("%w: image %q is not on the engine: %v", ErrInvalid, spec.Image, err)
		}
		d.cleanup(ctx, log, "", vol, ss.key)
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: create container: %w", spec.Session, err)
	}
	for _, w := range resp.Warnings {
		log.Warn("container create warning", "container", resp.ID, "warning", w)
	}

	if err := d.startContainer(ctx, resp.ID, spec.Image); err != nil {
		d.cleanup(ctx, log, resp.ID, vol, ss.key)
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

// socketFor makes the container's socket directory on the socket path. A directory
// that cannot be made costs this sandbox the fast path, never its creation.
func (d *Driver) socketFor(log *slog.Logger, spec sandbox.Spec) socketSetup {
	if name, _ := d.transport.get(); name != TransportSocket {
		return socketSetup{}
	}
	ss, err := d.newSocketDir(agent.DefaultAgentUser)
	if err != nil {
		log.Warn("no socket directory: this sandbox is reached through the exec stream", "err", err)
		return socketSetup{}
	}
	return ss
}

// cleanup removes a half-made sandbox, even when ctx is already cancelled.
func (d *Driver) cleanup(ctx context.Context, log *slog.Logger, id, vol, socketKey string) {
	d.removeSocketDir(socketKey)
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
