package snapshot

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/semaphore"
)

// A restore reads each pack it needs once, as few byte ranges as cover the blobs it
// needs, several at a time and ahead of the tar it writes: the files come in the order
// of the packs, not of the tree (the directories came first, so every file's directory
// is there before it). A blob is fetched once however many files hold it.

// readAhead bounds the bytes a Read holds fetched and not yet written.
const readAhead = 64 << 20

// readFetches is how many ranges a Read fetches at once.
const readFetches = 8

// spanRaw bounds the decoded contents of one span (a pack of small files that compress
// well holds far more than its size).
const spanRaw = 16 << 20

// rangeGap is the largest run of unneeded bytes a range reads through rather than
// starting another.
const rangeGap = 1 << 20

// span is one read of the store: a byte range of a pack holding one or more blobs a
// snapshot needs, or one loose blob of an older cws.
type span struct {
	pack   string // "" for a loose blob
	off, n int64
	blobs  []packBlob // in the order of the pack
	stream bool       // large: streamed when its turn comes, never held

	weight int64        // of the read-ahead budget, while held
	out    chan fetched // each blob's contents in order, as it arrives; or one error
}

// fetched is one blob of a span, read and checked, or the error that ends the span.
type fetched struct {
	data []byte
	err  error
}

func (sp *span) raw() int64 {
	var n int64
	for _, b := range sp.blobs {
		n += b.Raw
	}
	return n
}

// restoring is one Read under way.
type restoring struct {
	s      *Store
	tenant string
	id     string

	indexOnce sync.Once // the tenant's index, read at most once, and only if needed
	index     *tenantIndex
	indexErr  error
}

// lookup finds sum in the tenant's index.
func (r *restoring) lookup(ctx context.Context, sum string) (loc, bool, error) {
	r.indexOnce.Do(func() { r.index, _, r.indexErr = r.s.refreshIndex(ctx, r.tenant) })
	if r.indexErr != nil {
		return loc{}, false, r.indexErr
	}
	l, ok := r.index.lookup(sum)
	return l, ok, nil
}

func (s *Store) read(ctx context.Context, tenant, id string, es []entry, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &restoring{s: s, tenant: tenant, id: id}
	// Writes of 256 KiB: an agent's upload sends each write as a frame, and a tar
	// writer's own are a header or a small file each.
	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	header := func(e *entry) error {
		h := &tar.Header{Name: e.Path, Typeflag: e.Type, Mode: e.Mode, Size: e.Size, Linkname: e.Link, ModTime: time.Unix(0, e.MTime), Format: tar.FormatPAX, PAXRecords: e.PAX}
		if e.Type != tar.TypeReg {
			h.Size = 0
		}
		return tw.WriteHeader(h)
	}
	// Directories and symlinks, in their order.
	for i := range es {
		if t := es[i].Type; t != tar.TypeReg && t != tar.TypeLink {
			if err := header(&es[i]); err != nil {
				return err
			}
		}
	}
	// Files: where each blob is, then the spans that read them.
	holders := map[string][]*entry{} // a blob's files, in their order
	var sums []string                // blobs in the order of their first file
	for i := range es {
		e := &es[i]
		if e.Type != tar.TypeReg {
			continue
		}
		if e.Blob == "" {
			if e.Size != 0 {
				return fmt.Errorf("snapshot %s: %s: %d bytes and no contents stored", id, e.Path, e.Size)
			}
			if err := header(e); err != nil {
				return err
			}
			continue
		}
		if _, ok := holders[e.Blob]; !ok {
			sums = append(sums, e.Blob)
		}
		holders[e.Blob] = append(holders[e.Blob], e)
	}
	spans, err := r.plan(ctx, sums, holders)
	if err != nil {
		return err
	}
	budget := semaphore.NewWeighted(readAhead)
	go r.fetchAhead(ctx, spans, budget)
	for _, sp := range spans {
		if sp.stream {
			for _, e := range holders[sp.blobs[0].Sum] {
				if err := header(e); err != nil {
					return err
				}
				if err := r.stream(ctx, sp, tw); err != nil {
					return err
				}
			}
			continue
		}
		// Each blob is written as soon as its bytes have come and been checked, not
		// once the whole range has: the agent starts on the first files while the
		// rest of the pack is still on its way.
		for _, b := range sp.blobs {
			var f fetched
			select {
			case f = <-sp.out:
			case <-ctx.Done():
				return ctx.Err()
			}
			if f.err != nil {
				return f.err
			}
			for _, e := range holders[b.Sum] {
				if int64(len(f.data)) != e.Size {
					return fmt.Errorf("snapshot %s: %s: stored %d bytes, want %d", id, e.Path, len(f.data), e.Size)
				}
				if err := header(e); err != nil {
					return err
				}
				if _, err := tw.Write(f.data); err != nil {
					return err
				}
			}
		}
		budget.Release(sp.weight)
	}
	// Hard links, once every file they may name is there.
	for i := range es {
		if es[i].Type == tar.TypeLink {
			if err := header(&es[i]); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// plan groups the blobs sums into spans: by pack, in the order each pack is first
// needed, a range per run of needed blobs; loose blobs last, one span each.
func (r *restoring) plan(ctx context.Context, sums []string, holders map[string][]*entry) ([]*span, error) {
	byPack := map[string][]packBlob{}
	var packs []string
	var loose []*span
	for _, sum := range sums {
		e := holders[sum][0]
		l := loc{Pack: e.Pack, Off: e.Off, Len: e.Len, Raw: e.Size}
		if l.Pack == "" {
			found, ok, err := r.lookup(ctx, sum)
			if err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", r.id, err)
			}
			if !ok {
				loose = append(loose, &span{blobs: []packBlob{{Sum: sum, Raw: e.Size}}, stream: e.Size > inMemory})
				continue
			}
			l = found
			l.Raw = e.Size
		}
		if !validPackID(l.Pack) || l.Off < 0 || l.Len <= 0 {
			return nil, fmt.Errorf("snapshot %s: %w: %s: bad place %q+%d", r.id, ErrBadRecord, e.Path, l.Pack, l.Off)
		}
		if _, ok := byPack[l.Pack]; !ok {
			packs = append(packs, l.Pack)
		}
		byPack[l.Pack] = append(byPack[l.Pack], packBlob{Sum: sum, Off: l.Off, Len: l.Len, Raw: l.Raw})
	}
	var spans []*span
	for _, id := range packs {
		blobs := byPack[id]
		slices.SortFunc(blobs, func(a, b packBlob) int { return int(a.Off - b.Off) })
		var cur *span
		var raw int64 // cur's contents, decoded
		for _, b := range blobs {
			// Large either way (stored, or once decoded: zeros compress 5,000 to 1):
			// streamed, never held.
			if b.Len >= ownPack || b.Raw > inMemory {
				spans = append(spans, &span{pack: id, off: b.Off, n: b.Len, blobs: []packBlob{b}, stream: true})
				cur = nil
				continue
			}
			if cur == nil || b.Off-(cur.off+cur.n) > rangeGap || b.Off < cur.off+cur.n || raw+b.Raw > spanRaw {
				cur, raw = &span{pack: id, off: b.Off}, 0
				spans = append(spans, cur)
			}
			cur.n = b.Off + b.Len - cur.off
			cur.blobs = append(cur.blobs, b)
			raw += b.Raw
		}
	}
	spans = append(spans, loose...)
	for _, sp := range spans {
		sp.out = make(chan fetched, len(sp.blobs))
	}
	return spans, nil
}

// fetchAhead fetches the spans in order, readFetches at a time, as far ahead as the
// budget allows.
func (r *restoring) fetchAhead(ctx context.Context, spans []*span, budget *semaphore.Weighted) {
	lim := make(chan struct{}, readFetches)
	for _, sp := range spans {
		if sp.stream {
			continue
		}
		sp.weight = min(sp.raw()+sp.n, readAhead) // what it holds: fetched, then decoded
		if err := budget.Acquire(ctx, sp.weight); err != nil {
			return
		}
		select {
		case lim <- struct{}{}:
		case <-ctx.Done():
			return
		}
		go func() {
			defer func() { <-lim }()
			r.fetchSpan(ctx, sp)
		}()
	}
}

// fetchSpan reads a span, and hands each blob on as soon as it has come and been
// checked. The channel holds every blob, so it never waits for the reader.
func (r *restoring) fetchSpan(ctx context.Context, sp *span) {
	fail := func(err error) { sp.out <- fetched{err: err} }
	if sp.pack == "" {
		data, err := r.fetch(ctx, sp)
		if err != nil {
			fail(err)
			return
		}
		sp.out <- fetched{data: data[0]}
		return
	}
	key := packKey(r.tenant, sp.pack)
	rc, err := r.s.b.GetRange(ctx, key, sp.off, sp.n)
	if errors.Is(err, ErrNotFound) {
		// Rewritten by a collection since the snapshot was taken: the index knows
		// where its blobs went.
		data, err := r.fetchMoved(ctx, sp)
		if err != nil {
			fail(err)
			return
		}
		for _, d := range data {
			sp.out <- fetched{data: d}
		}
		return
	}
	if err != nil {
		fail(fmt.Errorf("snapshot %s: %w", r.id, err))
		return
	}
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 256<<10)
	pos := sp.off
	for _, b := range sp.blobs {
		if _, err := br.Discard(int(b.Off - pos)); err != nil {
			fail(fmt.Errorf("snapshot %s: get %s: %w", r.id, key, noEOF(err)))
			return
		}
		z := make([]byte, b.Len)
		if _, err := io.ReadFull(br, z); err != nil {
			fail(fmt.Errorf("snapshot %s: get %s: %w", r.id, key, noEOF(err)))
			return
		}
		pos = b.Off + b.Len
		data, err := r.decode(b, z)
		if err != nil {
			fail(err)
			return
		}
		sp.out <- fetched{data: data}
	}
}

// noEOF makes a range that ended early an unexpected EOF, not a clean end.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// decode decodes a blob read whole, and checks its sum.
func (r *restoring) decode(b packBlob, z []byte) ([]byte, error) {
	if b.Raw < 0 || b.Raw > inMemory {
		return nil, fmt.Errorf("snapshot %s: contents %s: %w: %d bytes in a range read", r.id, b.Sum, ErrBadRecord, b.Raw)
	}
	data, err := r.s.blobDec.DecodeAll(z, make([]byte, 0, b.Raw))
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: contents %s: %w", r.id, b.Sum, err)
	}
	if err := checkSum(data, b.Sum); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", r.id, err)
	}
	return data, nil
}

// fetch reads a span and gives each of its blobs' contents back, checked.
func (r *restoring) fetch(ctx context.Context, sp *span) ([][]byte, error) {
	zs := make([][]byte, len(sp.blobs))
	if sp.pack != "" {
		buf, err := r.s.getRange(ctx, packKey(r.tenant, sp.pack), sp.off, sp.n)
		if errors.Is(err, ErrNotFound) {
			// Rewritten by a collection since the snapshot was taken: the index knows
			// where its blobs went.
			return r.fetchMoved(ctx, sp)
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", r.id, err)
		}
		for j, b := range sp.blobs {
			zs[j] = buf[b.Off-sp.off : b.Off-sp.off+b.Len]
		}
	} else {
		z, err := r.s.getLoose(ctx, r.tenant, sp.blobs[0].Sum)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", r.id, err)
		}
		zs[0] = z
	}
	out := make([][]byte, len(sp.blobs))
	for j, b := range sp.blobs {
		data, err := r.decode(b, zs[j])
		if err != nil {
			return nil, err
		}
		out[j] = data
	}
	return out, nil
}

// fetchMoved reads a span's blobs from wherever the index says they are now.
func (r *restoring) fetchMoved(ctx context.Context, sp *span) ([][]byte, error) {
	out := make([][]byte, len(sp.blobs))
	for j, b := range sp.blobs {
		one := &span{blobs: []packBlob{b}}
		if l, ok, err := r.lookup(ctx, b.Sum); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", r.id, err)
		} else if ok && l.Pack != sp.pack {
			one.pack, one.off, one.n = l.Pack, l.Off, l.Len
			one.blobs[0].Off, one.blobs[0].Len = l.Off, l.Len
		}
		data, err := r.fetch(ctx, one)
		if err != nil {
			return nil, err
		}
		out[j] = data[0]
	}
	return out, nil
}

// stream writes a large blob to w as it is read, and checks it at the end.
func (r *restoring) stream(ctx context.Context, sp *span, w io.Writer) error {
	b := sp.blobs[0]
	var rc io.ReadCloser
	var err error
	if sp.pack != "" {
		rc, err = r.s.b.GetRange(ctx, packKey(r.tenant, sp.pack), sp.off, sp.n)
		if errors.Is(err, ErrNotFound) {
			l, ok, lerr := r.lookup(ctx, b.Sum)
			switch {
			case lerr != nil:
				err = lerr
			case ok && l.Pack != sp.pack:
				rc, err = r.s.b.GetRange(ctx, packKey(r.tenant, l.Pack), l.Off, l.Len)
			default:
				rc, err = r.s.b.Get(ctx, blobKey(r.tenant, b.Sum))
			}
		}
	} else {
		rc, err = r.s.b.Get(ctx, blobKey(r.tenant, b.Sum))
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: contents %s: %w", r.id, b.Sum, err)
	}
	defer rc.Close()
	zr, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return err
	}
	defer zr.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), zr)
	if err != nil {
		return fmt.Errorf("snapshot %s: contents %s: %w", r.id, b.Sum, err)
	}
	if n != b.Raw {
		return fmt.Errorf("snapshot %s: contents %s: %d bytes, want %d", r.id, b.Sum, n, b.Raw)
	}
	return checkHash(h, b.Sum)
}

// getLoose reads a blob an older cws stored on its own (compressed).
func (s *Store) getLoose(ctx context.Context, tenant, sum string) ([]byte, error) {
	rc, err := s.b.Get(ctx, blobKey(tenant, sum))
	if err != nil {
		return nil, fmt.Errorf("contents %s: %w", sum, err)
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func checkSum(data []byte, sum string) error {
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != sum {
		return fmt.Errorf("contents %s: %w: they hash to %x", sum, ErrBadRecord, got)
	}
	return nil
}

func checkHash(h hash.Hash, sum string) error {
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("contents %s: %w: they hash to %s", sum, ErrBadRecord, got)
	}
	return nil
}
