package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// An archive an older cws wrote, whose names it stored as UTF-8 (so "caf\xe9.txt" and
// "caf\xe8.txt" both became "caf\uFFFD.txt"), reads back with every file: the clash
// is renamed, and the notes say so. A name with its bytes reads back with its bytes.
func TestReadOldRecordWithClashingNames(t *testing.T) {
	ctx := context.Background()
	b, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(b)
	var es []entry
	for _, body := range []string{"first", "second"} {
		sum := putLoose(t, s, "acme", []byte(body))
		es = append(es, entry{Path: "caf\uFFFD.txt", Type: '0', Mode: 0o644, Size: int64(len(body)), Blob: sum})
	}
	es = append(es, entry{Path: "venv/bin/python3", Type: '2', Link: "/usr/bin/python3"})
	// Two directories whose names became one, each with a file of the same name.
	for _, body := range []string{"first", "second"} {
		c := &content{mem: []byte(body)}
		sum, _ := s.spool(bytes.NewReader(c.mem), int64(len(c.mem)))
		es = append(es, entry{Path: "d\uFFFD/", Type: '5', Mode: 0o755},
			entry{Path: "d\uFFFD/x", Type: '0', Mode: 0o644, Size: int64(len(body)), Blob: sum.sum})
	}
	meta := Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive, Files: 4}
	if _, _, err := s.finish(ctx, meta, es, 0); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	notes, err := s.Read(ctx, "acme", meta.ID, &out)
	if err != nil {
		t.Fatal(err)
	}
	names, files := untar(t, &out)
	// Directories and links first, then files by their contents' place in the store.
	if got := strings.Join(names, "|"); got != "venv/bin/python3|d\uFFFD/|d\uFFFD (2)/|caf\uFFFD.txt|d\uFFFD/x|caf\uFFFD.txt (2)|d\uFFFD (2)/x" {
		t.Errorf("names %q", got)
	}
	if files["caf\uFFFD.txt"] != "first" || files["caf\uFFFD.txt (2)"] != "second" || files["venv/bin/python3"] != "-> /usr/bin/python3" ||
		files["d\uFFFD/x"] != "first" || files["d\uFFFD (2)/x"] != "second" {
		t.Errorf("files %q", files)
	}
	if len(notes.Renamed) != 2 || notes.Renamed[0].To != "caf\uFFFD.txt (2)" || notes.Renamed[1].To != "d\uFFFD (2)" {
		t.Errorf("notes %+v, want the one rename", notes)
	}

	// Written now, names keep their bytes.
	snap, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive},
		bytes.NewReader(tarball(t, []string{"caf\xe9.txt", "caf\xe8.txt"}, map[string]string{"caf\xe9.txt": "e9", "caf\xe8.txt": "e8"})), 0)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if notes, err = s.Read(ctx, "acme", snap.ID, &out); err != nil || len(notes.Renamed) != 0 {
		t.Fatalf("read: %+v, %v", notes, err)
	}
	if _, files := untar(t, &out); files["caf\xe9.txt"] != "e9" || files["caf\xe8.txt"] != "e8" {
		t.Errorf("files %q", files)
	}
}

// A collection that runs while a snapshot reuses contents it is about to delete (its
// delete loop held at the first delete) never deletes what that snapshot uses: the
// snapshot reads back whole.
func TestCollectionRaceWithWrite(t *testing.T) {
	backends(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		s := NewStore(b)
		s.fencePoll = 10 * time.Millisecond
		files := map[string]string{"a.txt": randomText(3000), "b.txt": randomText(5000)}
		names := []string{"a.txt", "b.txt"}
		first, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, names, files)), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "acme", first.ID); err != nil {
			t.Fatal(err)
		}
		// The collection finds both blobs unused, and stops at its first delete.
		held, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s.beforeDelete = func(string) {
			once.Do(func() { close(held); <-release })
		}
		collected := make(chan error, 1)
		go func() {
			_, _, err := s.Collect(ctx, "acme", 0)
			collected <- err
		}()
		select {
		case <-held:
		case err := <-collected:
			t.Fatalf("the collection ended without deleting anything: %v", err)
		}
		// A snapshot of the same files, written meanwhile.
		written := make(chan *Snapshot, 1)
		go func() {
			snap, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, names, files)), 0)
			if err != nil {
				t.Error(err)
			}
			written <- snap
		}()
		time.Sleep(300 * time.Millisecond) // let the write reach the blobs it reuses
		close(release)
		if err := <-collected; err != nil {
			t.Fatal(err)
		}
		second := <-written
		if second == nil {
			return
		}
		var out bytes.Buffer
		if _, err := s.Read(ctx, "acme", second.ID, &out); err != nil {
			t.Fatalf("the snapshot written during the collection does not read back: %v", err)
		}
		if _, got := untar(t, &out); got["a.txt"] != files["a.txt"] || got["b.txt"] != files["b.txt"] {
			t.Error("the snapshot written during the collection read back different contents")
		}
		// A collection while a write holds a lease collects nothing.
		if _, err := s.lease(ctx, "acme", NewID()); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "acme", second.ID); err != nil {
			t.Fatal(err)
		}
		if n, _, err := s.Collect(ctx, "acme", 0); err != nil || n != 0 {
			t.Errorf("Collect under a live lease = %d, %v; want nothing collected", n, err)
		}
	})
}

// A record the collection can't read stops it: its blobs may be in use.
func TestCollectionStopsAtUnreadableRecord(t *testing.T) {
	ctx := context.Background()
	b, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(b)
	kept, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot},
		bytes.NewReader(tarball(t, []string{"x"}, map[string]string{"x": "contents"})), 0)
	if err != nil {
		t.Fatal(err)
	}
	// The record goes bad (torn, or over the read limit); its blobs look unused.
	big := bytes.Repeat([]byte(" "), 2<<20)
	if err := b.Put(ctx, metaKey("acme", kept.ID), bytes.NewReader(big), int64(len(big))); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.Collect(ctx, "acme", 0); err == nil || n != 0 {
		t.Errorf("Collect = %d, %v; want it stopped with an error, nothing collected", n, err)
	}
	rec, _ := json.Marshal(kept)
	if err := b.Put(ctx, metaKey("acme", kept.ID), bytes.NewReader(rec), int64(len(rec))); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, "acme", kept.ID, io.Discard); err != nil {
		t.Errorf("the snapshot lost its contents: %v", err)
	}
}

// hungBackend is a store that accepts and never answers (a server stopped, not
// refusing).
type hungBackend struct{ Backend }

func (hungBackend) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hungBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	<-ctx.Done()
	return ctx.Err()
}

// A hung store is an error soon, naming what stalled.
func TestHungStoreFails(t *testing.T) {
	fb, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(WithStallTimeout(hungBackend{fb}, 100*time.Millisecond))
	_, err = s.Get(context.Background(), "acme", NewID())
	if err == nil || !strings.Contains(err.Error(), "made no progress") {
		t.Errorf("Get on a hung store: %v, want a stall error", err)
	}
	_, err = s.Write(context.Background(), Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(nil), 0)
	if err == nil || !strings.Contains(err.Error(), "is the store up?") {
		t.Errorf("Write on a hung store: %v, want a stall error", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Error("a hung store reads as not found")
	}
}
