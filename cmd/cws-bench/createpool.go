package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/version"
)

func init() {
	sections = append(sections,
		section{
			Name:  "create-par",
			Order: 91,
			Doc:   "cold session create→ready, 10 and 50 at once (no pool)",
			Run:   benchCreateParallel,
		},
		section{
			Name:  "pool",
			Order: 92,
			Doc:   "session create→ready from a warm pool: one at a time, and 50 at once",
			Run:   benchPool,
		})
	goals = append(goals,
		goal{Order: 30, Figure: "session create→ready, warm pool, p50", Row: "create→ready from the pool", Anchor: "docker run -d", MaxP50: 30 * time.Millisecond},
		goal{Order: 31, Figure: "session create→ready, cold, p50", Row: "session create→ready", Anchor: "docker run -d", Slower: 1},
		goal{Order: 32, Figure: fmt.Sprintf("%d session creates at once, warm pool (wall)", parallelCreates), Row: wallRow(parallelCreates, "from the pool"),
			Anchor: fmt.Sprintf("%d × docker run -d at once", parallelCreates), MaxP50: 5 * time.Second},
		goal{Order: 33, Figure: fmt.Sprintf("%d session creates at once, cold (wall)", parallelCreates), Row: wallRow(parallelCreates, "cold"),
			Anchor: fmt.Sprintf("%d × docker run -d at once", parallelCreates)},
	)
}

// wallRow names the row of the wall time of n creates at once.
func wallRow(n int, what string) string { return fmt.Sprintf("%d creates at once, %s: wall", n, what) }

func benchCreateParallel(ctx context.Context, e *env) ([]bench.Row, error) {
	warm, err := e.newBox(ctx) // warm-up: fills the agent volume
	if err != nil {
		return nil, err
	}
	e.remove(ctx, warm)
	var rows []bench.Row
	for _, n := range []int{e.iterations(10), e.iterations(50)} {
		e.logf("create-par: %d cold creates at once…", n)
		r, w, err := createWave(ctx, e, e.driver, n, "cold")
		rows = append(rows, r, w)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

func benchPool(ctx context.Context, e *env) ([]bench.Row, error) {
	size := e.iterations(50)
	obs := &countHits{}
	d, err := docker.New(docker.Config{AgentBinary: e.agentBin, StopTimeout: time.Second, Instance: "bench-pool",
		Pool: []docker.PoolSize{{Image: e.image, Size: size}}, PoolObserver: obs})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.RunPool(pctx) }()
	defer func() {
		stop()
		<-done
		e.logf("pool: removing the pooled containers…")
		// What is still pooled is left for the next run's reconcile to adopt; remove
		// it instead, so that the bench leaves nothing behind.
		removePooled(context.WithoutCancel(ctx), d, e.image)
	}()

	fill := func() error {
		e.logf("pool: filling %d…", size)
		for d.PoolReady(e.image) < size {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	}
	if err := fill(); err != nil {
		return nil, err
	}
	n := e.iterations(10)
	e.logf("pool: %d hand-outs one at a time…", n)
	var samples, creates []time.Duration
	var boxes []*box
	for range n {
		start := time.Now()
		info, err := d.Create(ctx, sandbox.Spec{Session: session(), Tenant: "cws-bench", Image: e.image})
		if err != nil {
			return nil, err
		}
		creates = append(creates, time.Since(start))
		b := readyBox(d, info.ID)
		boxes = append(boxes, b)
		if err := ready(ctx, b.Client); err != nil {
			return nil, err
		}
		samples = append(samples, time.Since(start))
		// Let the refill finish before the next hand-out, as between real creates.
		for d.PoolReady(e.image) < size && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
	}
	one := bench.Summarize("create→ready from the pool", samples)
	one.Note = fmt.Sprintf("%d of %d hits; driver.Create + first Ping", obs.hits.Load(), n)
	bind := bench.Summarize("driver.Create from the pool", creates)
	bind.Note = "rename + bind record (+ docker update when the limits differ)"
	for _, b := range boxes {
		removeBox(ctx, d, b)
	}
	if err := fill(); err != nil {
		return []bench.Row{bind, one}, err
	}
	obs.hits.Store(0)
	e.logf("pool: %d hand-outs at once…", size)
	wave, wall, err := createWave(ctx, e, d, size, "from the pool")
	wave.Note += fmt.Sprintf("; %d hits", obs.hits.Load())
	return []bench.Row{bind, one, wave, wall}, err
}

// createWave creates n sandboxes at once (create→ready each), then removes them. It
// returns the row of each create's time, and the row of the wall time until all ran.
func createWave(ctx context.Context, e *env, d *docker.Driver, n int, what string) (bench.Row, bench.Row, error) {
	var (
		mu      sync.Mutex
		samples []time.Duration
		boxes   []*box
		first   error
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			b, err := boxOf(ctx, d, e.image)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmpErr(first, err)
				return
			}
			samples = append(samples, time.Since(t))
			boxes = append(boxes, b)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	r := bench.Summarize(fmt.Sprintf("create→ready, %d at once (%s)", n, what), samples)
	r.Note = fmt.Sprintf("all %d ready after %.2f s", len(samples), wall.Seconds())
	w := bench.Summarize(wallRow(n, what), []time.Duration{wall})
	w.Note = fmt.Sprintf("%d of %d ready", len(samples), n)
	if len(samples) < n {
		w.N = 0 // not all made it: no wall time to compare
	}
	e.logf("removing %d sandboxes…", len(boxes))
	var rg sync.WaitGroup
	for _, b := range boxes {
		rg.Add(1)
		go func() { defer rg.Done(); removeBox(ctx, d, b) }()
	}
	rg.Wait()
	return r, w, first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// boxOf creates a sandbox on d and waits until its agent answers.
func boxOf(ctx context.Context, d *docker.Driver, image string) (*box, error) {
	info, err := d.Create(ctx, sandbox.Spec{Session: session(), Tenant: "cws-bench", Image: image})
	if err != nil {
		return nil, err
	}
	b := readyBox(d, info.ID)
	if err := ready(ctx, b.Client); err != nil {
		removeBox(ctx, d, b)
		return nil, err
	}
	return b, nil
}

// readyBox is a box with a client of sandbox id on d, not yet connected.
func readyBox(d *docker.Driver, id string) *box {
	return &box{ID: id, Client: agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		return d.Attach(ctx, id)
	}, version.Version, nil)}
}

func removeBox(ctx context.Context, d *docker.Driver, b *box) {
	b.Client.Close()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = d.Remove(ctx, b.ID)
}

// removePooled hands out and removes what is left in d's pool.
func removePooled(ctx context.Context, d *docker.Driver, image string) {
	var wg sync.WaitGroup
	for range d.PoolReady(image) {
		info, err := d.Create(ctx, sandbox.Spec{Session: session(), Tenant: "cws-bench", Image: image})
		if err != nil {
			return
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = d.Remove(ctx, info.ID) }()
	}
	wg.Wait()
}

// countHits counts pool hits.
type countHits struct{ hits atomic.Int64 }

func (c *countHits) PoolReady(string, int)   {}
func (c *countHits) PoolHit(string)          { c.hits.Add(1) }
func (c *countHits) PoolMiss(string, string) {}
func (c *countHits) PoolFillFailed(string)   {}
