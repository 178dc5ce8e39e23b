package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/cwsdev/cws/internal/bench"
)

func init() {
	sections = append(sections, section{
		Name:  "dockerrun",
		Order: 85,
		Doc:   "the anchor for session create: `docker run -d` of the same image, alone and 50 at once",
		Run:   benchDockerRun,
	})
}

// parallelCreates is how many creates the parallel rows start at once.
const parallelCreates = 50

// benchDockerRun times the docker CLI starting a detached container of the image (the
// plainest way to get a running container), then 50 of them at once. The containers are
// removed untimed.
func benchDockerRun(ctx context.Context, e *env) ([]bench.Row, error) {
	run := func(ctx context.Context) (string, error) {
		out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--network", "none", "--label", "cws.bench=anchor",
			e.image, "sleep", "infinity").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("docker run: %v: %s", err, strings.TrimSpace(string(out)))
		}
		return strings.TrimSpace(string(out)), nil
	}
	var ids []string
	defer func() {
		if len(ids) == 0 {
			return
		}
		e.logf("removing %d anchor containers…", len(ids))
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		_ = exec.CommandContext(ctx, "docker", append([]string{"rm", "-f"}, ids...)...).Run()
	}()

	n := e.iterations(10)
	e.logf("docker run -d × %d…", n)
	samples, err := bench.Run(ctx, 1, n, func(ctx context.Context) error {
		id, err := run(ctx)
		if id != "" {
			ids = append(ids, id)
		}
		return err
	})
	one := bench.Summarize("docker run -d", samples)
	one.Note = "docker CLI, same image, --network none; until the container runs"
	rows := []bench.Row{one}
	if err != nil {
		return rows, err
	}

	e.logf("%d × docker run -d at once…", parallelCreates)
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
	)
	start := time.Now()
	for range parallelCreates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := run(ctx)
			mu.Lock()
			defer mu.Unlock()
			if id != "" {
				ids = append(ids, id)
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	wall := bench.Summarize(fmt.Sprintf("%d × docker run -d at once", parallelCreates), []time.Duration{time.Since(start)})
	wall.Note = "wall time until all run"
	return append(rows, wall), firstErr
}
