package snapshot

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"unicode/utf8"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
)

// Kinds of snapshot: what the caller asked for, a session's archive (its only copy
// while it is archived), and the transient copy a fork starts from.
const (
	KindSnapshot = "snapshot"
	KindArchive  = "archive"
	KindFork     = "fork"
)

// Snapshot is a snapshot's record: what it holds, not its entries.
type Snapshot struct {
	ID        string            `json:"id"`
	Tenant    string            `json:"tenant"`
	Session   string            `json:"session"`
	Subject   string            `json:"sub,omitempty"` // who made the session
	Name      string            `json:"name,omitempty"`
	Kind      string            `json:"kind"`
	CreatedAt time.Time         `json:"createdAt"`
	ExpiresAt time.Time         `json:"expiresAt,omitzero"`
	Bytes     int64             `json:"bytes"`  // the workspace's file contents
	Files     int               `json:"files"`  // regular files (and hard links)
	Stored    int64             `json:"stored"` // bytes this snapshot added to the store, compressed
	Image     string            `json:"image"`
	Env       map[string]string `json:"env,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// SessionExpires is the session's hard end of life (archives: a session adopted
	// from its archive keeps it).
	SessionExpires time.Time `json:"sessionExpiresAt,omitzero"`
	// Skipped lists what the capture left out (FIFOs, sockets, devices), and why.
	Skipped []agent.TarSkip `json:"skipped,omitempty"`
}

// ReadNotes is what a Read had to change to give a snapshot back: names that clash
// because an older cws stored them without their bytes (not UTF-8), renamed.
type ReadNotes struct {
	Renamed []Rename `json:"renamed,omitempty"`
}

// Rename is one path a Read gave back under another name.
type Rename struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// entry is one path of the workspace, in the order the tar had them. Names and link
// targets are bytes: one that is not UTF-8 (which JSON can't carry) goes in PathB or
// LinkB instead.
type entry struct {
	Path  string            `json:"p"`
	PathB []byte            `json:"pb,omitempty"`
	Type  byte              `json:"t"` // a tar typeflag: '0' file, '1' hard link, '2' symlink, '5' directory
	Mode  int64             `json:"m"`
	Size  int64             `json:"s,omitempty"` // the contents' bytes (a sparse file's data)
	Blob  string            `json:"b,omitempty"` // sha256 of the contents (files)
	Link  string            `json:"l,omitempty"` // symlink target, or the earlier path of a hard link
	LinkB []byte            `json:"lb,omitempty"`
	MTime int64             `json:"t2,omitempty"`
	PAX   map[string]string `json:"x,omitempty"` // cws's PAX records (agent.TarSparse)
	// Where Blob is: its pack, offset and length there (none: a loose blob of an older
	// cws, or look it up in the index when the pack is gone).
	Pack string `json:"k,omitempty"`
	Off  int64  `json:"o,omitempty"`
	Len  int64  `json:"n,omitempty"`
}

// packNames moves names that are not UTF-8 into their byte fields, for JSON.
func packNames(es []entry) {
	for i := range es {
		if !utf8.ValidString(es[i].Path) {
			es[i].PathB, es[i].Path = []byte(es[i].Path), ""
		}
		if !utf8.ValidString(es[i].Link) {
			es[i].LinkB, es[i].Link = []byte(es[i].Link), ""
		}
	}
}

// unpackNames undoes packNames.
func unpackNames(es []entry) {
	for i := range es {
		if es[i].PathB != nil {
			es[i].Path, es[i].PathB = string(es[i].PathB), nil
		}
		if es[i].LinkB != nil {
			es[i].Link, es[i].LinkB = string(es[i].LinkB), nil
		}
	}
}

// ErrBadRecord is a snapshot record that can't be read (torn, or not cws's).
var ErrBadRecord = errors.New("bad snapshot record")

// ErrStaleRef is a capture that sent a file as a reference (agent.TarRef) to contents
// the Write was not told the workspace holds, or the store no longer has: capture it
// again without references.
var ErrStaleRef = errors.New("the capture referred to contents the store can't vouch for")

// ErrTooLarge is a workspace past the limit Write was given.
var ErrTooLarge = errors.New("snapshot too large")

// Store keeps snapshots in a Backend.
type Store struct {
	b         Backend
	workers   int
	enc       *zstd.Encoder
	dec       *zstd.Decoder // records, entries, index objects
	blobDec   *zstd.Decoder // blobs: never past the capacity given (their stored size)
	fencePoll time.Duration // how often a Write waiting for a collection looks again
	// beforeDelete, if set, runs before each blob a collection deletes (tests).
	beforeDelete func(key string)

	indexMu sync.Mutex
	indexes map[string]*tenantIndex // by tenant
}

// NewStore returns the store over b. Every operation on b fails once it makes no
// progress for DefaultStall (WithStallTimeout).
func NewStore(b Backend) *Store {
	if _, ok := b.(*stallBackend); !ok {
		b = WithStallTimeout(b, 0)
	}
	// EncodeAll and DecodeAll run as many at once as the concurrency allows.
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	dec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)))
	blobDec, _ := zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithDecodeAllCapLimit(true))
	return &Store{b: b, workers: 8, enc: enc, dec: dec, blobDec: blobDec, fencePoll: 250 * time.Millisecond}
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a snapshot id: "snap-" and 20 random base32 characters.
func NewID() string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	return "snap-" + idEncoding.EncodeToString(b[:])[:20]
}

// ValidID reports whether id is one NewID could have made.
func ValidID(id string) bool {
	rest, ok := strings.CutPrefix(id, "snap-")
	if !ok || len(rest) != 20 {
		return false
	}
	for _, c := range rest {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

func metaKey(tenant, id string) string    { return tenant + "/meta/" + id + ".json" }
func entriesKey(tenant, id string) string { return tenant + "/entries/" + id + ".json.zst" }
func blobKey(tenant, sum string) string   { return tenant + "/blobs/" + sum[:2] + "/" + sum }

// maxSparseSegments is the most segments a sparse map of a capture may have (the
// agent's capture stores a file dense past 4,096).
const maxSparseSegments = 4096

// inMemory is the largest file a snapshot holds in memory while it stores it; larger
// ones go through a temporary file.
const inMemory = 8 << 20

// Write stores the tar stream r as snapshot meta (whose ID, Tenant and Kind must be
// set) and returns its record. Contents the tenant's store already holds are not
// written again. A workspace whose file contents pass limit bytes (0: none) is
// ErrTooLarge, and nothing of it is recorded. The record is written last: a snapshot
// exists once it is whole.
func (s *Store) Write(ctx context.Context, meta Snapshot, r io.Reader, limit int64) (*Snapshot, error) {
	snap, _, err := s.WriteRefs(ctx, meta, r, limit, nil)
	return snap, err
}

// WriteRefs is Write of a capture that may send files as references to contents
// (agent.TarOutArgs.Refs): known are those it may name (what the same workspace's
// earlier snapshots held, as WriteRefs returned them); a reference to any other, or to
// contents the store no longer holds, is ErrStaleRef. It returns the contents the
// snapshot holds, for the next capture's known.
func (s *Store) WriteRefs(ctx context.Context, meta Snapshot, r io.Reader, limit int64, known map[string]bool) (*Snapshot, map[string]bool, error) {
	snap, es, err := s.write(ctx, meta, r, limit, known)
	if err != nil {
		return nil, nil, err
	}
	sums := make(map[string]bool, len(es))
	for _, e := range es {
		if e.Blob != "" {
			sums[e.Blob] = true
		}
	}
	return snap, sums, nil
}

func (s *Store) write(ctx context.Context, meta Snapshot, r io.Reader, limit int64, known map[string]bool) (*Snapshot, []entry, error) {
	if !ValidID(meta.ID) || meta.Tenant == "" {
		return nil, nil, fmt.Errorf("snapshot: bad id %q or tenant %q", meta.ID, meta.Tenant)
	}
	release, err := s.lease(ctx, meta.Tenant, meta.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: announce the write: %w", err)
	}
	defer release()
	// What the tenant's store holds, read after the lease: a collection that ended
	// before it has merged the index, and none starts until the lease is gone.
	ti, _, err := s.refreshIndex(ctx, meta.Tenant)
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.workers)
	p := s.newPacker(ctx, meta.Tenant) // not gctx: that ends with g.Wait, before the last pack

	w := &writing{s: s, g: g, ctx: gctx, meta: &meta, limit: limit, pending: map[string]bool{}, index: ti, p: p, known: known}
	if err := w.read(r); err != nil {
		_ = g.Wait() // the files already handed out end before their contents go
		_ = p.g.Wait()
		return nil, nil, err
	}
	err = g.Wait()
	packs, perr := p.flush()
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, nil, fmt.Errorf("snapshot: store the files: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	stored := p.stored.Load()
	if len(packs) > 0 {
		_, n, err := s.writeIndex(ctx, meta.Tenant, packs)
		if err != nil {
			return nil, nil, fmt.Errorf("snapshot: %w", err)
		}
		stored += n
	}
	for i, sum := range w.sums {
		w.entries[i].Blob = sum
	}
	reused := map[string]bool{} // packs of earlier snapshots this one names
	for i := range w.entries {
		e := &w.entries[i]
		if e.Blob == "" {
			continue
		}
		l, ok := p.locs[e.Blob]
		if !ok {
			if l, ok = ti.lookup(e.Blob); !ok {
				return nil, nil, fmt.Errorf("snapshot: %s: its contents %s were stored nowhere", e.Path, e.Blob)
			}
			reused[l.Pack] = true
		}
		e.Pack, e.Off, e.Len = l.Pack, l.Off, l.Len
	}
	// The index this process keeps said they are there; the store says so now, under
	// the lease (no collection can remove them until the record is written).
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(s.workers)
	for pack := range reused {
		eg.Go(func() error {
			ok, err := s.b.Exists(ectx, packKey(meta.Tenant, pack))
			if err != nil {
				return fmt.Errorf("snapshot: %w", err)
			}
			if !ok {
				s.forgetIndex(meta.Tenant)
				return fmt.Errorf("%w: pack %s, which the index names, is gone", ErrStaleRef, pack)
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return nil, nil, err
	}
	snap, written, err := s.finish(ctx, meta, w.entries, stored)
	if err != nil {
		return nil, nil, err
	}
	// Read it back: a snapshot that is the only copy (an archive) must be proven
	// readable (verify) before anything of the workspace is removed.
	if err := s.verify(ctx, snap, written); err != nil {
		// What this write put there, read back wrong or not: never a record to restore.
		_ = s.remove(context.WithoutCancel(ctx), meta.Tenant, meta.ID)
		return nil, nil, fmt.Errorf("snapshot %s: read back what was written: %w", meta.ID, err)
	}
	return snap, w.entries, nil
}

// verify reads a snapshot's record and entry list back from the store and checks they
// are byte for byte what finish wrote, and that the record decodes as Get decodes it.
// The entry list is not decoded again (a second snapshot's 20 ms): finish encoded it
// from the entries, within the size getJSON reads.
func (s *Store) verify(ctx context.Context, want *Snapshot, written map[string][]byte) error {
	if _, err := parseRecord(written[metaKey(want.Tenant, want.ID)]); err != nil {
		return err
	}
	for _, key := range []string{entriesKey(want.Tenant, want.ID), metaKey(want.Tenant, want.ID)} {
		rc, err := s.b.Get(ctx, key)
		if err != nil {
			return err
		}
		got, err := io.ReadAll(io.LimitReader(rc, int64(len(written[key]))+1))
		rc.Close()
		if err != nil {
			return err
		}
		if !bytes.Equal(got, written[key]) {
			return fmt.Errorf("%w: %s read back differs from what was written (%d bytes, %d written)", ErrBadRecord, key, len(got), len(written[key]))
		}
	}
	return nil
}

// writing is one Write under way.
type writing struct {
	s       *Store
	g       *errgroup.Group // hashes and stores the contents, several at a time
	ctx     context.Context // g's
	meta    *Snapshot
	limit   int64
	entries []entry
	index   *tenantIndex    // what the tenant's store holds already
	p       *packer         // what this snapshot adds
	known   map[string]bool // contents a reference may name (WriteRefs)

	mu      sync.Mutex
	pending map[string]bool // contents being stored or stored already
	sums    map[int]string  // entries' Blob, by index, from the workers
}

// blob records that entry i (-1: set by the caller) holds contents sum, and says
// whether the caller is the first with them, and so must store them.
func (w *writing) blob(i int, sum string) (first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if i >= 0 {
		if w.sums == nil {
			w.sums = map[int]string{}
		}
		w.sums[i] = sum
	}
	if w.pending[sum] {
		return false
	}
	w.pending[sum] = true
	return true
}

// read reads the workspace's tar stream into w.entries, handing each file's contents to
// w.g to be stored.
func (w *writing) read(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("snapshot: read the workspace: %w", err)
		}
		if w.ctx.Err() != nil {
			return nil // g.Wait says why
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			if raw, ok := h.PAXRecords[agent.TarSkipped]; ok {
				if err := json.Unmarshal([]byte(raw), &w.meta.Skipped); err != nil {
					return fmt.Errorf("snapshot: read the workspace: bad list of skipped entries: %w", err)
				}
			}
			continue
		}
		if len(w.entries) >= agent.MaxTarEntries {
			return fmt.Errorf("%w: the workspace holds more than %d entries", ErrTooLarge, agent.MaxTarEntries)
		}
		e := entry{Path: h.Name, Type: h.Typeflag, Mode: h.Mode, MTime: h.ModTime.UnixNano()}
		// Of cws's PAX records only the sparse map is kept: what the restore reads back
		// must be what it accepts.
		if v, ok := h.PAXRecords[agent.TarSparse]; ok && h.Typeflag == tar.TypeReg {
			e.PAX = map[string]string{agent.TarSparse: v}
		}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeSymlink, tar.TypeLink:
			e.Link = h.Linkname
			if h.Typeflag == tar.TypeLink {
				w.meta.Files++
			}
		case tar.TypeReg:
			if ref, ok := h.PAXRecords[agent.TarRef]; ok {
				// Unchanged since the workspace's last capture: its contents by name.
				size, err := strconv.ParseInt(h.PAXRecords[agent.TarRefSize], 10, 64)
				if err != nil || size < 0 || h.Size != 0 {
					return fmt.Errorf("snapshot: read the workspace: %s: a bad reference", h.Name)
				}
				if !w.known[ref] {
					return fmt.Errorf("%w: %s", ErrStaleRef, h.Name)
				}
				l, ok := w.index.lookup(ref)
				if !ok {
					return fmt.Errorf("%w: %s: its contents are no longer stored", ErrStaleRef, h.Name)
				}
				if l.Raw != size {
					// The size is the sandbox's word; the store's is what a restore reads.
					return fmt.Errorf("%w: %s: %d bytes referred to, %d stored", ErrStaleRef, h.Name, size, l.Raw)
				}
				h.Size, e.Blob = size, ref
			}
			if e.PAX != nil {
				if _, _, err := agent.ParseSparse(e.PAX[agent.TarSparse], h.Size, maxSparseSegments); err != nil {
					return fmt.Errorf("snapshot: read the workspace: %s: %w", h.Name, err)
				}
			}
			w.meta.Files++
			w.meta.Bytes += h.Size
			if w.limit > 0 && w.meta.Bytes > w.limit {
				return fmt.Errorf("%w: the workspace holds more than %d bytes of files", ErrTooLarge, w.limit)
			}
			e.Size = h.Size
			if h.Size == 0 || e.Blob != "" {
				break // nothing to store, or stored already
			}
			if h.Size <= inMemory {
				// Hashed by the worker that stores it, so that hashing runs beside the
				// read of the next files instead of after each.
				mem := make([]byte, h.Size)
				if _, err := io.ReadFull(tr, mem); err != nil {
					return fmt.Errorf("snapshot: read the workspace: %w", err)
				}
				i := len(w.entries)
				w.g.Go(func() error {
					sum := sha256.Sum256(mem)
					c := &content{sum: hex.EncodeToString(sum[:]), mem: mem}
					if !w.blob(i, c.sum) {
						return nil // another file of this snapshot has these contents
					}
					return w.store(c)
				})
				break
			}
			c, err := w.s.spool(tr, h.Size)
			if err != nil {
				return err
			}
			e.Blob = c.sum
			if !w.blob(-1, c.sum) {
				c.close()
				break
			}
			w.g.Go(func() error {
				defer c.close()
				return w.store(c)
			})
		default:
			continue // devices, fifos: never in a workspace archive
		}
		w.entries = append(w.entries, e)
	}
}

// finish writes a snapshot's entries, then its record.
func (s *Store) finish(ctx context.Context, meta Snapshot, entries []entry, stored int64) (*Snapshot, map[string][]byte, error) {
	packNames(entries)
	list, err := json.Marshal(entries)
	if err != nil {
		return nil, nil, err
	}
	packed := s.enc.EncodeAll(list, nil)
	if err := s.b.Put(ctx, entriesKey(meta.Tenant, meta.ID), bytes.NewReader(packed), int64(len(packed))); err != nil {
		return nil, nil, err
	}
	meta.Stored = stored + int64(len(packed))
	rec, err := json.Marshal(meta)
	if err != nil {
		_ = s.b.Delete(context.WithoutCancel(ctx), entriesKey(meta.Tenant, meta.ID))
		return nil, nil, fmt.Errorf("snapshot %s: the record: %w", meta.ID, err)
	}
	if len(rec) > maxRecord || len(packed) > maxEntryList {
		_ = s.b.Delete(context.WithoutCancel(ctx), entriesKey(meta.Tenant, meta.ID))
		return nil, nil, fmt.Errorf("%w: snapshot %s: its record (%d bytes, at most %d: the session's env and labels, the skipped entries) or entry list (%d bytes, at most %d) is too large to be read back",
			ErrBadRecord, meta.ID, len(rec), maxRecord, len(packed), maxEntryList)
	}
	if err := s.b.Put(ctx, metaKey(meta.Tenant, meta.ID), bytes.NewReader(rec), int64(len(rec))); err != nil {
		_ = s.b.Delete(context.WithoutCancel(ctx), entriesKey(meta.Tenant, meta.ID))
		return nil, nil, err
	}
	return &meta, map[string][]byte{entriesKey(meta.Tenant, meta.ID): packed, metaKey(meta.Tenant, meta.ID): rec}, nil
}

// content is one file's contents while it is stored: in memory, or in a temporary file.
type content struct {
	sum  string
	mem  []byte
	file *os.File
}

func (c *content) close() {
	if c.file != nil {
		c.file.Close()
		os.Remove(c.file.Name())
	}
}

func (c *content) reader() io.Reader {
	if c.file != nil {
		_, _ = c.file.Seek(0, io.SeekStart)
		return c.file
	}
	return bytes.NewReader(c.mem)
}

// spool reads size bytes of r and hashes them.
func (s *Store) spool(r io.Reader, size int64) (*content, error) {
	h := sha256.New()
	c := &content{}
	if size <= inMemory {
		c.mem = make([]byte, size)
		if _, err := io.ReadFull(r, c.mem); err != nil {
			return nil, fmt.Errorf("snapshot: read the workspace: %w", err)
		}
		h.Write(c.mem)
	} else {
		f, err := os.CreateTemp("", "cws-snapshot-*")
		if err != nil {
			return nil, err
		}
		c.file = f
		if _, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, size)); err != nil {
			c.close()
			return nil, fmt.Errorf("snapshot: read the workspace: %w", err)
		}
	}
	c.sum = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

// store puts c in a pack unless the tenant's store holds it already.
func (w *writing) store(c *content) error {
	if _, ok := w.index.lookup(c.sum); ok {
		return nil
	}
	if c.file == nil {
		return w.p.add(c.sum, w.s.enc.EncodeAll(c.mem, nil), int64(len(c.mem)))
	}
	// Compressed into a temporary file first: a large file does not sit in memory, and
	// the store is told the size (an S3 upload of unknown size buffers hundreds of MiB).
	f, err := os.CreateTemp("", "cws-blob-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	zw, err := zstd.NewWriter(f, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		return err
	}
	raw, err := io.Copy(zw, c.reader())
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if size >= ownPack {
		return w.p.addFile(c.sum, f, size, raw)
	}
	z := make([]byte, size)
	if _, err := f.ReadAt(z, 0); err != nil {
		return err
	}
	return w.p.add(c.sum, z, raw)
}

// Get returns a tenant's snapshot record; another tenant's is ErrNotFound.
func (s *Store) Get(ctx context.Context, tenant, id string) (*Snapshot, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("snapshot %q: %w", id, ErrNotFound)
	}
	rc, err := s.b.Get(ctx, metaKey(tenant, id))
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotFound)
		}
		return nil, err
	}
	defer rc.Close()
	// Read whole first: a read that fails (a connection cut, the stall watchdog) is
	// that error, not a bad record.
	rec, err := io.ReadAll(io.LimitReader(rc, maxRecord+1))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: read the record: %w", id, err)
	}
	m, err := parseRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return m, nil
}

// maxRecord bounds a snapshot's record (its session's env and labels, the skipped
// entries); finish refuses to write a longer one, which Get would not read.
const maxRecord = 1 << 20

// parseRecord decodes a record as Get reads it.
func parseRecord(rec []byte) (*Snapshot, error) {
	if len(rec) > maxRecord {
		return nil, fmt.Errorf("%w: the record is over %d bytes", ErrBadRecord, maxRecord)
	}
	var m Snapshot
	if err := json.Unmarshal(rec, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	return &m, nil
}

// List returns a tenant's snapshots of the given kinds (all when none), oldest first.
func (s *Store) List(ctx context.Context, tenant string, kinds ...string) ([]*Snapshot, error) {
	var ids []string
	err := s.b.List(ctx, tenant+"/meta/", func(o Object) error {
		if id, ok := strings.CutSuffix(path.Base(o.Key), ".json"); ok && ValidID(id) {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]*Snapshot, 0, len(ids))
	for _, id := range ids {
		m, err := s.Get(ctx, tenant, id)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrBadRecord) {
			continue // deleted meanwhile; or unreadable, which must not hide the others
		}
		if err != nil {
			return nil, err
		}
		if len(kinds) == 0 || slices.Contains(kinds, m.Kind) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *Snapshot) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Tenants returns the tenants the store holds anything of.
func (s *Store) Tenants(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	err := s.b.List(ctx, "", func(o Object) error {
		if t, rest, ok := strings.Cut(o.Key, "/"); ok && strings.HasPrefix(rest, "meta/") {
			seen[t] = true
		}
		return nil
	})
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, err
}

// Delete removes a snapshot's record and entries; its blobs go with the next Collect.
// A record that can't be read (ErrBadRecord) goes too: it could never be restored.
func (s *Store) Delete(ctx context.Context, tenant, id string) error {
	if _, err := s.Get(ctx, tenant, id); err != nil && !errors.Is(err, ErrBadRecord) {
		return err
	}
	return s.remove(ctx, tenant, id)
}

// remove deletes a snapshot's record, then its entry list, whatever they hold.
func (s *Store) remove(ctx context.Context, tenant, id string) error {
	if err := s.b.Delete(ctx, metaKey(tenant, id)); err != nil {
		return err
	}
	return s.b.Delete(ctx, entriesKey(tenant, id))
}

func (s *Store) entries(ctx context.Context, tenant, id string) ([]entry, error) {
	var es []entry
	if err := s.getJSON(ctx, entriesKey(tenant, id), &es); err != nil {
		return nil, fmt.Errorf("snapshot %s: entries: %w", id, err)
	}
	unpackNames(es)
	return es, nil
}

// maxEntryList bounds what getJSON reads of an object (an entry list, an index).
const maxEntryList = 1 << 30

// getJSON reads the zstd-compressed JSON object key (entries, index) into v.
func (s *Store) getJSON(ctx context.Context, key string, v any) error {
	rc, err := s.b.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	z, err := io.ReadAll(io.LimitReader(rc, maxEntryList))
	if err != nil {
		return err
	}
	raw, err := s.dec.DecodeAll(z, nil)
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadRecord, key, err)
	}
	return nil
}

// Read writes a tenant's snapshot id to w as a tar stream, as an exact archive
// (agent.TarInArgs.Exact restores it): its directories and symlinks first, in the order
// they were taken, then its files pack by pack (see restore.go), then its hard links.
// Names that an older cws stored without their bytes and that so clash are renamed, and
// the notes say so.
func (s *Store) Read(ctx context.Context, tenant, id string, w io.Writer) (ReadNotes, error) {
	var notes ReadNotes
	if _, err := s.Get(ctx, tenant, id); err != nil {
		return notes, err
	}
	es, err := s.entries(ctx, tenant, id)
	if err != nil {
		return notes, err
	}
	notes.Renamed = renameClashes(es)
	return notes, s.read(ctx, tenant, id, es, w)
}

// renameClashes renames the entries whose path an earlier entry has. A renamed
// directory takes the entries listed after it beneath its old name along (they were
// its own: a tree is listed depth first), and a hard link to a renamed path follows
// it. Only a record of an older cws, which stored names as UTF-8 and so replaced what
// was not, can hold them.
func renameClashes(es []entry) []Rename {
	seen := make(map[string]bool, len(es))
	moved := map[string]string{} // a renamed directory's old path → its new one
	var out []Rename
	follow := func(p string) string {
		if len(moved) == 0 {
			return p
		}
		for i := len(p) - 1; i > 0; i-- {
			if p[i] == '/' {
				if to, ok := moved[p[:i]]; ok {
					return to + p[i:]
				}
			}
		}
		return p
	}
	renamedFiles := map[string]string{}
	for i := range es {
		e := &es[i]
		dir := strings.HasSuffix(e.Path, "/") || e.Type == tar.TypeDir
		p := follow(strings.TrimSuffix(e.Path, "/"))
		if e.Type == tar.TypeLink {
			if to, ok := renamedFiles[e.Link]; ok {
				e.Link = to
			} else {
				e.Link = follow(e.Link)
			}
		}
		if seen[p] {
			old := p
			for n := 2; ; n++ {
				q := fmt.Sprintf("%s (%d)", old, n)
				if !seen[q] {
					p = q
					break
				}
			}
			out = append(out, Rename{From: strings.TrimSuffix(e.Path, "/"), To: p})
			if dir {
				moved[old] = p
			} else {
				renamedFiles[old] = p
			}
		}
		seen[p] = true
		if dir && strings.HasSuffix(e.Path, "/") {
			e.Path = p + "/"
		} else {
			e.Path = p
		}
	}
	return out
}
