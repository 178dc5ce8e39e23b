package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

func init() {
	sections = append(sections, section{
		Name:  "lifecycle",
		Order: 95,
		Doc:   "suspend and wake (vs docker start), archive and wake, snapshots of a 100 MB / 5,000-file workspace, fork into 4 (file snapshot store)",
		Run:   benchLifecycle,
	})
	goals = append(goals,
		goal{Order: 70, Figure: "wake of a suspended session (first readFile), p50, vs docker start", Row: "wake suspended: first readFile", Anchor: "docker start", Slower: 1.3},
		goal{Order: 71, Figure: "wake of an archived 10 MB / 1,000-file workspace, p50", Row: "wake archived 10 MB / 1,000 files: first readFile", MaxP50: 400 * time.Millisecond},
		goal{Order: 72, Figure: "snapshot of 100 MB / 5,000 files", Row: "snapshot 100 MB / 5,000 files", MaxP50: 2 * time.Second},
		goal{Order: 73, Figure: "snapshot again after one file changed", Row: "snapshot again, one file changed", MaxP50: 300 * time.Millisecond},
		goal{Order: 74, Figure: "new bytes stored by that second snapshot", Row: "stored by the second snapshot", MaxBytes: 1 << 20},
		goal{Order: 75, Figure: "fork of 100 MB / 5,000 files into 4 sessions (wall)", Row: "fork 100 MB / 5,000 files into 4", MaxP50: 3 * time.Second},
	)
}

// workspaceTar is a tar of files files of size bytes each (random, so compression
// does not flatter the figures), in 50 directories.
func workspaceTar(files, size int) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	content := make([]byte, size)
	for i := range files {
		_, _ = rand.Read(content)
		_ = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("d%02d/f%05d.bin", i%50, i), Mode: 0o644, Size: int64(size), Typeflag: tar.TypeReg})
		_, _ = tw.Write(content)
	}
	_ = tw.Close()
	return buf.Bytes()
}

func benchLifecycle(ctx context.Context, e *env) ([]bench.Row, error) {
	dir, err := os.MkdirTemp("", "cws-bench-snapshots-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	b, err := snapshot.NewFileBackend(dir)
	if err != nil {
		return nil, err
	}
	devPolicies := policy.ByTenant{auth.DevTenantID: policy.Default()}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: e.driver,
		Tenants: devPolicies, DefaultImage: e.image, LocalReads: e.localReads, Snapshots: snapshot.NewStore(b),
		SuspendAfter: time.Hour, ArchiveAfter: time.Nanosecond,
		Log: slog.New(slog.NewTextHandler(e.progress, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	defer svc.Close()
	caller := workspace.Caller{Tenant: auth.DevTenantID, Subject: "bench-life", Scopes: auth.AllScopes()}
	var made []string
	defer func() {
		e.logf("removing %d sessions…", len(made))
		for _, id := range made {
			_ = svc.DeleteSession(context.WithoutCancel(ctx), caller, id)
		}
	}()
	create := func() (string, error) {
		s, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
		if err != nil {
			return "", err
		}
		made = append(made, s.ID)
		return s.ID, nil
	}
	read := func(id string) error {
		res, err := svc.Call(ctx, caller, id, "readFile", []byte(`{"path":"d00/f00000.bin"}`), workspace.CallOptions{})
		if err == nil && res.IsError {
			err = fmt.Errorf("readFile: %v", res.Value)
		}
		return err
	}
	var rows []bench.Row

	// Wake of a suspended session beside docker start of a stopped container.
	small, err := create()
	if err != nil {
		return rows, err
	}
	if _, err := svc.Upload(ctx, caller, small, bytes.NewReader(workspaceTar(10, 1024))); err != nil {
		return rows, err
	}
	n := e.iterations(10)
	var wake, start []time.Duration
	anchor, err := e.newBox(ctx)
	if err != nil {
		return rows, err
	}
	defer e.remove(ctx, anchor)
	for i := range n {
		e.logf("wake of a suspended session %d/%d…", i+1, n)
		if _, err := svc.Suspend(ctx, caller, small); err != nil {
			return rows, err
		}
		t0 := time.Now()
		if err := read(small); err != nil {
			return rows, err
		}
		wake = append(wake, time.Since(t0))
		if out, err := exec.CommandContext(ctx, "docker", "stop", "-t", "1", anchor.ID).CombinedOutput(); err != nil {
			return rows, fmt.Errorf("docker stop: %v: %s", err, out)
		}
		t0 = time.Now()
		if out, err := exec.CommandContext(ctx, "docker", "start", anchor.ID).CombinedOutput(); err != nil {
			return rows, fmt.Errorf("docker start: %v: %s", err, out)
		}
		start = append(start, time.Since(t0))
	}
	rows = append(rows, note(bench.Summarize("wake suspended: first readFile", wake), "Suspend, then the first call: docker start + agent ready + readFile"),
		note(bench.Summarize("docker start", start), "of a stopped container of the same image (the CLI returning)"))

	// Wake of an archived 10 MB / 1,000-file workspace.
	arch, err := create()
	if err != nil {
		return rows, err
	}
	if _, err := svc.Upload(ctx, caller, arch, bytes.NewReader(workspaceTar(1000, 10<<10))); err != nil {
		return rows, err
	}
	var archived []time.Duration
	for i := range e.iterations(5) {
		e.logf("wake of an archived session %d…", i+1)
		if _, err := svc.Suspend(ctx, caller, arch); err != nil {
			return rows, err
		}
		if _, err := svc.Reap(ctx); err != nil { // archiveAfter 1 ns: archives it
			return rows, err
		}
		if s, err := svc.GetSession(ctx, caller, arch); err != nil || s.State != workspace.StateArchived {
			return rows, fmt.Errorf("the session did not archive: %v %v", s, err)
		}
		t0 := time.Now()
		if err := read(arch); err != nil {
			return rows, err
		}
		archived = append(archived, time.Since(t0))
	}
	rows = append(rows, note(bench.Summarize("wake archived 10 MB / 1,000 files: first readFile", archived), "a new container (no pool: its refill competes for the 2 cores), the archive restored, readFile"))

	// Snapshots and fork of 100 MB / 5,000 files.
	big, err := create()
	if err != nil {
		return rows, err
	}
	e.logf("uploading 100 MB / 5,000 files…")
	if _, err := svc.Upload(ctx, caller, big, bytes.NewReader(workspaceTar(5000, 20<<10))); err != nil {
		return rows, err
	}
	var first, again []time.Duration
	var stored int64
	for i := range e.iterations(3) {
		e.logf("snapshot %d…", i+1)
		t0 := time.Now()
		if _, err := svc.CreateSnapshot(ctx, caller, big, fmt.Sprint("bench-", i)); err != nil {
			return rows, err
		}
		if i == 0 { // later ones reuse every content: they are "again" rows
			first = append(first, time.Since(t0))
		}
		if _, err := svc.Call(ctx, caller, big, "writeFile", []byte(fmt.Sprintf(`{"path":"d00/f00000.bin","contents":"changed %d"}`, i)), workspace.CallOptions{}); err != nil {
			return rows, err
		}
		t0 = time.Now()
		snap, err := svc.CreateSnapshot(ctx, caller, big, fmt.Sprint("bench-again-", i))
		if err != nil {
			return rows, err
		}
		again = append(again, time.Since(t0))
		stored = snap.Stored
	}
	rows = append(rows, note(bench.Summarize("snapshot 100 MB / 5,000 files", first), "the first: every file hashed, compressed and written"),
		note(bench.Summarize("snapshot again, one file changed", again), "unchanged files sent by the agent as references to their contents, the changed one whole (files written within 2 s of the snapshot before are read and hashed again in the agent: the first of these)"),
		bench.Row{Name: "stored by the second snapshot", N: 1, Bytes: stored, Note: fmt.Sprintf("%d bytes: the changed file and the entry list", stored)})
	var fork []time.Duration
	for i := range e.iterations(2) {
		e.logf("fork into 4 #%d…", i+1)
		t0 := time.Now()
		res, err := svc.Fork(ctx, caller, big, 4)
		if err != nil {
			return rows, err
		}
		fork = append(fork, time.Since(t0))
		for j, s := range res.Sessions {
			if res.Errors[j] != nil {
				return rows, res.Errors[j]
			}
			made = append(made, s.ID)
		}
		for _, s := range res.Sessions {
			_ = svc.DeleteSession(ctx, caller, s.ID)
		}
	}
	rows = append(rows, note(bench.Summarize("fork 100 MB / 5,000 files into 4", fork), "read once, 4 containers made and filled in parallel"))
	return rows, nil
}

func note(r bench.Row, n string) bench.Row { r.Note = n; return r }
