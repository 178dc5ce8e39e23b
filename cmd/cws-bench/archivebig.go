package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/cwsdev/cws/internal/bench"
)

// The archivebig section: a node_modules-sized tree, 100,000 files / 500 MB, archived
// to S3 and woken, beside tar -c and tar -x of the same tree in the same volume. It
// takes minutes on a store that writes one object per file; it logs its progress, and
// `-only archive` leaves it out.

func init() {
	sections = append(sections, section{
		Name:  "archivebig",
		Order: 97,
		Doc:   "archive and wake of a 100,000-file / 500 MB tree on S3 (SeaweedFS behind a counting proxy), Docker, vs tar -c / tar -x of it in the volume; its PUTs (minutes: skip it with -only)",
		Run:   benchArchiveBig,
	})
	goals = append(goals,
		goal{Order: 81, Figure: "archive of 100,000 files / 500 MB to S3", Row: rowArchiveBig, Anchor: rowTarCBig, MaxP50: 20 * time.Second},
		goal{Order: 82, Figure: "its wake from S3, first readFile", Row: rowWakeBig, Anchor: rowTarXBig, MaxP50: 20 * time.Second},
		goal{Order: 83, Figure: "S3 PUTs to archive 100,000 files / 500 MB", Row: rowPutsBig, Anchor: rowBudgetBig, Unit: "PUTs", MaxCount: 80},
		goal{Order: 84, Figure: "S3 GETs to wake it", Row: rowGetsBig, Anchor: rowBudgetBig, Unit: "GETs"},
	)
}

const (
	rowArchiveBig = "archive 100,000 files / 500 MB to S3"
	rowWakeBig    = "wake archived from S3, 100,000 files / 500 MB: first readFile"
	rowTarCBig    = "tar -c of the same 100,000-file tree"
	rowTarXBig    = "tar -x of the same 100,000-file tree into a workspace volume"
	rowPutsBig    = "S3 PUTs to archive 100,000 files / 500 MB"
	rowGetsBig    = "S3 GETs to wake 100,000 files / 500 MB"
	rowBudgetBig  = "S3 request budget for 500 MB: B / 8 MiB + 10"
)

// bigReadyTimeout is the big section's ReadyTimeout: its wakes may take 17 min.
const bigReadyTimeout = 15 * time.Minute

const (
	bigFiles = 100_000
	bigMean  = 5_000 // bytes: 100,000 files make 500 MB
)

// bigTree writes a tar of files files to w, sizes drawn from an exponential
// distribution of mean bigMean (many small files, a few large ones, as a
// node_modules), contents pseudo-random (they do not compress), in 100 × 10
// directories. seed makes the same tree each time.
func bigTree(w io.Writer, files int, seed uint64, progress func(i int)) error {
	tw := tar.NewWriter(w)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	src := rand.NewChaCha8([32]byte{byte(seed), 'c', 'w', 's'})
	buf := make([]byte, 1<<20)
	for i := range files {
		n := min(int(rng.ExpFloat64()*bigMean), len(buf))
		name := fmt.Sprintf("m%03d/s%d/f%06d.dat", i%100, i/100%10, i)
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(n), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, _ = src.Read(buf[:n])
		if _, err := tw.Write(buf[:n]); err != nil {
			return err
		}
		if progress != nil && (i+1)%10_000 == 0 {
			progress(i + 1)
		}
	}
	return tw.Close()
}

func benchArchiveBig(ctx context.Context, e *env) ([]bench.Row, error) {
	rig, err := startS3Rig(ctx, e)
	if err != nil {
		return nil, err
	}
	defer rig.close()
	log, restores := newRestoreLog(e)
	// A wake's deadline is ReadyTimeout + 2 min: 3 min by default, which a store that
	// reads one object per file does not meet for 100,000 files (the wake fails and
	// the next call starts it again). Raised, so that the figure is the wake's time.
	a := newArchSvc(e, e.driver, rig.store, e.image, log, bigReadyTimeout)
	defer a.close(ctx)
	id, err := a.create(ctx)
	if err != nil {
		return nil, err
	}
	e.logf("archivebig: uploading %s files / about 500 MB…", thousands(bigFiles))
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(bigTree(pw, bigFiles, 31, func(i int) { e.logf("archivebig: %s files uploaded…", thousands(int64(i))) }))
	}()
	_, err = a.svc.Upload(ctx, a.caller, id, pr)
	pr.CloseWithError(err)
	if err != nil {
		return nil, err
	}

	var rows []bench.Row
	box, err := a.sandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	user, err := workspaceOwner(ctx, box)
	if err != nil {
		return nil, err
	}
	e.logf("archivebig: tar -c and tar -x of the tree in the container…")
	c, err := timeInBox(ctx, box, user, anchorC)
	if err != nil {
		return nil, err
	}
	e.logf("archivebig: tar -c %s", bench.Format(c))
	rows = append(rows, note(bench.Summarize(rowTarCBig, []time.Duration{c}), "GNU tar of /workspace in the container, piped to cat >/dev/null; timed inside"))
	x, err := tarX(ctx, box, 1)
	if err != nil {
		return rows, err
	}
	e.logf("archivebig: tar -x %s", bench.Format(x[0]))
	rows = append(rows, note(bench.Summarize(rowTarXBig, x), "GNU tar in the container, from a tar file in /workspace (page-cached) into a new directory of it; timed inside"))

	e.logf("archivebig: archiving (one line every 15 s)…")
	c0, t0 := rig.counts(), time.Now()
	stop := progressEvery(e, 15*time.Second, func() string {
		return fmt.Sprintf("archivebig: archiving for %s: %v", time.Since(t0).Round(time.Second), rig.counts().Sub(c0))
	})
	s, err := a.archive(ctx, id)
	stop()
	took := time.Since(t0)
	if err != nil {
		return rows, err
	}
	puts := rig.counts().Sub(c0)
	e.logf("archivebig: archived in %s: %v", took.Round(time.Millisecond), puts)

	e.logf("archivebig: waking (one line every 15 s)…")
	c1, t1 := rig.counts(), time.Now()
	stop = progressEvery(e, 15*time.Second, func() string {
		return fmt.Sprintf("archivebig: waking for %s: %v", time.Since(t1).Round(time.Second), rig.counts().Sub(c1))
	})
	err = a.read(ctx, id, "m000/s0/f000000.dat")
	stop()
	woke := time.Since(t1)
	if err != nil { // a figure too: the time it failed after, and why
		e.logf("archivebig: %v", err)
		return append(rows, note(bench.Summarize(rowArchiveBig, []time.Duration{took}), size(s)),
			note(bench.Summarize(rowWakeBig, []time.Duration{woke}), fmt.Sprintf("did NOT wake (the time is until it failed): %.300v", err)),
			bench.Row{Name: rowPutsBig, N: 1, Rate: float64(puts.Put), Note: puts.String()}), nil
	}
	gets := rig.counts().Sub(c1)
	e.logf("archivebig: woke in %s: %v", woke.Round(time.Millisecond), gets)
	restore := "the service logged no restore timing"
	if ready, r, ok := restores.last(); ok {
		restore = fmt.Sprintf("the container ready after %s, the restore %s (the service's log)", bench.Format(ready), bench.Format(r))
	}
	rows = append(rows,
		note(bench.Summarize(rowArchiveBig, []time.Duration{took}), fmt.Sprintf("%s: suspend, then the reaper archives (container started, tar out, every file stored)", size(s))),
		note(bench.Summarize(rowWakeBig, []time.Duration{woke}), "a new container (no pool), the archive restored, readFile; "+restore+
			fmt.Sprintf("; the service's ReadyTimeout raised to %v (by default a wake gives up after 3 min)", bigReadyTimeout)),
		bench.Row{Name: rowPutsBig, N: 1, Rate: float64(puts.Put), Note: fmt.Sprintf("%v, %.0f MB up", puts, float64(s.Stored)/1e6)},
		bench.Row{Name: rowGetsBig, N: 1, Rate: float64(gets.Get), Note: fmt.Sprintf("%v, %.0f MB down", gets, float64(gets.Bytes)/1e6)},
		bench.Row{Name: rowBudgetBig, N: 1, Rate: budget(s.Bytes), Note: fmt.Sprintf("B = %d bytes of files", s.Bytes)})
	return rows, nil
}
