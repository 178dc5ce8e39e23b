package snapshot

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// Collect removes what no snapshot of the tenant uses: packs none of whose blobs is in
// use are deleted, packs mostly of garbage are rewritten (their live blobs copied into
// new packs) and then deleted, the index is merged into one object, and loose blobs of
// an older cws no snapshot names are deleted. It is fenced against Writes (see
// fence.go): while any Write of the tenant is under way it collects nothing, and a
// Write that starts meanwhile waits for it. A record or an entries list it can't read
// stops it: their blobs might be in use. Packs and blobs written within grace are kept
// as they are. It returns how many blobs it removed and the bytes it freed.
//
// Nothing in use is ever without a copy: a rewrite stores the new packs and the new
// index before it deletes the old index objects, and those before the old packs. A
// Read that planned with an old pack finds its blobs through the new index.
func (s *Store) Collect(ctx context.Context, tenant string, grace time.Duration) (n int, freed int64, err error) {
	ok, refresh, end, err := s.fence(ctx, tenant)
	if err != nil {
		return 0, 0, fmt.Errorf("snapshot store: fence the collection: %w", err)
	}
	defer end()
	if !ok {
		return 0, 0, nil // a Write is under way: next time
	}
	cutoff := time.Now().Add(-grace)
	used, err := s.used(ctx, tenant, refresh)
	if err != nil {
		return 0, 0, err
	}
	c := &collection{s: s, tenant: tenant, used: used, cutoff: cutoff, refresh: refresh}
	if err := c.packs(ctx); err != nil {
		return c.n, c.freed, fmt.Errorf("snapshot store: collection of %s: %w", tenant, err)
	}
	if err := c.loose(ctx); err != nil {
		return c.n, c.freed, fmt.Errorf("snapshot store: collection of %s: %w", tenant, err)
	}
	return c.n, c.freed, nil
}

// used returns the blobs the tenant's snapshots name.
func (s *Store) used(ctx context.Context, tenant string, refresh func() error) (map[string]bool, error) {
	used := map[string]bool{}
	var ids []string
	if err := s.b.List(ctx, tenant+"/meta/", func(o Object) error {
		if id, ok := strings.CutSuffix(path.Base(o.Key), ".json"); ok && ValidID(id) {
			ids = append(ids, id)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if err := refresh(); err != nil {
			return nil, err
		}
		if _, err := s.Get(ctx, tenant, id); errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		} else if err != nil {
			return nil, fmt.Errorf("snapshot store: collection of %s stopped: record %s can't be read: %w", tenant, id, err)
		}
		es, err := s.entries(ctx, tenant, id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("snapshot store: collection of %s stopped: entries of %s can't be read: %w", tenant, id, err)
		}
		for _, e := range es {
			if e.Blob != "" {
				used[e.Blob] = true
			}
		}
	}
	return used, nil
}

// collection is one Collect under way.
type collection struct {
	s       *Store
	tenant  string
	used    map[string]bool
	cutoff  time.Time
	refresh func() error
	home    map[string]string // a used blob's pack
	n       int
	freed   int64
}

// packs collects the tenant's packs and merges its index.
func (c *collection) packs(ctx context.Context) error {
	s, tenant := c.s, c.tenant
	stored := map[string]Object{}
	if err := s.b.List(ctx, tenant+"/packs/", func(o Object) error {
		if validPackID(path.Base(o.Key)) && o.Key == packKey(tenant, path.Base(o.Key)) {
			stored[path.Base(o.Key)] = o
		}
		return nil
	}); err != nil {
		return err
	}
	ti, indexKeys, err := s.refreshIndex(ctx, tenant)
	if err != nil {
		return err
	}
	// The packs the index lists and the store holds, in the index's order; a used
	// blob's home is the first of them that holds it (as the index's lookup).
	ti.mu.Lock()
	var order []packInfo
	seen := map[string]bool{}
	for _, k := range indexKeys {
		for _, pk := range ti.files[k] {
			if _, ok := stored[pk.ID]; ok && !seen[pk.ID] {
				seen[pk.ID] = true
				order = append(order, pk)
			}
		}
	}
	ti.mu.Unlock()
	home := map[string]string{}
	for _, pk := range order {
		for _, b := range pk.Blobs {
			if c.used[b.Sum] && home[b.Sum] == "" {
				home[b.Sum] = pk.ID
			}
		}
	}
	// Packs no index lists: the rest of a Write or a Collect that stopped half-way,
	// or (never seen) an index lost. Blobs in use that only such a pack holds are
	// adopted back into the index; the others are garbage.
	var orphans []string
	for id, o := range stored {
		if !seen[id] && o.Modified.Before(c.cutoff) {
			orphans = append(orphans, id)
		}
	}
	slices.Sort(orphans)
	var keep, drop, rewrite []packInfo
	adopted := false
	for _, id := range orphans {
		blobs, err := s.readPackHeader(ctx, tenant, id, stored[id].Size)
		if err != nil {
			return fmt.Errorf("pack %s is in no index and can't be read: %w", id, err)
		}
		pk := packInfo{ID: id, Size: stored[id].Size, Blobs: blobs}
		adopt := false
		for _, b := range blobs {
			if c.used[b.Sum] && home[b.Sum] == "" {
				home[b.Sum], adopt = id, true
			}
		}
		if adopt {
			keep, adopted = append(keep, pk), true
		} else {
			drop = append(drop, pk)
		}
	}
	for _, pk := range order {
		var live int64
		for _, b := range pk.Blobs {
			if home[b.Sum] == pk.ID {
				live += b.Len
			}
		}
		switch {
		case !stored[pk.ID].Modified.Before(c.cutoff) || live*2 >= pk.Size:
			keep = append(keep, pk)
		case live == 0:
			drop = append(drop, pk)
		default:
			rewrite = append(rewrite, pk)
		}
	}
	c.home = home
	if len(drop) == 0 && len(rewrite) == 0 && !adopted && len(indexKeys) <= 1 {
		return nil
	}
	// The live blobs of the packs to rewrite, into new packs.
	p := s.newPacker(ctx, tenant)
	for _, pk := range rewrite {
		if err := c.refresh(); err != nil {
			return err
		}
		rc, err := s.b.Get(ctx, packKey(tenant, pk.ID))
		if err != nil {
			_, _ = p.flush()
			return fmt.Errorf("read pack %s to rewrite it: %w", pk.ID, err)
		}
		data, err := readAllLimit(rc, pk.Size)
		rc.Close()
		if err != nil {
			_, _ = p.flush()
			return fmt.Errorf("read pack %s to rewrite it: %w", pk.ID, err)
		}
		for _, b := range pk.Blobs {
			if home[b.Sum] != pk.ID {
				continue
			}
			if b.Off < 0 || b.Off+b.Len > int64(len(data)) {
				_, _ = p.flush()
				return fmt.Errorf("pack %s: blob %s past its end", pk.ID, b.Sum)
			}
			if err := p.add(b.Sum, data[b.Off:b.Off+b.Len], b.Raw); err != nil {
				_, _ = p.flush()
				return err
			}
		}
	}
	added, err := p.flush()
	if err != nil {
		return err
	}
	keep = append(keep, added...)
	// The new index, then the old index objects, then the old packs.
	if err := c.refresh(); err != nil {
		return err
	}
	newKey, _, err := s.writeIndex(ctx, tenant, keep)
	if err != nil {
		return err
	}
	if live, err := s.leased(ctx, tenant); err != nil || live {
		return err // never: a Write waits for the collection; but deleting needs proof
	}
	for _, k := range indexKeys {
		if k == newKey {
			continue
		}
		if err := c.delete(ctx, k); err != nil {
			return err
		}
	}
	for _, pk := range append(drop, rewrite...) {
		if err := c.refresh(); err != nil {
			return err
		}
		for _, b := range pk.Blobs {
			if home[b.Sum] != pk.ID {
				c.n++
			}
		}
		if err := c.delete(ctx, packKey(tenant, pk.ID)); err != nil {
			return err
		}
		c.freed += pk.Size
	}
	for _, pk := range added {
		c.freed -= pk.Size
	}
	_, _, err = s.refreshIndex(ctx, tenant)
	return err
}

func (c *collection) delete(ctx context.Context, key string) error {
	if c.s.beforeDelete != nil {
		c.s.beforeDelete(key)
	}
	return c.s.b.Delete(ctx, key)
}

// loose collects the blobs an older cws stored one per object: those no snapshot
// uses, and those a pack holds as well.
func (c *collection) loose(ctx context.Context) error {
	var old []Object
	if err := c.s.b.List(ctx, c.tenant+"/blobs/", func(o Object) error {
		sum := path.Base(o.Key)
		if o.Modified.Before(c.cutoff) && (!c.used[sum] || c.home[sum] != "") {
			old = append(old, o)
		}
		return nil
	}); err != nil {
		return err
	}
	if len(old) == 0 {
		return nil
	}
	// A Write that found the mark stale (it never should: the mark is refreshed) holds
	// a lease by now: look again before deleting anything.
	if live, err := c.s.leased(ctx, c.tenant); err != nil || live {
		return err
	}
	for _, o := range old {
		if err := c.refresh(); err != nil {
			return err
		}
		if err := c.delete(ctx, o.Key); err != nil {
			return err
		}
		c.n++
		c.freed += o.Size
	}
	return nil
}
