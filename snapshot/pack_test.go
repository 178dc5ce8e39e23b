package snapshot

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/cwsdev/cws/internal/testenv"
	"io"
	mrand "math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// counting counts a backend's requests by kind.
type counting struct {
	Backend
	mu sync.Mutex
	n  map[string]int
}

func newCounting(b Backend) *counting { return &counting{Backend: b, n: map[string]int{}} }

func (c *counting) count(op string) {
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}

func (c *counting) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func (c *counting) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	c.count("put")
	return c.Backend.Put(ctx, key, r, size)
}

func (c *counting) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.count("get")
	return c.Backend.Get(ctx, key)
}

func (c *counting) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	c.count("get")
	return c.Backend.GetRange(ctx, key, off, n)
}

func (c *counting) Exists(ctx context.Context, key string) (bool, error) {
	c.count("head")
	return c.Backend.Exists(ctx, key)
}

func (c *counting) Touch(ctx context.Context, key string) error {
	c.count("put")
	return c.Backend.Touch(ctx, key)
}

func (c *counting) Delete(ctx context.Context, key string) error {
	c.count("delete")
	return c.Backend.Delete(ctx, key)
}

func (c *counting) List(ctx context.Context, prefix string, fn func(Object) error) error {
	c.count("list")
	return c.Backend.List(ctx, prefix, fn)
}

// node is one entry of a generated tree, as a Read must give it back.
type node struct {
	Type  byte
	Mode  int64
	MTime int64
	Link  string
	Sum   string // of a file's contents
	Size  int64
}

// genTree writes a random tree as a tar stream: directories (some deep), files of every
// size class (empty, small, several MiB compressible, and incompressible past the size
// at which a blob gets a pack of its own when big is set), files sharing contents,
// symlinks of every kind, hard links, and names of any bytes. It returns the stream,
// each path's node, and the bytes of file contents.
func genTree(t testing.TB, rng *mrand.Rand, files int, big bool) ([]byte, map[string]node, int64) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	want := map[string]node{}
	var total int64
	dirs := []string{""}
	var regular []string
	var bodies [][]byte
	name := func() string {
		const alphabet = "abcdefghij-_. é"
		n := 1 + rng.IntN(12)
		var b strings.Builder
		for range n {
			switch rng.IntN(20) {
			case 0:
				b.WriteByte(byte(0x80 + rng.IntN(0x7f))) // not UTF-8
			case 1:
				b.WriteByte('\n')
			default:
				b.WriteByte(alphabet[rng.IntN(len(alphabet))])
			}
		}
		s := b.String()
		if s == "." || s == ".." {
			s += "x"
		}
		return s
	}
	taken := map[string]bool{} // paths, a directory's without its slash
	put := func(h *tar.Header, body []byte) {
		if p := strings.TrimSuffix(h.Name, "/"); taken[p] {
			return
		} else {
			taken[p] = true
		}
		h.Format = tar.FormatPAX
		h.ModTime = time.Unix(1_600_000_000+rng.Int64N(1e8), rng.Int64N(1e9))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		n := node{Type: h.Typeflag, Mode: h.Mode, MTime: h.ModTime.UnixNano(), Link: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(body); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(body)
			n.Sum, n.Size = hex.EncodeToString(sum[:]), int64(len(body))
			total += n.Size
			regular = append(regular, h.Name)
		}
		want[h.Name] = n
	}
	for range files {
		parent := dirs[rng.IntN(len(dirs))]
		switch k := rng.IntN(20); {
		case k < 3:
			d := parent + name() + "/"
			put(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: []int64{0o755, 0o700, 0o1777, 0o555}[rng.IntN(4)]}, nil)
			if _, ok := want[d]; ok {
				dirs = append(dirs, d)
			}
		case k < 5:
			target := []string{"/usr/bin/python3", "../../outside", "dangling", "./x/../y", strings.Repeat("a/", 40)}[rng.IntN(5)]
			put(&tar.Header{Name: parent + name(), Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}, nil)
		case k < 6 && len(regular) > 0:
			put(&tar.Header{Name: parent + name(), Typeflag: tar.TypeLink, Linkname: regular[rng.IntN(len(regular))], Mode: 0o644}, nil)
		case k < 8 && len(bodies) > 0:
			body := bodies[rng.IntN(len(bodies))] // the same contents as another file
			put(&tar.Header{Name: parent + name(), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body)
		default:
			var size int
			switch c := rng.IntN(100); {
			case c < 5:
				size = 0
			case c < 95:
				size = rng.IntN(20 << 10)
			case c < 99:
				size = rng.IntN(2 << 20)
			default:
				size = 1<<20 + rng.IntN(3<<20)
			}
			body := make([]byte, size)
			if rng.IntN(2) == 0 {
				fill(rng, body)
			} else {
				for i := range body {
					body[i] = "the quick brown fox\n"[(i+rng.IntN(3))%20]
				}
			}
			bodies = append(bodies, body)
			put(&tar.Header{Name: parent + name(), Typeflag: tar.TypeReg, Mode: []int64{0o644, 0o755, 0o600, 0o4755, 0o000}[rng.IntN(5)], Size: int64(size)}, body)
		}
	}
	if big {
		// Past inMemory, incompressible: a pack of its own, streamed both ways.
		body := make([]byte, inMemory+rng.IntN(1<<20))
		fill(rng, body)
		put(&tar.Header{Name: "big.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body)
		put(&tar.Header{Name: "big-again.bin", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), want, total
}

// fill fills b with random bytes.
func fill(rng *mrand.Rand, b []byte) {
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, rng.Uint64())
		b = b[8:]
	}
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

// readTree reads a Read's tar stream into nodes, checking that every entry's directory
// came before it and that hard links name a file given before them.
func readTree(t testing.TB, r io.Reader) map[string]node {
	t.Helper()
	got := map[string]node{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := got[h.Name]; dup {
			t.Errorf("%q given twice", h.Name)
		}
		if i := strings.LastIndexByte(strings.TrimSuffix(h.Name, "/"), '/'); i > 0 {
			if _, ok := got[h.Name[:i+1]]; !ok {
				t.Errorf("%q came before its directory", h.Name)
			}
		}
		if h.Typeflag == tar.TypeLink {
			if n, ok := got[h.Linkname]; !ok || n.Type != tar.TypeReg {
				t.Errorf("hard link %q to %q came before its file", h.Name, h.Linkname)
			}
		}
		n := node{Type: h.Typeflag, Mode: h.Mode, MTime: h.ModTime.UnixNano(), Link: h.Linkname}
		if h.Typeflag == tar.TypeReg {
			hs := sha256.New()
			size, err := io.Copy(hs, tr)
			if err != nil {
				t.Fatal(err)
			}
			n.Sum, n.Size = hex.EncodeToString(hs.Sum(nil)), size
		}
		got[h.Name] = n
	}
}

// sameTree compares two trees entry by entry.
func sameTree(t testing.TB, got, want map[string]node) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		if !ok {
			t.Errorf("%q lost", p)
			continue
		}
		if g != w {
			t.Errorf("%q: got %+v, want %+v", p, g, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%q came back from nowhere", p)
		}
	}
}

// TestPackRoundTrip: generated trees go through Write and Read whole, entry by entry,
// on both backends, in a number of requests that grows with the bytes, not the files.
func TestPackRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, b Backend) {
		c := newCounting(b)
		s := NewStore(c)
		for seed := range uint64(4) {
			rng := mrand.New(mrand.NewPCG(seed, 31))
			stream, want, total := genTree(t, rng, 400, seed == 0)
			c.reset()
			snap, err := s.Write(t.Context(), Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(stream), 0)
			if err != nil {
				t.Fatal(err)
			}
			wrote := c.reset()
			var out bytes.Buffer
			if _, err := s.Read(t.Context(), "acme", snap.ID, &out); err != nil {
				t.Fatal(err)
			}
			read := c.reset()
			sameTree(t, readTree(t, &out), want)
			limit := int(total/(8<<20)) + 10
			t.Logf("seed %d: %d entries, %d bytes: write %v, read %v", seed, len(want), total, wrote, read)
			if wrote["put"] > limit || read["get"] > limit {
				t.Errorf("seed %d: %d PUTs to write, %d GETs to read %d bytes in %d entries; want at most %d each", seed, wrote["put"], read["get"], total, len(want), limit)
			}
		}
	})
}

// FuzzPackRoundTrip: any tree the generator makes from the fuzzer's seed reads back as
// written.
func FuzzPackRoundTrip(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3} {
		f.Add(seed, uint16(50))
	}
	dir := f.TempDir()
	b, err := NewFileBackend(dir)
	if err != nil {
		f.Fatal(err)
	}
	s := NewStore(b)
	f.Fuzz(func(t *testing.T, seed uint64, files uint16) {
		rng := mrand.New(mrand.NewPCG(seed, uint64(files)))
		stream, want, _ := genTree(t, rng, int(files%300), false)
		snap, err := s.Write(context.Background(), Snapshot{ID: NewID(), Tenant: "fuzz", Kind: KindSnapshot}, bytes.NewReader(stream), 0)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if _, err := s.Read(context.Background(), "fuzz", snap.ID, &out); err != nil {
			t.Fatal(err)
		}
		sameTree(t, readTree(t, &out), want)
	})
}

// One changed file: the second snapshot stores one small pack and an index object.
func TestSecondSnapshotStoresOnePack(t *testing.T) {
	backends(t, func(t *testing.T, b Backend) {
		c := newCounting(b)
		s := NewStore(c)
		names, files := []string{"d/"}, map[string]string{"d/": ""}
		for i := range 500 {
			n := fmt.Sprintf("d/f%03d", i)
			names, files[n] = append(names, n), randomText(2000)
		}
		first, err := s.Write(t.Context(), Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, names, files)), 0)
		if err != nil {
			t.Fatal(err)
		}
		files["d/f007"] = "changed"
		c.reset()
		second, err := s.Write(t.Context(), Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, names, files)), 0)
		if err != nil {
			t.Fatal(err)
		}
		n := c.reset()
		// lease, pack, index, entries, record
		if n["put"] != 5 || second.Stored > first.Stored/20 {
			t.Errorf("second snapshot: %v requests, %d bytes stored (first %d); want 5 PUTs: lease, pack, index, entries, record", n, second.Stored, first.Stored)
		}
		var out bytes.Buffer
		if _, err := s.Read(t.Context(), "acme", second.ID, &out); err != nil {
			t.Fatal(err)
		}
		if _, got := untar(t, &out); got["d/f007"] != "changed" || got["d/f123"] != files["d/f123"] {
			t.Error("the second snapshot read back different contents")
		}
	})
}

// packs lists a tenant's pack and index objects.
func packs(t *testing.T, b Backend, tenant string) (packs, index int) {
	t.Helper()
	if err := b.List(t.Context(), tenant+"/", func(o Object) error {
		switch {
		case strings.Contains(o.Key, "/packs/"):
			packs++
		case strings.Contains(o.Key, "/index/"):
			index++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return packs, index
}

// A collection rewrites a pack mostly of garbage: a snapshot whose entries still name
// the old pack reads through the index, whole; one of all garbage goes; the index ends
// as one object; and another process's Store (which read the old index) reads too.
func TestCollectRewritesPacks(t *testing.T) {
	backends(t, func(t *testing.T, b Backend) {
		ctx := t.Context()
		s := NewStore(b)
		other := NewStore(b) // another replica
		var names []string
		files := map[string]string{}
		for i := range 40 {
			n := fmt.Sprintf("f%02d", i)
			names, files[n] = append(names, n), randomText(30000)
		}
		first, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, names, files)), 0)
		if err != nil {
			t.Fatal(err)
		}
		// The second keeps 5 of the first's files and adds 5: its entries name the
		// first's pack for those 5.
		keep := names[:5]
		files2 := map[string]string{}
		for _, n := range keep {
			files2[n] = files[n]
		}
		names2 := append([]string{}, keep...)
		for i := range 5 {
			n := fmt.Sprintf("new%d", i)
			names2, files2[n] = append(names2, n), randomText(30000)
		}
		second, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, names2, files2)), 0)
		if err != nil {
			t.Fatal(err)
		}
		// A third whose pack will be all garbage.
		third, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, []string{"only"}, map[string]string{"only": randomText(5000)})), 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Read(ctx, "acme", second.ID, io.Discard); err != nil { // other caches the index
			t.Fatal(err)
		}
		if p, i := packs(t, b, "acme"); p != 3 || i != 3 {
			t.Fatalf("%d packs, %d index objects; want 3 and 3", p, i)
		}
		for _, id := range []string{first.ID, third.ID} {
			if err := s.Delete(ctx, "acme", id); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(20 * time.Millisecond)
		n, freed, err := s.Collect(ctx, "acme", 0)
		if err != nil {
			t.Fatal(err)
		}
		if n != 36 || freed <= 0 {
			t.Errorf("Collect removed %d blobs, freed %d bytes; want the first's 35 not kept and the third's 1", n, freed)
		}
		if p, i := packs(t, b, "acme"); p != 2 || i != 1 {
			t.Errorf("after the collection: %d packs, %d index objects; want 2 (the second's, the rewritten one) and 1", p, i)
		}
		for _, st := range []*Store{s, other, NewStore(b)} {
			var out bytes.Buffer
			if _, err := st.Read(ctx, "acme", second.ID, &out); err != nil {
				t.Fatalf("the second snapshot does not read after the collection: %v", err)
			}
			if _, got := untar(t, &out); len(got) != 10 || got["f03"] != files["f03"] || got["new4"] != files2["new4"] {
				t.Error("the second snapshot read back different contents after the collection")
			}
		}
		// Nothing more to do: a second collection changes nothing.
		if n, _, err := s.Collect(ctx, "acme", 0); err != nil || n != 0 {
			t.Errorf("a second Collect = %d, %v", n, err)
		}
		// A new snapshot of the kept files stores none of them again.
		again, err := other.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, names2, files2)), 0)
		if err != nil {
			t.Fatal(err)
		}
		if again.Stored > 4096 {
			t.Errorf("a snapshot of files the store holds stored %d bytes", again.Stored)
		}
	})
}

// A pack no index lists (its index object lost, or a Write that stopped before it):
// the collection adopts it when a snapshot uses its blobs, and drops it when none does.
func TestCollectOrphanPacks(t *testing.T) {
	b, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := NewStore(b)
	used, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(tarball(t, []string{"a"}, map[string]string{"a": randomText(4000)})), 0)
	if err != nil {
		t.Fatal(err)
	}
	unused, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, []string{"b"}, map[string]string{"b": randomText(4000)})), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "acme", unused.ID); err != nil {
		t.Fatal(err)
	}
	var keys []string
	_ = b.List(ctx, "acme/index/", func(o Object) error { keys = append(keys, o.Key); return nil })
	for _, k := range keys {
		_ = b.Delete(ctx, k)
	}
	time.Sleep(20 * time.Millisecond)
	if _, _, err := NewStore(b).Collect(ctx, "acme", 0); err != nil {
		t.Fatal(err)
	}
	if p, i := packs(t, b, "acme"); p != 1 || i != 1 {
		t.Errorf("%d packs, %d index objects; want the used one adopted, the other dropped", p, i)
	}
	if _, err := NewStore(b).Read(ctx, "acme", used.ID, io.Discard); err != nil {
		t.Errorf("the archive does not read after its pack was adopted: %v", err)
	}
}

// A pack whose bytes changed is an error naming the contents, never a wrong file.
func TestReadCorruptPack(t *testing.T) {
	dir := t.TempDir()
	b, err := NewFileBackend(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := NewStore(b)
	snap, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(tarball(t, []string{"a"}, map[string]string{"a": strings.Repeat("x", 4000)})), 0)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	_ = b.List(ctx, "acme/packs/", func(o Object) error { key = o.Key; return nil })
	rc, _ := b.Get(ctx, key)
	data, _ := io.ReadAll(rc)
	rc.Close()
	// Another blob of the same compressed length in its place.
	bad := s.enc.EncodeAll([]byte(strings.Repeat("y", 4000)), nil)
	es, _ := s.entries(ctx, "acme", snap.ID)
	if int64(len(bad)) != es[0].Len {
		t.Skipf("compressed lengths differ (%d, %d)", len(bad), es[0].Len)
	}
	copy(data[es[0].Off:], bad)
	if err := b.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	_, err = s.Read(ctx, "acme", snap.ID, io.Discard)
	if !errors.Is(err, ErrBadRecord) || !strings.Contains(err.Error(), es[0].Blob) {
		t.Errorf("Read of a corrupt pack: %v; want ErrBadRecord naming the contents", err)
	}
}

// A store an older cws wrote (one object per blob) keeps working: its snapshots read,
// a new snapshot of the same files goes to packs, and its blobs are collected once no
// snapshot names them.
func TestOldStoreKeepsWorking(t *testing.T) {
	b, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := NewStore(b)
	body := randomText(6000)
	sum := putLoose(t, s, "acme", []byte(body))
	old := Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive, Files: 1, Bytes: 6000}
	if _, _, err := s.finish(ctx, old, []entry{{Path: "d/", Type: tar.TypeDir, Mode: 0o755}, {Path: "d/a", Type: tar.TypeReg, Mode: 0o644, Size: 6000, Blob: sum}}, 0); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := s.Read(ctx, "acme", old.ID, &out); err != nil {
		t.Fatal(err)
	}
	if _, got := untar(t, &out); got["d/a"] != body {
		t.Error("an old snapshot read back different contents")
	}
	fresh, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, []string{"a"}, map[string]string{"a": body})), 0)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := packs(t, b, "acme"); p != 1 {
		t.Errorf("%d packs after a new snapshot; want 1", p)
	}
	if err := s.Delete(ctx, "acme", old.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if n, _, err := s.Collect(ctx, "acme", 0); err != nil || n != 1 {
		t.Errorf("Collect = %d, %v; want the old loose blob", n, err)
	}
	if _, err := s.Read(ctx, "acme", fresh.ID, io.Discard); err != nil {
		t.Error(err)
	}
}

// BenchmarkStore writes and reads 2,000 files of random bytes (17 MB) through the
// file backend and through S3 (SeaweedFS, when there is one): the store's own part of
// an archive and of a wake.
//
//	go test ./snapshot -run '^$' -bench Store -benchtime 5x
func BenchmarkStore(b *testing.B) {
	var names []string
	files := map[string]string{}
	for i := range 2000 {
		n := fmt.Sprintf("d%02d/f%04d", i%20, i)
		if i < 20 {
			names, files[fmt.Sprintf("d%02d/", i)] = append(names, fmt.Sprintf("d%02d/", i)), ""
		}
		names, files[n] = append(names, n), randomText(8500)
	}
	stream := tarball(b, names, files)
	ctx := context.Background()
	bench := func(b *testing.B, be Backend) {
		s := NewStore(be)
		var last *Snapshot
		b.Run("write", func(b *testing.B) {
			for range b.N {
				// A tenant of its own each time: every file is stored.
				snap, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: NewID(), Kind: KindArchive}, bytes.NewReader(stream), 0)
				if err != nil {
					b.Fatal(err)
				}
				last = snap
			}
			b.SetBytes(int64(len(stream)))
		})
		b.Run("read", func(b *testing.B) {
			if last == nil { // -bench 'Store/.*/read' alone
				var err error
				if last, err = s.Write(ctx, Snapshot{ID: NewID(), Tenant: NewID(), Kind: KindArchive}, bytes.NewReader(stream), 0); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
			}
			for range b.N {
				if _, err := s.Read(ctx, last.Tenant, last.ID, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(len(stream)))
		})
	}
	b.Run("file", func(b *testing.B) {
		be, err := NewFileBackend(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		bench(b, be)
	})
	b.Run("s3", func(b *testing.B) {
		srv, bucket := testenv.S3(b)
		be, err := Open(ctx, "s3://"+bucket+"/bench", srv.Getenv)
		if err != nil {
			b.Fatal(err)
		}
		bench(b, be)
	})
}

// A reference is the sandbox's word for a file's contents: its size must be what the
// store holds, or the capture is refused (a wrong size would make an archive that
// can't be read back, or one whose restore asks for any amount of memory).
func TestRefSizeChecked(t *testing.T) {
	b, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := NewStore(b)
	body := randomText(5000)
	_, known, err := s.WriteRefs(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, []string{"a"}, map[string]string{"a": body})), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sum string
	for k := range known {
		sum = k
	}
	ref := func(size string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX,
			PAXRecords: map[string]string{"CWS.ref": sum, "CWS.refsize": size}})
		_ = tw.Close()
		return buf.Bytes()
	}
	for _, size := range []string{"4999", "5001", "4611686018427387904", "-1", "x"} {
		_, _, err := s.WriteRefs(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(ref(size)), 0, known)
		if err == nil {
			t.Errorf("a reference of %s bytes to 5,000 stored was accepted", size)
		}
	}
	snap, _, err := s.WriteRefs(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(ref("5000")), 0, known)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := s.Read(ctx, "acme", snap.ID, &out); err != nil {
		t.Fatal(err)
	}
	if _, got := untar(t, &out); got["a"] != body {
		t.Error("a snapshot of a reference read back other contents")
	}
}

// A large file that compresses to little (zeros) is streamed on its way back, never
// held whole.
func TestReadStreamsLargeCompressible(t *testing.T) {
	b, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := NewStore(b)
	zeros := string(make([]byte, 96<<20))
	snap, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(tarball(t, []string{"zeros", "small"}, map[string]string{"zeros": zeros, "small": "x"})), 0)
	if err != nil {
		t.Fatal(err)
	}
	zeros = ""
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	h := sha256.New()
	if _, err := s.Read(ctx, "acme", snap.ID, h); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 48<<20 {
		t.Errorf("reading a 96 MiB file of zeros allocated %d MiB: it was held, not streamed", got>>20)
	}
}

// staleList answers a List of the index with the listing it gave before, once armed:
// a replica whose view of the index lags behind a collection.
type staleList struct {
	Backend
	mu    sync.Mutex
	last  []Object
	armed bool
}

func (s *staleList) List(ctx context.Context, prefix string, fn func(Object) error) error {
	if !strings.HasSuffix(prefix, "/index/") {
		return s.Backend.List(ctx, prefix, fn)
	}
	s.mu.Lock()
	if s.armed {
		s.armed = false
		last := s.last
		s.mu.Unlock()
		for _, o := range last {
			if err := fn(o); err != nil {
				return err
			}
		}
		return nil
	}
	s.mu.Unlock()
	var got []Object
	err := s.Backend.List(ctx, prefix, func(o Object) error { got = append(got, o); return fn(o) })
	s.mu.Lock()
	s.last = got
	s.mu.Unlock()
	return err
}

// A snapshot never names a pack that is gone: a replica whose index is stale (a
// collection elsewhere dropped the pack) finds out before it writes the record.
func TestWriteNeverNamesAGonePack(t *testing.T) {
	fb, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	lagging := &staleList{Backend: fb}
	s := NewStore(lagging)
	files := map[string]string{"a": randomText(4000)}
	first, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, []string{"a"}, files)), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.refreshIndex(ctx, "acme"); err != nil { // the listing it will lag at
		t.Fatal(err)
	}
	other := NewStore(fb)
	if err := other.Delete(ctx, "acme", first.ID); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, _, err := other.Collect(ctx, "acme", 0); err != nil {
		t.Fatal(err)
	}
	lagging.mu.Lock()
	lagging.armed = true
	lagging.mu.Unlock()
	if _, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, []string{"a"}, files)), 0); !errors.Is(err, ErrStaleRef) {
		t.Fatalf("a Write with a stale index: %v, want ErrStaleRef", err)
	}
	again, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindSnapshot}, bytes.NewReader(tarball(t, []string{"a"}, files)), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := s.Read(ctx, "acme", again.ID, &out); err != nil {
		t.Fatalf("the snapshot written after: %v", err)
	}
}

// A capture whose sparse map the restore would refuse is refused before it is
// recorded, and cws's other PAX records are not kept.
func TestBadSparseRefused(t *testing.T) {
	b, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(b)
	one := func(pax map[string]string, body string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body)), Format: tar.FormatPAX, PAXRecords: pax})
		_, _ = tw.Write([]byte(body))
		_ = tw.Close()
		return buf.Bytes()
	}
	for _, m := range []string{"x", "0:5,3:0", "0:4,10:0", "5:2,0:3,10:0", "0:5,-1:0"} {
		if _, err := s.Write(t.Context(), Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(one(map[string]string{"CWS.sparse": m}, "hello")), 0); err == nil {
			t.Errorf("sparse map %q for 5 bytes of data was recorded", m)
		}
	}
	snap, err := s.Write(t.Context(), Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(one(map[string]string{"CWS.sparse": "100:5,1000:0", "CWS.other": "x"}, "hello")), 0)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := s.Read(t.Context(), "acme", snap.ID, &out); err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(&out).Next()
	if err != nil || h.PAXRecords["CWS.sparse"] != "100:5,1000:0" || h.PAXRecords["CWS.other"] != "" {
		t.Errorf("read back %v, %v; want the sparse map alone", h.PAXRecords, err)
	}
}

// cutRanges ends every ranged read of a pack after keep(n) of its n bytes, with err
// (nil: a clean EOF, as a connection closed early reads).
type cutRanges struct {
	Backend
	keep func(n int64) int64
	err  error
}

func (c *cutRanges) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := c.Backend.GetRange(ctx, key, off, n)
	if err != nil || !strings.Contains(key, "/packs/") {
		return rc, err
	}
	var r io.Reader = io.LimitReader(rc, c.keep(n))
	if c.err != nil {
		r = io.MultiReader(r, iotest.ErrReader(c.err))
	}
	return struct {
		io.Reader
		io.Closer
	}{r, rc}, nil
}

// A range that ends early, anywhere in a span of many files, fails the restore with
// the cause, and never passes off a file's partial contents as whole.
func TestReadRangeCutShort(t *testing.T) {
	ctx := t.Context()
	rng := mrand.New(mrand.NewPCG(31, 4))
	names := []string{}
	files := map[string]string{}
	for i := range 40 {
		name := fmt.Sprintf("d%d/f%02d", i%3, i)
		names = append(names, name)
		b := make([]byte, 1+rng.IntN(9000))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		files[name] = string(b)
	}
	tb := tarball(t, names, files)
	broken := errors.New("connection reset by peer")
	for _, c := range []struct {
		name string
		keep func(n int64) int64
		err  error
		want error
	}{
		{"nothing", func(int64) int64 { return 0 }, nil, io.ErrUnexpectedEOF},
		{"one byte", func(int64) int64 { return 1 }, nil, io.ErrUnexpectedEOF},
		{"half", func(n int64) int64 { return n / 2 }, nil, io.ErrUnexpectedEOF},
		{"all but the last byte", func(n int64) int64 { return n - 1 }, nil, io.ErrUnexpectedEOF},
		{"half, then an error", func(n int64) int64 { return n / 2 }, broken, broken},
		{"all but one, then an error", func(n int64) int64 { return n - 1 }, broken, broken},
	} {
		t.Run(c.name, func(t *testing.T) {
			fb, err := NewFileBackend(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cut := &cutRanges{Backend: fb, keep: func(n int64) int64 { return n }}
			s := NewStore(cut)
			snap, err := s.Write(ctx, Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}, bytes.NewReader(tb), 0)
			if err != nil {
				t.Fatal(err)
			}
			cut.keep, cut.err = c.keep, c.err
			var out bytes.Buffer
			_, err = s.Read(ctx, "acme", snap.ID, &out)
			if !errors.Is(err, c.want) {
				t.Fatalf("Read: %v; want %v", err, c.want)
			}
			// Whatever went out before the failure is whole files, each as stored.
			tr := tar.NewReader(&out)
			for {
				h, err := tr.Next()
				if err != nil {
					break // the archive is cut: its end is not there
				}
				if h.Typeflag != tar.TypeReg {
					continue
				}
				got, err := io.ReadAll(tr)
				if err != nil {
					break
				}
				if string(got) != files[h.Name] {
					t.Errorf("%s: %d bytes out, stored %d", h.Name, len(got), len(files[h.Name]))
				}
			}
		})
	}
}

// garbling gives back other bytes than were stored for the keys garble picks: a store
// (or something between cws and it) that does not keep what it acknowledged.
type garbling struct {
	Backend
	garble func(key string) bool
}

func (g garbling) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := g.Backend.Get(ctx, key)
	if err != nil || !g.garble(key) {
		return rc, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	switch {
	case len(b) == 0:
		b = []byte{0}
	case len(b)%2 == 0:
		b = b[:len(b)-1] // cut short
	default:
		b[len(b)/2] ^= 1 // one bit
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// TestWriteReadsBack: a snapshot whose record or entry list reads back other than it
// was written (one bit, or cut short) is refused, and nothing of it stays; one that
// reads back whole is kept.
func TestWriteReadsBack(t *testing.T) {
	for _, which := range []string{"/entries/", "/meta/", ""} {
		t.Run(cmp.Or(strings.Trim(which, "/"), "none"), func(t *testing.T) {
			fb, err := NewFileBackend(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			s := NewStore(garbling{Backend: fb, garble: func(key string) bool { return which != "" && strings.Contains(key, which) }})
			for i, files := range []int{1, 700} {
				var names []string
				contents := map[string]string{}
				for j := range files {
					n := fmt.Sprintf("f%04d", j)
					names, contents[n] = append(names, n), randomText(100+j)
				}
				meta := Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}
				_, err := s.Write(t.Context(), meta, bytes.NewReader(tarball(t, names, contents)), 0)
				if which == "" {
					if err != nil {
						t.Fatalf("write %d: %v", i, err)
					}
					continue
				}
				if !errors.Is(err, ErrBadRecord) {
					t.Fatalf("write %d with %s garbled: %v, want ErrBadRecord", i, which, err)
				}
				for _, key := range []string{entriesKey("acme", meta.ID), metaKey("acme", meta.ID)} {
					if ok, err := fb.Exists(t.Context(), key); ok || err != nil {
						t.Errorf("%s after a refused write: exists %v, %v", key, ok, err)
					}
				}
			}
		})
	}
}

// TestWriteRecordTooLarge: a record Get could not read back (a session's env of over
// 1 MiB) is refused when it is written, with nothing of it left; one just under is kept
// and reads back.
func TestWriteRecordTooLarge(t *testing.T) {
	fb, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(fb)
	stream := tarball(t, []string{"a"}, map[string]string{"a": "x"})
	for _, tc := range []struct {
		env int
		ok  bool
	}{{maxRecord - 4096, true}, {maxRecord, false}, {4 * maxRecord, false}} {
		meta := Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive, Env: map[string]string{"BIG": strings.Repeat("e", tc.env)}}
		_, err := s.Write(t.Context(), meta, bytes.NewReader(stream), 0)
		if tc.ok {
			if err != nil {
				t.Errorf("env of %d bytes: %v", tc.env, err)
			} else if got, err := s.Get(t.Context(), "acme", meta.ID); err != nil || len(got.Env["BIG"]) != tc.env {
				t.Errorf("env of %d bytes read back: %v", tc.env, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadRecord) {
			t.Errorf("env of %d bytes: %v, want ErrBadRecord", tc.env, err)
		}
		for _, key := range []string{entriesKey("acme", meta.ID), metaKey("acme", meta.ID)} {
			if ok, err := fb.Exists(t.Context(), key); ok || err != nil {
				t.Errorf("%s after a refused write: exists %v, %v", key, ok, err)
			}
		}
	}
}

// failingReads cuts every read of a record short with an error after a few bytes.
type failingReads struct{ Backend }

func (f failingReads) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := f.Backend.Get(ctx, key)
	if err != nil || !strings.Contains(key, "/meta/") {
		return rc, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(rc, 5), iotest.ErrReader(errCut)), rc}, nil
}

var errCut = errors.New("connection reset")

// TestDeleteKeepsOnReadError: a record whose read fails is that error, not a bad
// record, and Delete leaves the snapshot as it is; a record that reads but can't be
// decoded is deleted.
func TestDeleteKeepsOnReadError(t *testing.T) {
	fb, err := NewFileBackend(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(fb)
	meta := Snapshot{ID: NewID(), Tenant: "acme", Kind: KindArchive}
	if _, err := s.Write(t.Context(), meta, bytes.NewReader(tarball(t, []string{"a"}, map[string]string{"a": "x"})), 0); err != nil {
		t.Fatal(err)
	}
	cut := NewStore(failingReads{fb})
	if _, err := cut.Get(t.Context(), "acme", meta.ID); !errors.Is(err, errCut) || errors.Is(err, ErrBadRecord) {
		t.Errorf("Get with the read cut: %v, want the read's error, not ErrBadRecord", err)
	}
	if err := cut.Delete(t.Context(), "acme", meta.ID); !errors.Is(err, errCut) {
		t.Errorf("Delete with the read cut: %v, want the read's error", err)
	}
	if ok, _ := fb.Exists(t.Context(), metaKey("acme", meta.ID)); !ok {
		t.Fatal("Delete removed a record it could not read")
	}
	if err := fb.Put(t.Context(), metaKey("acme", meta.ID), strings.NewReader("{not json"), -1); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), "acme", meta.ID); err != nil {
		t.Errorf("Delete of a record that can't be decoded: %v", err)
	}
	for _, key := range []string{entriesKey("acme", meta.ID), metaKey("acme", meta.ID)} {
		if ok, _ := fb.Exists(t.Context(), key); ok {
			t.Errorf("%s still there after Delete", key)
		}
	}
}
