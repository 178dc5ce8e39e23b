package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// The warm pool.
//
// A pooled container is made exactly like a session's (containerConfig: hardened,
// agent injected, started, and its agent has answered a ping), but it belongs to no
// session yet: it carries cws.pool=<image> and no session, tenant or subject label,
// and List never reports it. Create takes one whose limit class matches the spec,
// binds it to the session (bind.go) and applies the spec's cpu, memory and pids with
// `docker update`. A pooled container is handed out at most once and never goes back:
// a failed bind removes it.
//
// Limit classes: what cannot change on a running container is fixed when the pooled
// container is made: the ulimits (nofile, fsize), the /tmp tmpfs size, the network
// mode, the tool uid:gid and the environment. A pooled container serves only a spec
// whose immutable settings are those (poolClass); any other spec is a miss and is
// created cold. Pools are made with the driver's defaults, no network, the default
// user and no extra environment: the policy defaults.

// Labels of pooled containers (besides cws.managed, cws.instance and cws.image).
const (
	LabelPool      = "cws.pool"       // the image the pool serves
	LabelPoolClass = "cws.pool.class" // the limit class (poolClass.key)
	LabelPoolOwner = "cws.pool.owner" // the driver that made it and alone hands it out
)

// poolPrefix starts the name of a pooled container that is not bound to a session.
const poolPrefix = "cws-pool-"

// DefaultPoolFillers is how many pooled containers are made at once when
// Config.PoolFillers is zero: few, so that refilling never starves the creates of the
// cores they need.
const DefaultPoolFillers = 2

// DefaultPoolMaxAge is Config.PoolMaxAge when zero.
const DefaultPoolMaxAge = time.Hour

// PoolSize asks for a warm pool of Size containers of Image.
type PoolSize struct {
	Image string
	Size  int
}

// PoolObserver receives what the pool measures (metrics.Pool implements it). Images
// are the configured pool images; a miss for an image without a pool is "".
type PoolObserver interface {
	PoolReady(image string, n int)
	PoolHit(image string)
	PoolMiss(image, reason string)
	PoolFillFailed(image string)
}

// Reasons of PoolMiss.
const (
	MissNoPool = "no_pool" // no pool for the image
	MissEmpty  = "empty"   // the pool was empty
	MissClass  = "class"   // the spec's immutable settings differ from the pool's class
	MissBind   = "bind"    // binding the pooled container failed: it was removed, the create went cold
)

// MissReasons are the reasons of PoolMiss, for exporting them at 0.
var MissReasons = []string{MissNoPool, MissEmpty, MissClass, MissBind}

// poolClass is what a pooled container cannot change once made.
type poolClass struct {
	image    string
	network  bool
	user     string
	noFile   int64
	fileSize int64
	tmpSize  int64
}

// key identifies the class in the cws.pool.class label.
func (c poolClass) key() string {
	s := fmt.Sprintf("%s|%t|%s|%d|%d|%d", c.image, c.network, c.user, c.noFile, c.fileSize, c.tmpSize)
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// classOf is spec's limit class; ok is false when nothing pooled can serve it (extra
// environment, a test tmpfs workspace).
func (d *Driver) classOf(spec sandbox.Spec) (poolClass, bool) {
	lim := withDefaults(spec.Limits, d.defaults)
	c := poolClass{image: spec.Image, network: spec.Network, user: cmp.Or(spec.User, DefaultUser),
		noFile: lim.NoFile, fileSize: lim.FileSizeBytes, tmpSize: lim.TmpSizeBytes}
	return c, len(spec.Env) == 0 && spec.WorkspaceTmpfsBytes == 0
}

// pooledBox is one ready pooled container.
type pooledBox struct {
	id     string
	volume string         // its workspace volume
	limits sandbox.Limits // the mutable limits it was made with
	made   time.Time      // when it was made (engine time for adopted ones)
	// stream is an agent stream opened while pooled, handed to the session's first
	// Attach so that its first call does not wait for a `docker exec`; nil if none.
	stream io.ReadWriteCloser
}

// close ends the pre-opened stream of a box that will never be handed out.
func (b pooledBox) close() {
	if b.stream != nil {
		b.stream.Close()
	}
}

// pool holds the ready containers of every pool image. Only its driver hands them out.
type pool struct {
	sizes   map[string]int // wanted, by image
	max     int            // global cap on ready plus filling containers
	owner   string
	maxAge  time.Duration
	fillers chan struct{} // bounds concurrent fills
	obs     PoolObserver
	wake    chan struct{}

	mu      sync.Mutex
	ready   map[string][]pooledBox // by image
	filling map[string]int         // by image
}

func newPool(cfg Config) *pool {
	p := &pool{
		sizes: map[string]int{}, max: cfg.PoolMax, owner: cfg.PoolOwner, maxAge: cmp.Or(cfg.PoolMaxAge, DefaultPoolMaxAge),
		fillers: make(chan struct{}, cmp.Or(cfg.PoolFillers, DefaultPoolFillers)),
		obs:     cfg.PoolObserver, wake: make(chan struct{}, 1),
		ready: map[string][]pooledBox{}, filling: map[string]int{},
	}
	if p.obs == nil {
		p.obs = nopPoolObserver{}
	}
	for _, s := range cfg.Pool {
		if s.Size > 0 && s.Image != "" {
			p.sizes[s.Image] += s.Size
		}
	}
	if p.max <= 0 {
		for _, n := range p.sizes {
			p.max += n
		}
	}
	return p
}

// poolClassFor is the class every pool of image is made in: the policy defaults.
func (d *Driver) poolClassFor(image string) poolClass {
	c, _ := d.classOf(sandbox.Spec{Image: image})
	return c
}

// take removes and returns one ready container that can serve spec, and says why not
// otherwise (a Miss* reason).
func (d *Driver) take(spec sandbox.Spec) (pooledBox, string) {
	p := d.pool
	if p.sizes[spec.Image] == 0 {
		return pooledBox{}, MissNoPool
	}
	c, ok := d.classOf(spec)
	if !ok || c != d.poolClassFor(spec.Image) {
		return pooledBox{}, MissClass
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	boxes := p.ready[spec.Image]
	// The oldest first, so that none waits long; too old ones are left to expire().
	for i, b := range boxes {
		if time.Since(b.made) < p.maxAge {
			p.ready[spec.Image] = slices.Delete(boxes, i, i+1)
			p.obs.PoolReady(spec.Image, len(p.ready[spec.Image]))
			return b, ""
		}
	}
	return pooledBox{}, MissEmpty
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

// signal asks the refill loop to look at the pool now.
func (p *pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// RunPool reconciles the warm pool with the engine (adopting this driver's healthy
// unbound pooled containers, removing broken ones) and then keeps every pool full
// until ctx ends. Without pools configured it returns at once. Pooled containers
// outlive the process: the next RunPool adopts them.
func (d *Driver) RunPool(ctx context.Context) {
	p := d.pool
	if len(p.sizes) == 0 {
		return
	}
	if err := d.reconcilePool(ctx); err != nil {
		d.log.Warn("pool reconcile", "err", err)
	}
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
		go d.fillOne(ctx, img)
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
	cfg, host := d.containerConfig(spec)
	for _, k := range []string{sandbox.LabelSession, sandbox.LabelTenant, sandbox.LabelSubject, sandbox.LabelExpires, sandbox.LabelDefault} {
		delete(cfg.Labels, k)
	}
	cfg.Labels[LabelPool] = image
	cfg.Labels[LabelPoolClass] = class.key()
	cfg.Labels[LabelPoolOwner] = d.pool.owner
	vol := volumeName(name)
	volLabels := map[string]string{sandbox.LabelManaged: "true", sandbox.LabelInstance: d.instance, LabelPool: image}
	if _, err := d.cli.VolumeCreate(ctx, volume.CreateOptions{Name: vol, Labels: volLabels}); err != nil {
		return pooledBox{}, fmt.Errorf("pool %s: create volume: %w", image, err)
	}
	log := d.log.With("image", image, "pooled", name)
	resp, err := d.cli.ContainerCreate(ctx, cfg, host, nil, nil, containerName(name))
	if err != nil {
		d.cleanup(ctx, log, "", vol)
		return pooledBox{}, fmt.Errorf("pool %s: create container: %w", image, err)
	}
	if err := d.cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		d.cleanup(ctx, log, resp.ID, vol)
		return pooledBox{}, fmt.Errorf("pool %s: start container: %w", image, err)
	}
	if err := d.pingAgent(ctx, resp.ID); err != nil {
		d.cleanup(ctx, log, resp.ID, vol)
		return pooledBox{}, fmt.Errorf("pool %s: %w", image, err)
	}
	log.Debug("pooled container ready", "container", resp.ID)
	return pooledBox{id: resp.ID, volume: vol, limits: withDefaults(sandbox.Limits{}, d.defaults), made: time.Now(),
		stream: d.preopen(ctx, resp.ID)}, nil
}

// preopen opens an agent stream to a pooled container for its session's first
// Attach. It is best effort: nil means the session dials as usual.
func (d *Driver) preopen(ctx context.Context, id string) io.ReadWriteCloser {
	s, err := d.Attach(ctx, id)
	if err != nil {
		d.log.Debug("pre-open agent stream", "container", id, "err", err)
		return nil
	}
	return s
}

// handOver keeps a bound container's pre-opened stream for its first Attach.
func (d *Driver) handOver(b pooledBox) {
	if b.stream != nil {
		d.streams.Store(b.id, b.stream)
	}
}

// preopened returns (once) the pre-opened agent stream of a container handed out from
// the pool, or nil.
func (d *Driver) preopened(id string) io.ReadWriteCloser {
	if s, ok := d.streams.LoadAndDelete(id); ok {
		return s.(io.ReadWriteCloser)
	}
	return nil
}

// dropStream closes the pre-opened stream of a container being removed, if unused.
func (d *Driver) dropStream(id string) {
	if s := d.preopened(id); s != nil {
		s.Close()
	}
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

// unboundName reports whether a container name (with or without Docker's leading
// slash) is a pooled container's that no session has taken.
func unboundName(name string) bool {
	return strings.HasPrefix(strings.TrimPrefix(name, "/"), poolPrefix)
}

type nopPoolObserver struct{}

func (nopPoolObserver) PoolReady(string, int)   {}
func (nopPoolObserver) PoolHit(string)          {}
func (nopPoolObserver) PoolMiss(string, string) {}
func (nopPoolObserver) PoolFillFailed(string)   {}

// PoolReady is how many pooled containers of image are ready to be handed out.
func (d *Driver) PoolReady(image string) int {
	d.pool.mu.Lock()
	defer d.pool.mu.Unlock()
	return len(d.pool.ready[image])
}

// unready removes container id from the ready containers, and reports whether it was
// there.
func (d *Driver) unready(id string) (pooledBox, bool) {
	p := d.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	for img, boxes := range p.ready {
		for i, b := range boxes {
			if b.id == id {
				p.ready[img] = slices.Delete(boxes, i, i+1)
				p.obs.PoolReady(img, len(p.ready[img]))
				return b, true
			}
		}
	}
	return pooledBox{}, false
}
