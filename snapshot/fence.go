package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"
)

// The fence between writers and the collection. A blob a snapshot reuses (it is in the
// store already, so the snapshot only touches it) must not be collected while that
// snapshot's record is not yet written. Writers and collectors announce themselves in
// the store, each writing its own mark before it looks for the other's:
//
//	writer:    put <tenant>/leases/<id>;     then look for <tenant>/collecting
//	collector: put <tenant>/collecting;      then list <tenant>/leases/
//
// Whichever writes second sees the other (the store is read-after-write consistent:
// a file system, S3). A writer that sees a collection waits for it to end before it
// reuses anything; a collector that sees a lease collects nothing this time. Neither
// depends on clocks or on listing order. Only a mark its owner could not remove (the
// process died) is judged by age: a lease older than staleLease no longer stops a
// collection, and a collection mark not refreshed for staleCollect no longer holds a
// writer back.

const (
	staleLease   = 24 * time.Hour
	staleCollect = 5 * time.Minute
	// collectRefresh is how often a long collection rewrites its mark.
	collectRefresh = time.Minute
)

func leaseKey(tenant, id string) string { return tenant + "/leases/" + id }
func collectKey(tenant string) string   { return tenant + "/collecting" }

// ErrCollecting is a Write that could not start because a collection of the tenant's
// store ran for longer than its context allowed.
var ErrCollecting = errors.New("the snapshot store is being collected")

// lease announces a Write of snapshot id and waits for a collection under way to end.
// The returned func removes the lease.
func (s *Store) lease(ctx context.Context, tenant, id string) (func(), error) {
	stamp := []byte(strconv.FormatInt(time.Now().UnixNano(), 10))
	if err := s.b.Put(ctx, leaseKey(tenant, id), bytes.NewReader(stamp), int64(len(stamp))); err != nil {
		return nil, err
	}
	release := func() { _ = s.b.Delete(context.WithoutCancel(ctx), leaseKey(tenant, id)) }
	for {
		at, err := s.collecting(ctx, tenant)
		if err != nil {
			release()
			return nil, err
		}
		if at.IsZero() || time.Since(at) > staleCollect {
			return release, nil
		}
		select {
		case <-ctx.Done():
			release()
			return nil, fmt.Errorf("%w: %v", ErrCollecting, ctx.Err())
		case <-time.After(s.fencePoll):
		}
	}
}

// collecting returns when the collection under way of tenant's store last wrote its
// mark (zero: none is).
func (s *Store) collecting(ctx context.Context, tenant string) (time.Time, error) {
	rc, err := s.b.Get(ctx, collectKey(tenant))
	if errors.Is(err, ErrNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	defer rc.Close()
	raw, err := io.ReadAll(io.LimitReader(rc, 64))
	if errors.Is(err, ErrNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return time.Now(), nil // not ours to judge: a mark being written
	}
	return time.Unix(0, ns), nil
}

// fence announces a collection of tenant's store and reports whether it may go ahead
// (no Write holds a lease). The returned func ends it.
func (s *Store) fence(ctx context.Context, tenant string) (ok bool, refresh func() error, end func(), err error) {
	put := func() error {
		stamp := []byte(strconv.FormatInt(time.Now().UnixNano(), 10))
		return s.b.Put(ctx, collectKey(tenant), bytes.NewReader(stamp), int64(len(stamp)))
	}
	if err := put(); err != nil {
		return false, nil, nil, err
	}
	end = func() { _ = s.b.Delete(context.WithoutCancel(ctx), collectKey(tenant)) }
	live := 0
	err = s.b.List(ctx, tenant+"/leases/", func(o Object) error {
		if time.Since(o.Modified) > staleLease {
			_ = s.b.Delete(ctx, o.Key) // its writer died long ago
			return nil
		}
		if ValidID(path.Base(o.Key)) && strings.HasPrefix(o.Key, tenant+"/leases/") {
			live++
		}
		return nil
	})
	if err != nil {
		end()
		return false, nil, nil, err
	}
	if live > 0 {
		end()
		return false, nil, func() {}, nil
	}
	last := time.Now()
	refresh = func() error {
		since := time.Since(last)
		if since < collectRefresh {
			return nil
		}
		if since > staleCollect/2 {
			// Writers may have judged the mark stale: what this collection found unused
			// may be in use now.
			return fmt.Errorf("the collection's mark went %s without a refresh: stopped", since.Round(time.Second))
		}
		if err := put(); err != nil {
			return err
		}
		last = time.Now()
		return nil
	}
	return true, refresh, end, nil
}

// leased reports whether a Write of tenant's store holds a live lease.
func (s *Store) leased(ctx context.Context, tenant string) (bool, error) {
	live := false
	err := s.b.List(ctx, tenant+"/leases/", func(o Object) error {
		if time.Since(o.Modified) <= staleLease && ValidID(path.Base(o.Key)) {
			live = true
		}
		return nil
	})
	return live, err
}
