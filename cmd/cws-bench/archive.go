package main

import (
	"context"
	"fmt"
	"time"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/internal/s3proxy"
	"github.com/cwsdev/cws/sandbox/docker"
)

// The archive section: a session's archive in a real S3 server (SeaweedFS, behind a
// proxy that counts requests and can add a region's latency to each) and its wake,
// on the Docker driver with a warm pool of one, as cws serve --pool would run it.

func init() {
	sections = append(sections, section{
		Name:  "archive",
		Order: 96,
		Doc:   "archived wake of a 17 MB / 2,000-file workspace (files + .git) from S3 (SeaweedFS behind a counting proxy), Docker: first readFile, with 20 ms per request too; the restore vs tar -x; S3 requests to archive and wake",
		Run:   benchArchive,
	})
	goals = append(goals,
		goal{Order: 76, Figure: "archived wake of 17 MB / 2,000 files (files + .git) from S3, Docker, first readFile p50", Row: rowWakeS3, Anchor: rowTarX17, MaxP50: 400 * time.Millisecond},
		goal{Order: 77, Figure: "the same with 20 ms added to every S3 request", Row: rowWakeS3Slow, Anchor: rowTarX17, MaxP50: 600 * time.Millisecond},
		goal{Order: 78, Figure: "that wake's restore alone vs tar -x of the same tree into a workspace volume", Row: rowRestore17, Anchor: rowTarX17, Slower: 1.3},
		goal{Order: 79, Figure: "S3 PUTs to archive that workspace (B bytes)", Row: rowPuts17, Anchor: rowBudget17, Unit: "PUTs"},
		goal{Order: 80, Figure: "S3 GETs to wake it", Row: rowGets17, Anchor: rowBudget17, Unit: "GETs"},
	)
}

const (
	rowWakeS3     = "wake archived from S3, 17 MB / 2,000 files: first readFile"
	rowWakeS3Slow = "wake archived from S3 + 20 ms per request, 17 MB / 2,000 files: first readFile"
	rowRestore17  = "restore from S3, 17 MB / 2,000 files (the wake's own part)"
	rowTarX17     = "tar -x of the same 17 MB tree into a workspace volume"
	rowArchive17  = "archive 17 MB / 2,000 files to S3"
	rowPuts17     = "S3 PUTs to archive 17 MB / 2,000 files"
	rowGets17     = "S3 GETs to wake 17 MB / 2,000 files"
	rowBudget17   = "S3 request budget for 17 MB: B / 8 MiB + 10"
)

// regionDelay is what the proxy adds to every S3 request for the "+ 20 ms" row: a
// real region's round trip.
const regionDelay = 20 * time.Millisecond

func benchArchive(ctx context.Context, e *env) ([]bench.Row, error) {
	rig, err := startS3Rig(ctx, e)
	if err != nil {
		return nil, err
	}
	defer rig.close()
	hits := &countHits{}
	d, err := docker.New(docker.Config{AgentBinary: e.agentBin, StopTimeout: time.Second, Instance: "bench-archive",
		PoolOwner: "bench-archive", Pool: []docker.PoolSize{{Image: e.image, Size: 1}}, PoolObserver: hits})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	pctx, stopPool := context.WithCancel(ctx)
	poolDone := make(chan struct{})
	go func() { defer close(poolDone); d.RunPool(pctx) }()
	defer func() {
		stopPool()
		<-poolDone
		removePooled(context.WithoutCancel(ctx), d, e.image)
	}()
	poolReady := func() error {
		for d.PoolReady(e.image) < 1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	}
	log, restores := newRestoreLog(e)
	a := newArchSvc(e, d, rig.store, e.image, log, 0)
	defer a.close(ctx)

	id, err := a.create(ctx)
	if err != nil {
		return nil, err
	}
	e.logf("archive: 10 MB / 1,000 files and their git commit…")
	if err := a.fill17MB(ctx, id); err != nil {
		return nil, err
	}
	var rows []bench.Row
	n := e.iterations(5)
	var archives, wakes, slow, restored, readyT, paired []time.Duration
	var puts, gets s3proxy.Counts
	var snap string
	var bytes int64
	for i := range 2 * n {
		delay := time.Duration(0)
		if i >= n {
			delay = regionDelay
		}
		e.logf("archive: archive and wake %d/%d (%v added per S3 request)…", i+1, 2*n, delay)
		c0, t0 := rig.counts(), time.Now()
		s, err := a.archive(ctx, id)
		if err != nil {
			return rows, err
		}
		archives = append(archives, time.Since(t0))
		if i == 0 { // later archives find their contents stored already
			puts, snap, bytes = rig.counts().Sub(c0), size(s), s.Bytes
		}
		if err := poolReady(); err != nil {
			return rows, err
		}
		rig.proxy.SetDelay(delay)
		logged := restores.count()
		c1, t1 := rig.counts(), time.Now()
		err = a.read(ctx, id, "d00/f00000.bin")
		took := time.Since(t1)
		rig.proxy.SetDelay(0)
		if err != nil {
			return rows, err
		}
		if i == 0 {
			gets = rig.counts().Sub(c1)
		}
		ready, r, ok := restores.last()
		ok = ok && restores.count() > logged
		if ok {
			e.logf("archive: woke in %s (the sandbox ready after %s, the restore %s)", bench.Format(took), bench.Format(ready), bench.Format(r))
		}
		if delay > 0 {
			slow = append(slow, took)
			continue
		}
		wakes = append(wakes, took)
		if ok {
			restored, readyT = append(restored, r), append(readyT, ready)
		}
		// The anchor at the same moment: the file system's state (what was freed in the
		// last minutes) weighs on creating files as much as anything does. The pool's
		// refill (a container started a second after the take) is let finish first, so
		// that the anchor does not pay for it; the anchor's own tar file is made before
		// its timing, and its tree removed after (before the next archive).
		if err := poolReady(); err != nil {
			return rows, err
		}
		box, err := a.sandbox(ctx, id)
		if err != nil {
			return rows, err
		}
		x, err := tarX(ctx, box, 1)
		if err != nil {
			return rows, err
		}
		e.logf("archive: tar -x of the same tree in the woken container right after: %s", bench.Format(x[0]))
		paired = append(paired, x[0])
	}
	pool := fmt.Sprintf("%d of %d wakes took their container from the warm pool of 1", hits.hits.Load(), 2*n)
	rows = append(rows,
		note(bench.Summarize(rowWakeS3, wakes), fmt.Sprintf("%s (random bytes, git commit); a new container, the archive restored, readFile; %s", snap, pool)),
		note(bench.Summarize(rowWakeS3Slow, slow), fmt.Sprintf("the same, the proxy holding each S3 request %v", regionDelay)))
	if len(restored) > 0 {
		rows = append(rows, note(bench.Summarize(rowRestore17, restored),
			fmt.Sprintf("the service's own \"restore\" timing (its log), store read → agent's tar; the container was ready after %s (p50)", bench.Format(bench.Summarize("", readyT).P50))))
	} else {
		rows = append(rows, bench.Row{Name: rowRestore17, Note: "not measured: the service logged no \"archive restored\" timings"})
	}
	rows = append(rows,
		note(bench.Summarize(rowArchive17, archives), "suspend, then the reaper archives: container started, tar out, every file hashed and stored (only the first stores contents)"),
		bench.Row{Name: rowPuts17, N: 1, Rate: float64(puts.Put), Note: fmt.Sprintf("the first archive of %s: %v", snap, puts)},
		bench.Row{Name: rowGets17, N: 1, Rate: float64(gets.Get), Note: fmt.Sprintf("one wake: %v, %.1f MB down", gets, float64(gets.Bytes)/1e6)},
		bench.Row{Name: rowBudget17, N: 1, Rate: budget(bytes), Note: fmt.Sprintf("B = %d bytes of files (the archive's record)", bytes)},
		note(bench.Summarize(rowTarX17, paired), "GNU tar in the woken container right after each wake without the added delay, as the workspace's owner, from a tar file in /workspace (page-cached) into a new directory of it; timed inside (date +%s%N)"))
	return rows, nil
}
