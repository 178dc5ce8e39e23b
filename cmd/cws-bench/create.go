package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cwsdev/cws/internal/bench"
)

func init() {
	sections = append(sections, section{
		Name:  "create",
		Order: 90,
		Doc:   "session create→ready: driver.Create until the first successful Ping (Remove not timed)",
		Run:   benchCreate,
	})
}

func benchCreate(ctx context.Context, e *env) ([]bench.Row, error) {
	const name = "session create→ready"
	row := func(samples []time.Duration) bench.Row {
		r := bench.Summarize(name, samples)
		r.Note = "driver.Create + first Ping; Remove not timed"
		return r
	}
	n := e.iterations(10)
	var samples []time.Duration
	for i := range n + 1 { // the first one is a warm-up: it may fill the agent volume
		if i == 0 {
			e.logf("%s warm-up…", name)
		} else {
			e.logf("%s %d/%d…", name, i, n)
		}
		start := time.Now()
		b, err := e.newBox(ctx)
		if err != nil {
			return []bench.Row{row(samples)}, fmt.Errorf("create %d: %w", i, err)
		}
		if i > 0 {
			samples = append(samples, time.Since(start))
		}
		e.remove(ctx, b)
	}
	return []bench.Row{row(samples)}, nil
}
