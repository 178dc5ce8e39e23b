package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types/volume"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/pool"
)

// Filling the warm pool: a loop per Driver, a few fills at a time.

// RunPool reconciles the warm pool with the engine (adopting this driver's healthy
// unbound pooled containers, removing broken ones) and then keeps every pool full
// until ctx ends, then waits for the fills under way. Without pools configured it
// returns at once. Pooled containers outlive the process: the next RunPool adopts them.
func (d *Driver) RunPool(ctx context.Context) { d.pool.Run(ctx, poolEngine{d}) }

// Make creates, starts and pings one pooled container of image. Once begun it
// runs to the end whatever ctx does (an engine call cut short may still make its
// container, which would then be left behind); a container it makes after the pool
// stopped waits for the next RunPool to adopt it.
func (e poolEngine) Make(ctx context.Context, image string) (pool.Box, error) {
	d := e.Driver
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := d.ensureAgentVolume(ctx, image); err != nil {
		return pool.Box{}, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := "pool-" + hex.EncodeToString(rnd[:])
	class := d.poolClassFor(image)
	spec := sandbox.Spec{Session: name, Image: image}
	log := d.log.With("image", image, "pooled", name)
	ss := d.socketFor(log, spec)
	cfg, host := d.containerConfig(spec, ss)
	for _, k := range sandbox.SessionKeys {
		delete(cfg.Labels, k)
	}
	cfg.Labels[LabelPool] = image
	cfg.Labels[LabelPoolClass] = class.Key()
	cfg.Labels[LabelPoolOwner] = d.pool.Owner()
	vol := volumeName(name)
	volLabels := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelInstance: d.instance, LabelPool: image}
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: volLabels}); err != nil {
		d.removeSocketDir(ss.key)
		return pool.Box{}, fmt.Errorf("pool %s: create volume: %w", image, err)
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, containerName(name))
	if err != nil {
		d.cleanup(ctx, log, "", vol, ss.key)
		return pool.Box{}, fmt.Errorf("pool %s: create container: %w", image, err)
	}
	if err := d.startContainer(ctx, resp.ID, image); err != nil {
		d.cleanup(ctx, log, resp.ID, vol, ss.key)
		return pool.Box{}, fmt.Errorf("pool %s: start container: %w", image, err)
	}
	if err := d.pingAgent(ctx, resp.ID); err != nil {
		d.cleanup(ctx, log, resp.ID, vol, ss.key)
		return pool.Box{}, fmt.Errorf("pool %s: %w", image, err)
	}
	log.Debug("pooled container ready", "container", resp.ID)
	return pool.Box{ID: resp.ID, Volume: vol, Limits: d.defaults, Made: time.Now(), Stream: d.preopen(ctx, resp.ID)}, nil
}

// pingAgent waits until the agent in container id answers a ping (at most a minute).
func (d *Driver) pingAgent(ctx context.Context, id string) error {
	return agent.WaitReady(ctx, func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, id) }, time.Minute)
}
