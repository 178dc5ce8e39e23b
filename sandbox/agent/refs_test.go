package agent_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
	"github.com/cwsdev/cws/snapshot"
)

// capture takes an exact tar.out of c into store, with references to known when it
// is set, and returns the snapshot, its contents and the paths sent as references.
func capture(t *testing.T, ctx context.Context, c *agent.Client, store *snapshot.Store, known map[string]bool) (*snapshot.Snapshot, map[string]bool, []string, error) {
	t.Helper()
	pr, pw := io.Pipe()
	var stream bytes.Buffer
	go func() {
		_, err := c.TarOut(ctx, agent.TarOutArgs{Path: ".", Exact: true, Refs: known != nil, Remember: true}, io.MultiWriter(pw, &stream))
		pw.CloseWithError(err)
	}()
	snap, sums, err := store.WriteRefs(ctx, snapshot.Snapshot{ID: snapshot.NewID(), Tenant: "acme", Kind: snapshot.KindSnapshot}, pr, 0, known)
	pr.CloseWithError(io.ErrClosedPipe)
	if err != nil {
		return nil, nil, nil, err
	}
	var refs []string
	tr := tar.NewReader(&stream)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.PAXRecords[agent.TarRef] != "" {
			refs = append(refs, h.Name)
		}
	}
	return snap, sums, refs, nil
}

// TestCaptureRefs: a second capture sends the files unchanged since the first as
// references, and everything else whole; what the store gives back is the tree as it
// is now, byte for byte, whatever was done to the files in between: contents changed
// at the same size with the mtime put back, a file replaced by another of the same
// size, appended to, removed, added. References only name contents the caller vouches
// for.
func TestCaptureRefs(t *testing.T) {
	src, srcDir, _ := pipeAgent(t)
	dst, dstDir, _ := pipeAgent(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 60 {
		p := filepath.Join(srcDir, fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%02d.txt", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte{byte('a' + i%26)}, 1000+i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Files changed within the last seconds are never sent as references (their
	// times may not show a write right after the read): let these age.
	time.Sleep(2100 * time.Millisecond)
	b, err := snapshot.NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := snapshot.NewStore(b)
	_, known, refs, err := capture(t, ctx, src, store, nil)
	if err != nil || len(refs) != 0 {
		t.Fatalf("first capture: %v (%d references)", err, len(refs))
	}
	// Same size, other contents, the mtime put back as it was.
	same := filepath.Join(srcDir, "d1/f01.txt")
	fi, _ := os.Stat(same)
	if err := os.WriteFile(same, bytes.Repeat([]byte{'Z'}, int(fi.Size())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(same, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	// Replaced by a new file of the same size and mtime.
	replaced := filepath.Join(srcDir, "d2/f02.txt")
	fi, _ = os.Stat(replaced)
	if err := os.Remove(replaced); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(replaced, bytes.Repeat([]byte{'Y'}, int(fi.Size())), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(replaced, fi.ModTime(), fi.ModTime())
	f, _ := os.OpenFile(filepath.Join(srcDir, "d3/f03.txt"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("more")
	f.Close()
	_ = os.Remove(filepath.Join(srcDir, "d0/f04.txt"))
	_ = os.WriteFile(filepath.Join(srcDir, "d0/new.txt"), []byte("new"), 0o644)

	// Mapped shared and writable by a process: a write to a dirty page of it would
	// change it without changing its times.
	mf, err := os.OpenFile(filepath.Join(srcDir, "d2/f10.txt"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := syscall.Mmap(int(mf.Fd()), 0, 1000, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	mf.Close()
	if err != nil {
		t.Fatal(err)
	}
	snap, known, refs, err := capture(t, ctx, src, store, known)
	_ = syscall.Munmap(mem)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 55 {
		t.Errorf("second capture sent %d files as references, want the 55 unchanged and not mapped: %v", len(refs), refs)
	}
	for _, r := range refs {
		if r == "d1/f01.txt" || r == "d2/f02.txt" || r == "d3/f03.txt" || r == "d2/f10.txt" {
			t.Errorf("%s changed (or is mapped for writing) and was sent as a reference", r)
		}
	}
	var tarball bytes.Buffer
	if _, err := store.Read(ctx, "acme", snap.ID, &tarball); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.TarIn(ctx, agent.TarInArgs{Path: ".", Exact: true}, &tarball); err != nil {
		t.Fatal(err)
	}
	want, _ := tartest.Scan(srcDir)
	got, _ := tartest.Scan(dstDir)
	for _, d := range tartest.Diff(want, got, nil) {
		t.Error(d)
	}

	// A capture that does not remember (a fork's) leaves the sums as they were: a file
	// changed since is sent whole by the next capture, not as a reference to contents
	// only the fork's capture saw (which the caller could not vouch for).
	_, known, _, err = capture(t, ctx, src, store, known)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srcDir, "d0/f08.txt"), []byte("after the snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2100 * time.Millisecond)
	if _, err := src.TarOut(ctx, agent.TarOutArgs{Path: ".", Exact: true}, io.Discard); err != nil {
		t.Fatal(err)
	}
	_, _, refs, err = capture(t, ctx, src, store, known)
	if err != nil {
		t.Fatalf("the capture after a fork's: %v", err)
	}
	for _, r := range refs {
		if r == "d0/f08.txt" {
			t.Error("d0/f08.txt, changed since the last remembered capture, was sent as a reference")
		}
	}

	// A caller that can't vouch for the contents: the capture is refused, whole.
	if _, _, _, err := capture(t, ctx, src, store, map[string]bool{}); !errors.Is(err, snapshot.ErrStaleRef) {
		t.Errorf("references to contents the caller did not vouch for: %v, want ErrStaleRef", err)
	}
}
