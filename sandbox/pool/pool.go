// Package pool is the warm pool every sandbox driver shares: per image, a few started,
// agent-ready sandboxes that belong to no session yet, for Create to take instead of
// making one cold. It keeps the books (what is ready, what is being made, what is too
// old), runs the refill loop, and reports to an Observer; the driver's Engine makes,
// removes and sweeps the sandboxes themselves, and binds a taken one to its session.
//
// A pooled sandbox is handed out at most once and never goes back: a failed bind
// removes it.
//
// Limit classes: what cannot change on a running sandbox is fixed when it is made (the
// ulimits, the /tmp size, the network, the tool uid:gid, the environment). A pooled
// sandbox serves only a spec of its class (Class); pools are made in the class of the
// policy defaults, and any other spec is a miss that goes cold.
package pool

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cwsdev/cws/sandbox"
)

// Labels of pooled sandboxes (besides cws.managed, cws.instance and cws.image).
const (
	LabelPool      = "cws.pool"       // the image the pool serves
	LabelPoolClass = "cws.pool.class" // the limit class (Class.Key)
	LabelPoolOwner = "cws.pool.owner" // the driver that made it and alone hands it out
)

// DefaultFillers is how many pooled sandboxes are made at once when Config.Fillers is
// zero: few, so that refilling never starves the creates of the cores they need.
const DefaultFillers = 2

// DefaultMaxAge is Config.MaxAge when zero.
const DefaultMaxAge = time.Hour

// DefaultRefillHold is Config.RefillHold when zero: how long the refill that taking a
// pooled sandbox wakes waits before it makes the replacement. The sandbox just handed
// out runs first (a wake restoring an archive into it: about 0.3–1 s for 17 MB),
// rather than beside the engine starting another container on the same cores. (On
// two cores the archive section of cws-bench gave the wake 1.07 s without the hold
// and 760 ms with it, one run each; runs with it since gave 1.1–1.6 s on a busier
// machine: its effect is within the noise of this machine's file system.)
const DefaultRefillHold = time.Second

// Size asks for a warm pool of Size sandboxes of Image.
type Size struct {
	Image string
	Size  int
}

// Observer receives what the pool measures (metrics.Pool implements it). Images are
// the configured pool images; a miss for an image without a pool is "".
type Observer interface {
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
	MissBind   = "bind"    // binding the pooled sandbox failed: it was removed, the create went cold
)

// MissReasons are the reasons of PoolMiss, for exporting them at 0.
var MissReasons = []string{MissNoPool, MissEmpty, MissClass, MissBind}

// Class is what a pooled sandbox cannot change once made.
type Class struct {
	Image    string
	Network  bool
	User     string
	NoFile   int64
	FileSize int64
	TmpSize  int64
}

// Key identifies the class in the cws.pool.class label.
func (c Class) Key() string {
	s := fmt.Sprintf("%s|%t|%s|%d|%d|%d", c.Image, c.Network, c.User, c.NoFile, c.FileSize, c.TmpSize)
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// ClassOf is spec's limit class, its zero limits taken from defaults; ok is false when
// nothing pooled can serve it (extra environment, a test tmpfs workspace).
func ClassOf(spec sandbox.Spec, defaults sandbox.Limits) (c Class, ok bool) {
	lim := sandbox.WithDefaults(spec.Limits, defaults)
	c = Class{Image: spec.Image, Network: spec.Network, User: cmp.Or(spec.User, sandbox.DefaultUser),
		NoFile: lim.NoFile, FileSize: lim.FileSizeBytes, TmpSize: lim.TmpSizeBytes}
	return c, len(spec.Env) == 0 && spec.WorkspaceTmpfsBytes == 0
}

// Box is one ready pooled sandbox.
type Box struct {
	ID     string
	Volume string         // its workspace (volume or claim)
	Limits sandbox.Limits // the mutable limits it was made with
	Made   time.Time      // when it was made (the engine's time for adopted ones)
	// Stream is an agent stream opened while pooled, handed to the session's first
	// Attach so that its first call does not wait for a dial; nil if none.
	Stream io.ReadWriteCloser
}

// Close ends the pre-opened stream of a box that will never be handed out.
func (b Box) Close() {
	if b.Stream != nil {
		b.Stream.Close()
	}
}

// Engine is what a driver does for its pool.
type Engine interface {
	// Make makes one pooled sandbox of image in the pool's class: started, its agent
	// answering. Once begun it should run to the end whatever ctx does; a sandbox it
	// makes after the pool stopped waits for the next Run's sweep to adopt it.
	Make(ctx context.Context, image string) (Box, error)
	// Remove removes a pooled sandbox that will never be handed out.
	Remove(ctx context.Context, id string) error
	// Sweep looks at the engine's pooled sandboxes. Starting (once, before the first
	// fill) it offers this owner's healthy unbound ones to Adopt and removes the rest
	// that nobody will hand out; afterwards (on every tick) it finishes cut-short
	// removals and Unreadies ready ones that stopped.
	Sweep(ctx context.Context, starting bool) error
}

// Config configures a Pool.
type Config struct {
	Sizes []Size
	// Max caps the pooled sandboxes (ready and being made) over all images. Zero means
	// the sum of Sizes.
	Max int
	// Fillers is how many pooled sandboxes are made at once. Zero means DefaultFillers.
	Fillers int
	// Owner names this driver on its pooled sandboxes (label cws.pool.owner): only
	// the driver of that owner hands them out or adopts them, so that replicas sharing
	// an engine never hand out one sandbox twice.
	Owner string
	// MaxAge is how long a pooled sandbox may wait for a session: older ones are never
	// handed out but replaced. Zero means DefaultMaxAge.
	MaxAge time.Duration
	// RefillHold is how long a refill waits after a sandbox was taken (see
	// DefaultRefillHold, used when zero); negative: not at all.
	RefillHold time.Duration
	Observer   Observer // nil measures nothing
	Log        *slog.Logger
}

// Pool holds the ready sandboxes of every pool image. Only its driver hands them out.
// It is safe for concurrent use.
type Pool struct {
	sizes   map[string]int // wanted, by image
	max     int
	owner   string
	maxAge  time.Duration
	fillers chan struct{}
	obs     Observer
	log     *slog.Logger
	wake    chan struct{}
	fills   sync.WaitGroup // fills in flight; Run waits for them
	hold    time.Duration
	taken   atomic.Int64 // UnixNano of the last take; 0: never

	mu      sync.Mutex
	ready   map[string][]Box // by image
	filling map[string]int   // by image

	streams sync.Map // sandbox id → pre-opened stream of a handed-out box
}

// New returns a Pool; Run fills it.
func New(cfg Config) *Pool {
	p := &Pool{
		sizes: map[string]int{}, max: cfg.Max, owner: cfg.Owner, maxAge: cmp.Or(cfg.MaxAge, DefaultMaxAge),
		fillers: make(chan struct{}, cmp.Or(cfg.Fillers, DefaultFillers)),
		obs:     cfg.Observer, log: cfg.Log, wake: make(chan struct{}, 1), hold: max(0, cmp.Or(cfg.RefillHold, DefaultRefillHold)),
		ready: map[string][]Box{}, filling: map[string]int{},
	}
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	for _, s := range cfg.Sizes {
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

// Owner is the pool's owner name (label cws.pool.owner).
func (p *Pool) Owner() string { return p.owner }

// MaxAge is how long a pooled sandbox may wait for a session.
func (p *Pool) MaxAge() time.Duration { return p.maxAge }

// Observer is where the pool's measures go (never nil).
func (p *Pool) Observer() Observer { return p.obs }

// Serves reports whether image has a pool.
func (p *Pool) Serves(image string) bool { return p.sizes[image] > 0 }

// Ready is how many pooled sandboxes of image are ready to be handed out.
func (p *Pool) Ready(image string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready[image])
}

// Take removes and returns one ready sandbox of image, and says why not otherwise (a
// Miss* reason). fits says whether the spec is of the pool's class; the driver, which
// knows its defaults, decides.
func (p *Pool) Take(image string, fits bool) (Box, string) {
	if p.sizes[image] == 0 {
		return Box{}, MissNoPool
	}
	if !fits {
		return Box{}, MissClass
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	boxes := p.ready[image]
	// The oldest first, so that none waits long; too old ones are left to expire().
	for i, b := range boxes {
		if time.Since(b.Made) < p.maxAge {
			p.taken.Store(time.Now().UnixNano()) // before the refill it wakes
			p.ready[image] = slices.Delete(boxes, i, i+1)
			p.obs.PoolReady(image, len(p.ready[image]))
			return b, ""
		}
	}
	return Box{}, MissEmpty
}

// Missed records a miss: the image of a MissNoPool is "".
func (p *Pool) Missed(image, reason string) {
	if reason == MissNoPool {
		image = ""
	}
	p.obs.PoolMiss(image, reason)
}

// HandOver records a hit and keeps a bound sandbox's pre-opened stream for its first
// Attach.
func (p *Pool) HandOver(image string, b Box) {
	if b.Stream != nil {
		p.streams.Store(b.ID, b.Stream)
	}
	p.obs.PoolHit(image)
}

// Preopened returns (once) the pre-opened agent stream of a sandbox handed out from
// the pool, or nil.
func (p *Pool) Preopened(id string) io.ReadWriteCloser {
	if s, ok := p.streams.LoadAndDelete(id); ok {
		return s.(io.ReadWriteCloser)
	}
	return nil
}

// DropStream closes the pre-opened stream of a sandbox being removed, if unused.
func (p *Pool) DropStream(id string) {
	if s := p.Preopened(id); s != nil {
		s.Close()
	}
}

// Signal asks the refill loop to look at the pool now.
func (p *Pool) Signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Unready removes sandbox id from the ready ones, and reports whether it was there.
func (p *Pool) Unready(id string) (Box, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for img, boxes := range p.ready {
		for i, b := range boxes {
			if b.ID == id {
				p.ready[img] = slices.Delete(boxes, i, i+1)
				p.obs.PoolReady(img, len(p.ready[img]))
				return b, true
			}
		}
	}
	return Box{}, false
}

// Room reports whether image's pool has room for one more sandbox.
func (p *Pool) Room(image string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sizes[image] > 0 && len(p.ready[image])+p.filling[image] < p.sizes[image]
}

// Adopt takes b, a healthy pooled sandbox of image that an earlier run made, into the
// pool if it has room and b is young enough. It reports whether it did.
func (p *Pool) Adopt(image string, b Box) bool {
	p.mu.Lock()
	if p.sizes[image] == 0 || len(p.ready[image])+p.filling[image] >= p.sizes[image] || time.Since(b.Made) >= p.maxAge {
		p.mu.Unlock()
		return false
	}
	p.ready[image] = append(p.ready[image], b)
	n := len(p.ready[image])
	p.mu.Unlock()
	p.obs.PoolReady(image, n)
	return true
}

// Run sweeps the engine (adopting this owner's healthy pooled sandboxes, removing
// broken ones) and then keeps every pool full until ctx ends, then waits for the fills
// under way. Without pools configured it returns at once.
func (p *Pool) Run(ctx context.Context, e Engine) {
	if len(p.sizes) == 0 {
		return
	}
	if err := e.Sweep(ctx, true); err != nil {
		p.log.Warn("pool reconcile", "err", err)
	}
	defer p.fills.Wait()
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		p.refill(ctx, e)
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-t.C:
			p.expire(ctx, e)
			if err := e.Sweep(ctx, false); err != nil {
				p.log.Warn("pool clean", "err", err)
			}
		}
	}
}

// refill starts the fills that the pools lack, within the global cap. Each fill runs
// in its own goroutine, bounded by the fillers semaphore.
func (p *Pool) refill(ctx context.Context, e Engine) {
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
			p.fillOne(ctx, e, img)
		}()
	}
}

// fillOne makes one pooled sandbox of image and adds it to the pool.
func (p *Pool) fillOne(ctx context.Context, e Engine, image string) {
	done := func(b *Box) {
		p.mu.Lock()
		p.filling[image]--
		if b != nil {
			p.ready[image] = append(p.ready[image], *b)
		}
		n := len(p.ready[image])
		p.mu.Unlock()
		p.obs.PoolReady(image, n)
	}
	if p.waitHold(ctx) != nil {
		done(nil)
		return
	}
	select {
	case p.fillers <- struct{}{}:
	case <-ctx.Done():
		done(nil)
		return
	}
	b, err := e.Make(ctx, image)
	<-p.fillers
	if err != nil {
		// No signal: a broken image is tried again on the next tick, not in a loop.
		done(nil)
		if ctx.Err() == nil {
			p.obs.PoolFillFailed(image)
			p.log.Warn("pool fill failed", "image", image, "err", err)
		}
		return
	}
	done(&b)
	p.Signal()
}

// TakenAt is when a sandbox was last taken from the pool (zero: never).
func (p *Pool) TakenAt() time.Time {
	if t := p.taken.Load(); t != 0 {
		return time.Unix(0, t)
	}
	return time.Time{}
}

// holdLeft is how long a fill starting at now still waits after the last take.
func (p *Pool) holdLeft(now time.Time) time.Duration {
	t := p.taken.Load()
	if t == 0 {
		return 0
	}
	// At most the hold, whatever the wall clock did since the take.
	return min(p.hold, max(0, time.Unix(0, t).Add(p.hold).Sub(now)))
}

// waitHold waits out the hold after the last take as it stands when the fill starts,
// or until ctx ends (its error). It waits once: under a steady stream of takes
// (sessions created faster than one a second) a hold that a later take extended would
// never let the pool refill.
func (p *Pool) waitHold(ctx context.Context) error {
	w := p.holdLeft(time.Now())
	if w <= 0 {
		return nil
	}
	t := time.NewTimer(w)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// expire removes the ready sandboxes that waited longer than the max age; the refill
// replaces them.
func (p *Pool) expire(ctx context.Context, e Engine) {
	var old []Box
	p.mu.Lock()
	for img, boxes := range p.ready {
		keep := boxes[:0]
		for _, b := range boxes {
			if time.Since(b.Made) >= p.maxAge {
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
		b.Close()
		p.log.Info("pooled sandbox too old, replacing it", "sandbox", b.ID)
		if err := e.Remove(ctx, b.ID); err != nil {
			p.log.Warn("remove old pooled sandbox", "sandbox", b.ID, "err", err)
		}
	}
}

type nopObserver struct{}

func (nopObserver) PoolReady(string, int)   {}
func (nopObserver) PoolHit(string)          {}
func (nopObserver) PoolMiss(string, string) {}
func (nopObserver) PoolFillFailed(string)   {}

// Filling is how many pooled sandboxes of image are being made.
func (p *Pool) Filling(image string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.filling[image]
}

// ReadyIDs are the ids of image's ready sandboxes, oldest first.
func (p *Pool) ReadyIDs(image string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.ready[image]))
	for _, b := range p.ready[image] {
		ids = append(ids, b.ID)
	}
	return ids
}

// HasStream reports whether a handed-out sandbox's pre-opened stream still waits for
// its first Attach.
func (p *Pool) HasStream(id string) bool {
	_, ok := p.streams.Load(id)
	return ok
}

// Serve creates spec's sandbox from a ready pooled one when one fits (fits: the spec is
// of the pool's class, as the driver judges): it takes one, wakes the refill, and has
// bind give it to the session. ok is false when the create must go cold: nothing fits,
// or the bind failed for a reason other than the session existing already or ctx
// ending. A box whose bind failed is never handed out again: remove removes it.
func (p *Pool) Serve(ctx context.Context, spec sandbox.Spec, fits bool,
	bind func(context.Context, Box) (sandbox.Info, error), remove func(context.Context, string) error) (info sandbox.Info, ok bool, err error) {
	b, miss := p.Take(spec.Image, fits)
	if miss != "" {
		p.Missed(spec.Image, miss)
		return sandbox.Info{}, false, nil
	}
	p.Signal()
	info, err = bind(ctx, b)
	if err != nil {
		b.Close()
		p.log.Warn("bind of a pooled sandbox failed; removing it", "sandbox", b.ID, "session", spec.Session, "err", err)
		if rerr := remove(context.WithoutCancel(ctx), b.ID); rerr != nil {
			p.log.Warn("remove pooled sandbox after a failed bind", "sandbox", b.ID, "err", rerr)
		}
		if errors.Is(err, sandbox.ErrExists) || ctx.Err() != nil {
			return sandbox.Info{}, true, err
		}
		p.Missed(spec.Image, MissBind)
		return sandbox.Info{}, false, nil
	}
	p.HandOver(spec.Image, b)
	return info, true, nil
}
