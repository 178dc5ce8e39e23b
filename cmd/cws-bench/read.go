package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace/policy"
)

func init() {
	sections = append(sections, section{
		Name:  "read",
		Order: 10,
		Doc:   "read a file through the agent (socket path, and the exec stream), and in cws (local reads), vs a plain `docker exec cat`",
		Run:   benchRead,
	})
	ratios = append(ratios, ratio{Num: "docker exec cat 4 KiB", Den: "agent read 4 KiB", Target: 20})
	goals = append(goals,
		goal{Order: 20, Figure: "agent read 4 KiB: the socket path vs the exec stream", Row: "agent read 4 KiB", Anchor: "agent read 4 KiB, exec stream"},
		goal{Order: 21, Figure: "read 4 KiB answered in cws (local reads) vs by the agent", Row: "local read 4 KiB", Anchor: "agent read 4 KiB"})
}

func benchRead(ctx context.Context, e *env) ([]bench.Row, error) {
	b, err := e.sandbox(ctx)
	if err != nil {
		return nil, err
	}
	const small, large = 4 << 10, 1 << 20
	for _, f := range []struct {
		path string
		size int
	}{{"bench/f4k", small}, {"bench/f1m", large}} {
		content := make([]byte, f.size)
		_, _ = rand.Read(content)
		if _, err := b.Client.WriteFile(ctx, agent.WriteArgs{Path: f.path, Create: true, Mkdirs: true}, content); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	agentRead := func(path string, size int) func(context.Context) error {
		return func(ctx context.Context) error {
			got, _, err := b.Client.ReadFile(ctx, agent.ReadArgs{Path: path})
			if err == nil && len(got) != size {
				err = fmt.Errorf("read %d bytes of %s, want %d", len(got), path, size)
			}
			return err
		}
	}
	dockerCat := func(ctx context.Context) error {
		out, code, err := e.driver.Exec(ctx, b.ID, []string{"cat", "/workspace/bench/f4k"}, "")
		if err == nil && (code != 0 || len(out) != small) {
			err = fmt.Errorf("cat: exit %d, %d bytes", code, len(out))
		}
		return err
	}

	// The same container through the exec stream (docker exec of the bridge).
	viaExec := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return e.execDriver.Attach(ctx, b.ID) }, version.Version, nil)
	defer viaExec.Close()
	execRead := func(ctx context.Context) error {
		got, _, err := viaExec.ReadFile(ctx, agent.ReadArgs{Path: "bench/f4k"})
		if err == nil && len(got) != small {
			err = fmt.Errorf("read %d bytes, want %d", len(got), small)
		}
		return err
	}
	// The same container with local reads, as cws serve reads by default.
	var viaLocal *agent.Client
	if e.localReads != nil && e.transport == docker.TransportSocket {
		viaLocal = agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return e.driver.Attach(ctx, b.ID) }, version.Version, nil).WithLocal(e.localReads)
		defer viaLocal.Close()
	}
	localRead := func(path string, size int) func(context.Context) error {
		return func(ctx context.Context) error {
			got, _, err := viaLocal.ReadFile(ctx, agent.ReadArgs{Path: path, MaxSize: policy.DefaultMaxFileSize}) // as readFile asks
			if err == nil && len(got) != size {
				err = fmt.Errorf("read %d bytes of %s, want %d", len(got), path, size)
			}
			return err
		}
	}
	path := "over the agent's unix socket"
	if e.transport != docker.TransportSocket {
		path = "over the exec stream (docker exec bridge)"
	}

	runs := []struct {
		name      string
		note      string
		warmup, n int
		fn        func(context.Context) error
	}{
		{"agent read 4 KiB", "ReadFile " + path, 100, e.iterations(2000), agentRead("bench/f4k", small)},
		{"agent read 4 KiB, exec stream", "ReadFile over the exec stream: dockerd, containerd-shim, the bridge", 100, e.iterations(2000), execRead},
		{"docker exec cat 4 KiB", "driver.Exec slow path: a fresh `docker exec`", 3, e.iterations(50), dockerCat},
		{"agent read 1 MiB", "ReadFile " + path, 10, e.iterations(200), agentRead("bench/f1m", large)},
	}
	if viaLocal != nil {
		const note = "ReadFile answered in cws through the workspace root the agent sent (local reads)"
		runs = append(runs, []struct {
			name      string
			note      string
			warmup, n int
			fn        func(context.Context) error
		}{
			{"local read 4 KiB", note, 100, e.iterations(2000), localRead("bench/f4k", small)},
			{"local read 1 MiB", note, 10, e.iterations(200), localRead("bench/f1m", large)},
		}...)
	}
	var rows []bench.Row
	for _, r := range runs {
		e.logf("%s × %d…", r.name, r.n)
		samples, err := bench.Run(ctx, r.warmup, r.n, r.fn)
		row := bench.Summarize(r.name, samples)
		row.Note = r.note
		rows = append(rows, row)
		if err != nil {
			return rows, fmt.Errorf("%s: %w", r.name, err)
		}
	}
	return rows, nil
}
