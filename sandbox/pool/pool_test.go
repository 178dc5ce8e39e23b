package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
)

// fakeEngine makes boxes in memory; the drivers' own pool tests run the real engines.
type fakeEngine struct {
	n       atomic.Int64
	fail    atomic.Bool
	mu      sync.Mutex
	removed []string
	sweeps  []bool
}

func (e *fakeEngine) Make(ctx context.Context, image string) (Box, error) {
	if e.fail.Load() {
		return Box{}, errors.New("engine says no")
	}
	return Box{ID: fmt.Sprintf("%s-%d", image, e.n.Add(1)), Made: time.Now()}, nil
}

func (e *fakeEngine) Remove(ctx context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.removed = append(e.removed, id)
	return nil
}

func (e *fakeEngine) Sweep(ctx context.Context, starting bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sweeps = append(e.sweeps, starting)
	return nil
}

func waitReady(t *testing.T, p *Pool, image string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); p.Ready(image) != n; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d ready, want %d", image, p.Ready(image), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func run(t *testing.T, p *Pool, e Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx, e) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestPoolFillsTakesAndRefills(t *testing.T) {
	e := &fakeEngine{}
	p := New(Config{Sizes: []Size{{"a", 2}, {"b", 1}}})
	run(t, p, e)
	waitReady(t, p, "a", 2)
	waitReady(t, p, "b", 1)
	if e.sweeps[0] != true {
		t.Errorf("first sweep starting=%v, want true (before any fill)", e.sweeps[0])
	}
	b, miss := p.Take("a", true)
	if miss != "" || b.ID == "" {
		t.Fatalf("Take = %+v, %q", b, miss)
	}
	p.Signal()
	waitReady(t, p, "a", 2) // refilled
	for _, id := range p.ReadyIDs("a") {
		if id == b.ID {
			t.Errorf("%s handed out and still ready", id)
		}
	}
}

func TestPoolMisses(t *testing.T) {
	p := New(Config{Sizes: []Size{{"a", 1}}})
	if _, miss := p.Take("other", true); miss != MissNoPool {
		t.Errorf("no pool: %q", miss)
	}
	if _, miss := p.Take("a", false); miss != MissClass {
		t.Errorf("class: %q", miss)
	}
	if _, miss := p.Take("a", true); miss != MissEmpty {
		t.Errorf("empty: %q", miss)
	}
}

func TestPoolAdoptRespectsRoomAndAge(t *testing.T) {
	p := New(Config{Sizes: []Size{{"a", 1}}, MaxAge: time.Minute})
	if p.Adopt("a", Box{ID: "old", Made: time.Now().Add(-2 * time.Minute)}) {
		t.Error("adopted a box older than the max age")
	}
	if !p.Adopt("a", Box{ID: "x", Made: time.Now()}) {
		t.Fatal("did not adopt into an empty pool")
	}
	if p.Adopt("a", Box{ID: "y", Made: time.Now()}) || p.Room("a") {
		t.Error("adopted past the pool's size")
	}
	if p.Adopt("nopool", Box{ID: "z", Made: time.Now()}) {
		t.Error("adopted for an image without a pool")
	}
	if _, ok := p.Unready("x"); !ok || p.Ready("a") != 0 {
		t.Error("Unready did not take x out")
	}
}

func TestPoolExpireRemovesOldBoxes(t *testing.T) {
	e := &fakeEngine{}
	p := New(Config{Sizes: []Size{{"a", 1}}, MaxAge: time.Minute})
	p.Adopt("a", Box{ID: "x", Made: time.Now()})
	p.ready["a"][0].Made = time.Now().Add(-time.Hour)
	if _, miss := p.Take("a", true); miss != MissEmpty {
		t.Errorf("a too old box was handed out (%q)", miss)
	}
	p.expire(context.Background(), e)
	if p.Ready("a") != 0 || len(e.removed) != 1 || e.removed[0] != "x" {
		t.Errorf("after expire: ready %d, removed %v", p.Ready("a"), e.removed)
	}
}

func TestPoolFailedFillIsCountedNotLooped(t *testing.T) {
	e := &fakeEngine{}
	e.fail.Store(true)
	obs := &countObs{}
	p := New(Config{Sizes: []Size{{"a", 1}}, Observer: obs})
	run(t, p, e)
	for deadline := time.Now().Add(5 * time.Second); obs.failed.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no fill failure reported")
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := obs.failed.Load(); n != 1 {
		t.Errorf("%d failed fills in 50 ms, want 1 (retried on the tick, not in a loop)", n)
	}
}

func TestClassOf(t *testing.T) {
	def := sandbox.Limits{NoFile: 4, FileSizeBytes: 5, TmpSizeBytes: 6}
	c, ok := ClassOf(sandbox.Spec{Image: "a"}, def)
	if !ok || c != (Class{Image: "a", User: sandbox.DefaultUser, NoFile: 4, FileSize: 5, TmpSize: 6}) {
		t.Errorf("ClassOf = %+v, %v", c, ok)
	}
	if _, ok := ClassOf(sandbox.Spec{Image: "a", Env: map[string]string{"X": "1"}}, def); ok {
		t.Error("a spec with its own environment fits a pool")
	}
	c2, _ := ClassOf(sandbox.Spec{Image: "a", Network: true}, def)
	if c2.Key() == c.Key() {
		t.Error("network on and off share a class key")
	}
}

type countObs struct{ failed atomic.Int64 }

func (*countObs) PoolReady(string, int)   {}
func (*countObs) PoolHit(string)          {}
func (*countObs) PoolMiss(string, string) {}
func (o *countObs) PoolFillFailed(string) { o.failed.Add(1) }

// TestServe: a hit binds and hands over; a failed bind removes the box and goes cold,
// except when the session exists already, which is the caller's error.
func TestServe(t *testing.T) {
	obs := &countMiss{}
	p := New(Config{Sizes: []Size{{"a", 3}}, Observer: obs})
	for _, id := range []string{"x", "y", "z"} {
		p.Adopt("a", Box{ID: id, Made: time.Now()})
	}
	spec := sandbox.Spec{Session: "s", Image: "a"}
	var removed []string
	remove := func(_ context.Context, id string) error { removed = append(removed, id); return nil }
	ok := func(_ context.Context, b Box) (sandbox.Info, error) { return sandbox.Info{ID: b.ID, Session: "s"}, nil }
	info, hit, err := p.Serve(context.Background(), spec, true, ok, remove)
	if !hit || err != nil || info.ID != "x" {
		t.Errorf("hit: %+v %v %v", info, hit, err)
	}
	fail := func(context.Context, Box) (sandbox.Info, error) { return sandbox.Info{}, errors.New("engine says no") }
	if _, hit, err := p.Serve(context.Background(), spec, true, fail, remove); hit || err != nil || obs.bind != 1 {
		t.Errorf("failed bind: hit %v err %v, %d bind misses; want a cold create and one", hit, err, obs.bind)
	}
	exists := func(context.Context, Box) (sandbox.Info, error) { return sandbox.Info{}, sandbox.ErrExists }
	if _, hit, err := p.Serve(context.Background(), spec, true, exists, remove); !hit || !errors.Is(err, sandbox.ErrExists) {
		t.Errorf("existing session: hit %v err %v; want the error, not a cold create", hit, err)
	}
	if len(removed) != 2 || removed[0] != "y" || removed[1] != "z" {
		t.Errorf("removed %v, want the two boxes whose bind failed", removed)
	}
	if _, hit, _ := p.Serve(context.Background(), spec, false, ok, remove); hit || obs.class != 1 {
		t.Errorf("a spec of another class: hit %v, %d class misses", hit, obs.class)
	}
}

type countMiss struct{ bind, class int }

func (*countMiss) PoolReady(string, int) {}
func (*countMiss) PoolHit(string)        {}
func (o *countMiss) PoolMiss(_ string, reason string) {
	switch reason {
	case MissBind:
		o.bind++
	case MissClass:
		o.class++
	}
}
func (*countMiss) PoolFillFailed(string) {}

// TestRefillHold: the refill that a take wakes waits the hold from the take (the
// sandbox handed out runs first), not at all before any take or with the hold off, and
// gives up with its context.
func TestRefillHold(t *testing.T) {
	const hold = 300 * time.Millisecond
	e := &fakeEngine{}
	p := New(Config{Sizes: []Size{{"a", 1}}, RefillHold: hold})
	if w := p.holdLeft(time.Now()); w != 0 || !p.TakenAt().IsZero() {
		t.Errorf("no take yet: the refill waits %s (taken at %s), want 0", w, p.TakenAt())
	}
	run(t, p, e)
	waitReady(t, p, "a", 1) // the first fill does not wait
	t0 := time.Now()
	if _, miss := p.Take("a", true); miss != "" {
		t.Fatal(miss)
	}
	now := time.Now()
	for _, c := range []struct{ after, most time.Duration }{{0, hold}, {hold / 2, hold / 2}, {hold, 0}, {2 * hold, 0}} {
		if w := p.holdLeft(now.Add(c.after)); w > c.most || (c.most > 0 && w < c.most-now.Sub(t0)) {
			t.Errorf("%s after the take: the refill waits %s, want %s", c.after, w, c.most)
		}
	}
	p.Signal()
	waitReady(t, p, "a", 1)
	if took := time.Since(t0); took < hold {
		t.Errorf("the refill was ready %s after the take; it should have waited %s", took, hold)
	}

	off := New(Config{Sizes: []Size{{"a", 1}}, RefillHold: -1})
	run(t, off, &fakeEngine{})
	waitReady(t, off, "a", 1)
	off.Take("a", true)
	if w := off.holdLeft(time.Now()); w != 0 {
		t.Errorf("with the hold off the refill waits %s", w)
	}

	// A take while a fill waits does not hold it again (takes faster than one a hold
	// would starve the pool); a clock set back holds no longer.
	const long = time.Second // another take at half of it would make 1.5 s
	fresh := New(Config{Sizes: []Size{{"a", 1}}, RefillHold: long})
	start := time.Now()
	fresh.taken.Store(start.UnixNano())
	time.AfterFunc(long/2, func() { fresh.taken.Store(time.Now().UnixNano()) })
	if err := fresh.waitHold(t.Context()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < long || waited >= long*3/2 {
		t.Errorf("a take halfway through the hold: the fill waited %s, want the one hold %s", waited, long)
	}
	fresh.taken.Store(time.Now().Add(time.Hour).UnixNano())
	if w := fresh.holdLeft(time.Now()); w > long {
		t.Errorf("a take an hour ahead of the clock: the refill waits %s, want at most %s", w, long)
	}

	p.Take("a", true)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := p.waitHold(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("waitHold with its context ended = %v, want context.Canceled", err)
	}
}
