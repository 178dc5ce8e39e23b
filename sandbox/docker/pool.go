package docker

import (
	"context"
	"strings"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/pool"
)

// The warm pool: the books and the refill loop are sandbox/pool's; this driver makes
// pooled containers (poolfill.go), binds them to sessions (bind.go) and sweeps them
// (poolreconcile.go).
//
// A pooled container is made exactly like a session's (containerConfig: hardened,
// agent injected, started, and its agent has answered a ping), but it belongs to no
// session yet: it carries cws.pool=<image> and no session, tenant or subject label,
// and List never reports it. Create takes one whose limit class matches the spec,
// binds it to the session and applies the spec's cpu, memory and pids with
// `docker update`. Pools are made with the driver's defaults, no network, the default
// user and no extra environment: the policy defaults.

// Labels of pooled containers (besides cws.managed, cws.instance and cws.image).
const (
	LabelPool      = pool.LabelPool
	LabelPoolClass = pool.LabelPoolClass
	LabelPoolOwner = pool.LabelPoolOwner
)

// poolPrefix starts the name of a pooled container that is not bound to a session.
const poolPrefix = "cws-pool-"

// Pool settings and measures, as sandbox/pool has them.
type (
	PoolSize     = pool.Size
	PoolObserver = pool.Observer
)

// DefaultPoolFillers and DefaultPoolMaxAge are Config.PoolFillers and PoolMaxAge when
// zero.
const (
	DefaultPoolFillers = pool.DefaultFillers
	DefaultPoolMaxAge  = pool.DefaultMaxAge
)

// Reasons of PoolMiss.
const (
	MissNoPool = pool.MissNoPool
	MissEmpty  = pool.MissEmpty
	MissClass  = pool.MissClass
	MissBind   = pool.MissBind
)

// MissReasons are the reasons of PoolMiss, for exporting them at 0.
var MissReasons = pool.MissReasons

// fits reports whether spec is of the class its image's pool is made in.
func (d *Driver) fits(spec sandbox.Spec) bool {
	c, ok := pool.ClassOf(spec, d.defaults)
	return ok && c == d.poolClassFor(spec.Image)
}

// poolClassFor is the class every pool of image is made in: the policy defaults.
func (d *Driver) poolClassFor(image string) pool.Class {
	c, _ := pool.ClassOf(sandbox.Spec{Image: image}, d.defaults)
	return c
}

// unboundName reports whether a container name (with or without Docker's leading
// slash) is a pooled container's that no session has taken.
func unboundName(name string) bool {
	return strings.HasPrefix(strings.TrimPrefix(name, "/"), poolPrefix)
}

// PoolReady is how many pooled containers of image are ready to be handed out.
func (d *Driver) PoolReady(image string) int { return d.pool.Ready(image) }

// poolEngine is the Driver as its pool's pool.Engine.
type poolEngine struct{ *Driver }

func (e poolEngine) Sweep(ctx context.Context, starting bool) error {
	return e.sweepPool(ctx, starting)
}
