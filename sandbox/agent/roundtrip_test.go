package agent_test

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
	"github.com/cwsdev/cws/snapshot"
)

// roundTrip takes the tree Generate makes from seed out of one agent (exact tar.out),
// through the snapshot store, into another (exact tar.in), and compares both trees
// entry by entry; then again with the archive's regular files in another order.
func roundTrip(t *testing.T, seed uint64) {
	t.Helper()
	src, srcDir, _ := pipeAgent(t)
	gen, err := tartest.Generate(srcDir, seed)
	if err != nil {
		t.Fatalf("generate: %v", err)
	}
	want, err := tartest.Scan(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := snapshot.NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewStore(b)
	pr, pw := io.Pipe()
	go func() {
		_, err := src.TarOut(ctx, agent.TarOutArgs{Path: ".", Exact: true}, pw)
		pw.CloseWithError(err)
	}()
	snap, err := store.Write(ctx, snapshot.Snapshot{ID: snapshot.NewID(), Tenant: "acme", Kind: snapshot.KindArchive}, pr, 0)
	if err != nil {
		t.Fatalf("seed %d: capture: %v", seed, err)
	}
	var skipped []string
	for _, s := range snap.Skipped {
		skipped = append(skipped, s.Path)
	}
	if !slices.Equal(skipped, gen.Skipped) {
		t.Errorf("seed %d: the record lists %q as skipped, want %q", seed, skipped, gen.Skipped)
	}
	var tarball bytes.Buffer
	if _, err := store.Read(ctx, "acme", snap.ID, &tarball); err != nil {
		t.Fatalf("seed %d: read: %v", seed, err)
	}
	// As the store reads it, and in the order of a store of pack files: directories and
	// symlinks first, the regular files in no order of their paths, hard links last.
	for i, order := range []func([]byte) []byte{
		func(b []byte) []byte { return b },
		func(b []byte) []byte { return tartest.StoreOrder(b, seed) },
	} {
		dst, dstDir, _ := pipeAgent(t)
		if _, err := dst.TarIn(ctx, agent.TarInArgs{Path: ".", Exact: true}, bytes.NewReader(order(tarball.Bytes()))); err != nil {
			t.Fatalf("seed %d, order %d: restore: %v", seed, i, err)
		}
		got, err := tartest.Scan(dstDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tartest.Diff(want, got, gen.Skipped) {
			t.Errorf("seed %d, order %d: %s", seed, i, d)
		}
	}
	// The capture left the source as it was (modes it had to lift put back).
	again, err := tartest.Scan(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range tartest.Diff(want, again, nil) {
		t.Errorf("seed %d: the capture changed the source: %s", seed, d)
	}
}

// TestArchiveRoundTrip: whatever the capture takes, the restore gives back exactly.
func TestArchiveRoundTrip(t *testing.T) {
	for seed := range uint64(12) {
		roundTrip(t, seed)
	}
}

// TestArchiveRoundTripOneCPU: the same with GOMAXPROCS 1, as in a workspace limited
// to one CPU, where the restore writes files with one worker.
func TestArchiveRoundTripOneCPU(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for seed := uint64(100); seed < 104; seed++ {
		roundTrip(t, seed)
	}
}

// FuzzArchiveRoundTrip runs the same property on seeds the fuzzer picks (make test runs
// it briefly, make bench longer).
func FuzzArchiveRoundTrip(f *testing.F) {
	f.Add(uint64(1))
	f.Add(uint64(1 << 40))
	f.Fuzz(func(t *testing.T, seed uint64) { roundTrip(t, seed) })
}
