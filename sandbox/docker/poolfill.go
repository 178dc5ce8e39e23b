package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// Filling the warm pool: a loop per Driver, a few fills at a time.

// RunPool reconciles the warm pool with the engine (adopting this driver's healthy
// unbound pooled containers, removing broken ones) and then keeps every pool full
// until ctx ends, then waits for the fills under way. Without pools configured it
// returns at once. Pooled containers outlive the process: the next RunPool adopts them.
func (d *Driver) RunPool(ctx context.Context) {
	p := d.pool
	if len(p.sizes) == 0 {
		return
	}
	if err := d.reconcilePool(ctx); err != nil {
		d.log.Warn("pool reconcile", "err", err)
	}
	defer p.fills.Wait()
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		d.refill(ctx)
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-t.C:
			d.expire(ctx)
			d.cleanPool(ctx)
		}
	}
}

// refill starts the fills that the pools lack, within the global cap. Each fill runs
// in its own goroutine, bounded by the fillers semaphore.
func (d *Driver) refill(ctx context.Context) {
	p := d.pool
	p.mu.Lock()
	total := 0
	for img := range p.sizes {
		total += len(p.ready[img]) + p.filling[img]
	}
	var starts []string
	for img, want := range p.sizes {
		for n := len(p.ready[img]) + p.filling[img]; n < want && total < p.max; n++ {
			p.filling[img]++
			total++
			starts = append(starts, img)
		}
	}
	p.mu.Unlock()
	for _, img := range starts {
		p.fills.Add(1)
		go func() {
			defer p.fills.Done()
			d.fillOne(ctx, img)
		}()
	}
}

// fillOne makes one pooled container of image and adds it to the pool.
func (d *Driver) fillOne(ctx context.Context, image string) {
	p := d.pool
	done := func(b *pooledBox) {
		p.mu.Lock()
		p.filling[image]--
		if b != nil {
			p.ready[image] = append(p.ready[image], *b)
		}
		n := len(p.ready[image])
		p.mu.Unlock()
		p.obs.PoolReady(image, n)
	}
	select {
	case p.fillers <- struct{}{}:
	case <-ctx.Done():
		done(nil)
		return
	}
	b, err := d.makePooled(ctx, image)
	<-p.fillers
	if err != nil {
		// No signal: a broken image is tried again on the next tick, not in a loop.
		done(nil)
		if ctx.Err() == nil {
			p.obs.PoolFillFailed(image)
			d.log.Warn("pool fill failed", "image", image, "err", err)
		}
		return
	}
	done(&b)
	p.signal()
}

// makePooled creates, starts and pings one pooled container of image. Once begun it
// runs to the end whatever ctx does (an engine call cut short may still make its
// container, which would then be left behind); a container it makes after the pool
// stopped waits for the next RunPool to adopt it.
func (d *Driver) makePooled(ctx context.Context, image string) (pooledBox, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := d.ensureAgentVolume(ctx, image); err != nil {
		return pooledBox{}, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := "pool-" + hex.EncodeToString(rnd[:])
	class := d.poolClassFor(image)
	spec := sandbox.Spec{Session: name, Image: image}
	log := d.log.With("image", image, "pooled", name)
	ss := d.socketFor(log, spec)
	cfg, host := d.containerConfig(spec, ss)
	for _, k := range []string{sandbox.LabelSession, sandbox.LabelTenant, sandbox.LabelSubject, sandbox.LabelExpires, sandbox.LabelDefault} {
		delete(cfg.Labels, k)
	}
	cfg.Labels[LabelPool] = image
	cfg.Labels[LabelPoolClass] = class.key()
	cfg.Labels[LabelPoolOwner] = d.pool.owner
	vol := volumeName(name)
	volLabels := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelInstance: d.instance, LabelPool: image}
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: volLabels}); err != nil {
		d.removeSocketDir(ss.key)
		return pooledBox{}, fmt.Errorf("pool %s: create volume: %w", image, err)
	}
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, containerName(name))
	if err != nil {
		d.cleanup(ctx, log, "", vol, ss.key)
		return pooledBox{}, fmt.Errorf("pool %s: create container: %w", image, err)
	}
	if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		d.cleanup(ctx, log, resp.ID, vol, ss.key)
		return pooledBox{}, fmt.Errorf("pool %s: start container: %w", image, err)
	}
	if err := d.pingAgent(ctx, resp.ID); err != nil {
		d.cleanup(ctx, log, resp.ID, vol, ss.key)
		return pooledBox{}, fmt.Errorf("pool %s: %w", image, err)
	}
	log.Debug("pooled container ready", "container", resp.ID)
	return pooledBox{id: resp.ID, volume: vol, limits: withDefaults(sandbox.Limits{}, d.defaults), made: time.Now(),
		stream: d.preopen(ctx, resp.ID)}, nil
}

// pingAgent waits until the agent in container id answers a ping (at most a minute).
func (d *Driver) pingAgent(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, id) }, version.Version, nil)
	defer c.Close()
	var err error
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 500*time.Millisecond) {
		if _, err = c.Ping(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent did not answer: %v", err)
		case <-time.After(delay):
		}
	}
}

// expire removes the ready containers that waited longer than the pool's max age; the
// refill replaces them.
func (d *Driver) expire(ctx context.Context) {
	p := d.pool
	var old []pooledBox
	p.mu.Lock()
	for img, boxes := range p.ready {
		keep := boxes[:0]
		for _, b := range boxes {
			if time.Since(b.made) >= p.maxAge {
				old = append(old, b)
			} else {
				keep = append(keep, b)
			}
		}
		p.ready[img] = keep
		p.obs.PoolReady(img, len(keep))
	}
	p.mu.Unlock()
	for _, b := range old {
		b.close()
		d.log.Info("pooled container too old, replacing it", "container", b.id)
		if err := d.Remove(ctx, b.id); err != nil {
			d.log.Warn("remove old pooled container", "container", b.id, "err", err)
		}
	}
}
