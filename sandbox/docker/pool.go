package docker

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cwsdev/cws/sandbox"
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
	fills   sync.WaitGroup // fills in flight; RunPool waits for them

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

// signal asks the refill loop to look at the pool now.
func (p *pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
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
