package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// Pack files. A workspace's files are stored as blobs (each file's contents, zstd,
// named by the SHA-256 of what they hold), and blobs are stored many to an object: a
// pack of up to about packTarget bytes. An object store charges and waits per request,
// so a workspace of 100,000 small files is a few dozen PUTs, not 100,000 (restic, borg
// and kopia do the same, for the same reason).
//
// A pack is its blobs, one after the other, then its header, then the header's length
// and a magic:
//
//	blob 0 | blob 1 | … | zstd(JSON []packBlob) | uint32 LE header length | "cwsp"
//
// so that a pack can be read without an index. Packs are never changed once written;
// their names are random. Which pack holds which blob is kept twice: in each snapshot's
// entries (the pack, offset and length of every file's blob, so that a restore needs
// no other lookup), and in the tenant's index (index/<id>.json.zst, one per Write that
// stored anything, merged into one by each Collect), which a Write uses to store only
// what the tenant's store lacks. The collection rewrites packs that are mostly garbage
// into new ones and drops the old; an entries file that still names an old pack is
// served through the index (Read looks a blob up there when its pack is gone).

// packTarget is the size at which a pack is sealed and stored.
const packTarget = 16 << 20

// ownPack is the compressed size from which a blob is stored in a pack of its own,
// streamed from its temporary file rather than held in memory.
const ownPack = packTarget / 4

// packMagic ends every pack.
const packMagic = "cwsp"

// packUploads is how many packs one Write or Collect stores at once.
const packUploads = 4

// packBlob is one blob in a pack.
type packBlob struct {
	Sum string `json:"s"`
	Off int64  `json:"o"`
	Len int64  `json:"n"` // its bytes in the pack (compressed)
	Raw int64  `json:"r"` // the contents' bytes
}

// packInfo is one pack: its id, size and blobs.
type packInfo struct {
	ID    string     `json:"id"`
	Size  int64      `json:"size"`
	Blobs []packBlob `json:"blobs"`
}

// indexFile is one object of a tenant's index.
type indexFile struct {
	Packs []packInfo `json:"packs"`
}

// loc is where a blob is stored.
type loc struct {
	Pack     string
	Off, Len int64
	Raw      int64
}

func packKey(tenant, id string) string  { return tenant + "/packs/" + id[:2] + "/" + id }
func indexKey(tenant, id string) string { return tenant + "/index/" + id + ".json.zst" }

// newPackID returns a random pack or index name: 32 hex digits.
func newPackID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// validPackID reports whether id is one newPackID could have made.
func validPackID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

// packTrailer returns what follows a pack's blobs: its header and the header's length.
func (s *Store) packTrailer(blobs []packBlob) []byte {
	raw, _ := json.Marshal(blobs)
	h := s.enc.EncodeAll(raw, nil)
	var tail [8]byte
	binary.LittleEndian.PutUint32(tail[:4], uint32(len(h)))
	copy(tail[4:], packMagic)
	return append(h, tail[:]...)
}

// packer fills packs with the blobs a Write (or a Collect's repack) stores, and
// stores each pack once it is full, packUploads at a time.
type packer struct {
	s      *Store
	ctx    context.Context
	tenant string
	g      *errgroup.Group // the uploads
	stored atomic.Int64    // bytes of packs stored

	mu    sync.Mutex
	curID string // the pack being filled
	cur   []byte
	blobs []packBlob
	packs []packInfo     // sealed, stored or being stored
	locs  map[string]loc // every blob this packer took
}

func (s *Store) newPacker(ctx context.Context, tenant string) *packer {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(packUploads)
	return &packer{s: s, ctx: gctx, tenant: tenant, g: g, locs: map[string]loc{}}
}

// has reports whether the packer took sum already.
func (p *packer) has(sum string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.locs[sum]
	return ok
}

// add puts blob z (the compressed contents of raw bytes, named sum) in the current
// pack, and stores the pack once it is full. A blob it took already is not added again.
func (p *packer) add(sum string, z []byte, raw int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.ctx.Err(); err != nil {
		return err
	}
	if _, ok := p.locs[sum]; ok {
		return nil
	}
	if p.cur == nil {
		p.cur, p.curID = make([]byte, 0, packTarget+packTarget/8), newPackID()
	}
	off := int64(len(p.cur))
	p.cur = append(p.cur, z...)
	p.blobs = append(p.blobs, packBlob{Sum: sum, Off: off, Len: int64(len(z)), Raw: raw})
	p.locs[sum] = loc{Pack: p.curID, Off: off, Len: int64(len(z)), Raw: raw}
	if len(p.cur) >= packTarget {
		p.seal()
	}
	return nil
}

// seal stores the current pack (p.mu held). It waits while packUploads packs are on
// their way: the writers wait with it, which bounds the memory packs in flight take.
func (p *packer) seal() {
	if len(p.blobs) == 0 {
		return
	}
	id := p.curID
	data := append(p.cur, p.s.packTrailer(p.blobs)...)
	p.packs = append(p.packs, packInfo{ID: id, Size: int64(len(data)), Blobs: p.blobs})
	p.cur, p.blobs, p.curID = nil, nil, ""
	p.g.Go(func() error {
		if err := p.s.b.Put(p.ctx, packKey(p.tenant, id), bytes.NewReader(data), int64(len(data))); err != nil {
			return fmt.Errorf("store pack %s: %w", id, err)
		}
		p.stored.Add(int64(len(data)))
		return nil
	})
}

// addFile stores one large blob, compressed into f (zsize bytes), as a pack of its own:
// the header goes at the end of f, and f is stored as it is. f is the caller's to close.
func (p *packer) addFile(sum string, f *os.File, zsize, raw int64) error {
	p.mu.Lock()
	if _, ok := p.locs[sum]; ok {
		p.mu.Unlock()
		return nil
	}
	blobs := []packBlob{{Sum: sum, Off: 0, Len: zsize, Raw: raw}}
	id := newPackID()
	info := packInfo{ID: id, Blobs: blobs}
	// Claimed before the upload, so that another file with these contents waits for
	// nothing and writes nothing.
	p.locs[sum] = loc{Pack: id, Off: 0, Len: zsize, Raw: raw}
	p.mu.Unlock()
	if _, err := f.WriteAt(p.s.packTrailer(blobs), zsize); err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	info.Size = size
	if err := p.s.b.Put(p.ctx, packKey(p.tenant, id), f, size); err != nil {
		return fmt.Errorf("store pack %s: %w", id, err)
	}
	p.stored.Add(size)
	p.mu.Lock()
	p.packs = append(p.packs, info)
	p.mu.Unlock()
	return nil
}

// flush stores the last pack and waits for every upload; it returns the packs stored.
func (p *packer) flush() ([]packInfo, error) {
	p.mu.Lock()
	err := p.ctx.Err()
	if err == nil {
		p.seal()
	}
	p.mu.Unlock()
	if werr := p.g.Wait(); werr != nil {
		err = werr
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.packs), nil
}

// writeIndex stores an index object listing packs, and returns its key and size.
func (s *Store) writeIndex(ctx context.Context, tenant string, packs []packInfo) (string, int64, error) {
	raw, err := json.Marshal(indexFile{Packs: packs})
	if err != nil {
		return "", 0, err
	}
	z := s.enc.EncodeAll(raw, nil)
	key := indexKey(tenant, newPackID())
	if err := s.b.Put(ctx, key, bytes.NewReader(z), int64(len(z))); err != nil {
		return "", 0, fmt.Errorf("store the index: %w", err)
	}
	s.indexOf(tenant).added(key, packs)
	return key, int64(len(z)), nil
}

// tenantIndex is what this process knows of a tenant's index: the index objects it
// read, and where each blob they list is.
type tenantIndex struct {
	mu      sync.Mutex
	files   map[string][]packInfo // index object → its packs
	locs    map[string]loc
	seq     uint64 // refreshes started
	applied uint64 // the latest refresh applied: an older one never forgets objects
}

// forgetIndex drops what this process knows of a tenant's index: the next refresh
// reads it all again.
func (s *Store) forgetIndex(tenant string) {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	delete(s.indexes, tenant)
}

func (s *Store) indexOf(tenant string) *tenantIndex {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if s.indexes == nil {
		s.indexes = map[string]*tenantIndex{}
	}
	ti := s.indexes[tenant]
	if ti == nil {
		ti = &tenantIndex{files: map[string][]packInfo{}, locs: map[string]loc{}}
		s.indexes[tenant] = ti
	}
	return ti
}

// added records an index object this process wrote.
func (ti *tenantIndex) added(key string, packs []packInfo) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.files[key] = packs
	ti.merge(packs)
}

func (ti *tenantIndex) merge(packs []packInfo) {
	for _, pk := range packs {
		for _, b := range pk.Blobs {
			if _, ok := ti.locs[b.Sum]; !ok {
				ti.locs[b.Sum] = loc{Pack: pk.ID, Off: b.Off, Len: b.Len, Raw: b.Raw}
			}
		}
	}
}

// lookup returns where the index says sum is.
func (ti *tenantIndex) lookup(sum string) (loc, bool) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	l, ok := ti.locs[sum]
	return l, ok
}

// refreshIndex brings this process's copy of a tenant's index up to date: index
// objects it has not read are read, and those gone (merged by a collection) are
// forgotten. It returns the index objects there are.
func (s *Store) refreshIndex(ctx context.Context, tenant string) (*tenantIndex, []string, error) {
	for try := 0; ; try++ {
		ti, keys, merged, err := s.refreshIndexOnce(ctx, tenant)
		// An index object gone between the list and its read was merged by a
		// collection: the list of a moment later names the object it went into.
		if err != nil || !merged || try == 2 {
			return ti, keys, err
		}
	}
}

func (s *Store) refreshIndexOnce(ctx context.Context, tenant string) (ti *tenantIndex, keys []string, merged bool, err error) {
	ti = s.indexOf(tenant)
	ti.mu.Lock()
	ti.seq++
	seq := ti.seq
	ti.mu.Unlock()
	if err := s.b.List(ctx, tenant+"/index/", func(o Object) error {
		if id, ok := strings.CutSuffix(path.Base(o.Key), ".json.zst"); ok && validPackID(id) {
			keys = append(keys, o.Key)
		}
		return nil
	}); err != nil {
		return nil, nil, false, fmt.Errorf("list the index: %w", err)
	}
	slices.Sort(keys)
	ti.mu.Lock()
	var missing []string
	for _, k := range keys {
		if _, ok := ti.files[k]; !ok {
			missing = append(missing, k)
		}
	}
	ti.mu.Unlock()
	read := make([][]packInfo, len(missing))
	var gone atomic.Bool
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, k := range missing {
		g.Go(func() error {
			packs, err := s.readIndex(gctx, k)
			if errors.Is(err, ErrNotFound) {
				gone.Store(true) // merged by a collection meanwhile
				return nil
			}
			read[i] = packs
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, false, err
	}
	ti.mu.Lock()
	defer ti.mu.Unlock()
	present := make(map[string]bool, len(keys))
	for _, k := range keys {
		present[k] = true
	}
	// A refresh that listed before another that was applied since knows less: it
	// only adds what it read.
	forgot := false
	if seq > ti.applied {
		ti.applied = seq
		for k := range ti.files {
			if !present[k] {
				delete(ti.files, k)
				forgot = true
			}
		}
	}
	for i, k := range missing {
		if read[i] != nil {
			ti.files[k] = read[i]
		}
	}
	if forgot {
		ti.locs = map[string]loc{}
		for _, k := range slices.Sorted(maps.Keys(ti.files)) {
			ti.merge(ti.files[k])
		}
	} else {
		for i := range missing {
			ti.merge(read[i])
		}
	}
	return ti, keys, gone.Load(), nil
}

// readIndex reads one index object.
func (s *Store) readIndex(ctx context.Context, key string) ([]packInfo, error) {
	var f indexFile
	if err := s.getJSON(ctx, key, &f); err != nil {
		return nil, err
	}
	for _, pk := range f.Packs {
		if !validPackID(pk.ID) {
			return nil, fmt.Errorf("index %s: bad pack name %q", key, pk.ID)
		}
	}
	return f.Packs, nil
}

// readPackHeader reads the blobs a pack holds from the pack itself (size: its bytes).
func (s *Store) readPackHeader(ctx context.Context, tenant, id string, size int64) ([]packBlob, error) {
	if size < 8 {
		return nil, fmt.Errorf("pack %s: %d bytes: too short", id, size)
	}
	tail, err := s.getRange(ctx, packKey(tenant, id), size-8, 8)
	if err != nil {
		return nil, err
	}
	if string(tail[4:]) != packMagic {
		return nil, fmt.Errorf("pack %s: not a pack (no magic)", id)
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > size-8 {
		return nil, fmt.Errorf("pack %s: header of %d bytes in %d", id, n, size)
	}
	h, err := s.getRange(ctx, packKey(tenant, id), size-8-n, n)
	if err != nil {
		return nil, err
	}
	raw, err := s.dec.DecodeAll(h, nil)
	if err != nil {
		return nil, fmt.Errorf("pack %s: header: %w", id, err)
	}
	var blobs []packBlob
	if err := json.Unmarshal(raw, &blobs); err != nil {
		return nil, fmt.Errorf("pack %s: header: %w", id, err)
	}
	return blobs, nil
}

// getRange reads n bytes of key from off.
func (s *Store) getRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	rc, err := s.b.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := make([]byte, n)
	if _, err := io.ReadFull(rc, buf); err != nil {
		return nil, fmt.Errorf("get %s: %w", key, err)
	}
	return buf, nil
}

// readAllLimit reads an object of size bytes, and no more.
func readAllLimit(r io.Reader, size int64) ([]byte, error) {
	buf := make([]byte, size)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	return buf, nil
}
