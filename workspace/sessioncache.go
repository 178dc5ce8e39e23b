package workspace

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// SessionWatcher is what a Store shared by replicas implements so that each replica
// may cache session records (redisstore does). WatchSessions blocks until ctx ends,
// calling changed for every session any replica wrote (updated, touched, deleted), and
// live(false) whenever it may have missed some (the subscription was lost or is in
// doubt), live(true) once it is sure again.
//
// A Store that does not implement it is taken to serve one replica alone (memstore):
// the Service's own writes are then all there is to see.
type SessionWatcher interface {
	WatchSessions(ctx context.Context, changed func(tenant, id string), live func(bool))
}

// DefaultSessionCacheSize is how many session records a Service caches when
// Config.SessionCacheSize is zero.
const DefaultSessionCacheSize = 10_000

// sessionCache holds ready session records as the store has them, so that a tool call
// does not read the store. It stays exact:
//   - expiry is decided on every hit from the record's own deadline (the store's
//     view: the idle deadline of its last written renewal, the hard lifetime);
//   - every write of a record through this Service forgets it (invalidatingStore), and
//     every write by any replica is announced by the store (SessionWatcher) and forgets
//     it here too;
//   - while the announcements may have been missed (the subscription is down or being
//     re-established) nothing is served from the cache, and it is emptied;
//   - a record read from the store is kept only if no change was announced while it was
//     being read (gen).
//
// A call that fails on its sandbox with a record from the cache reads the store again
// (Service.recheck), so a session deleted a moment ago answers ErrNotFound even before
// its announcement arrives.
type sessionCache struct {
	lru  *lru.Cache[string, *Session]
	live atomic.Bool
	mu   sync.Mutex // orders gen with lru writes
	gen  uint64     // counts forgets; a read that raced one is not kept
}

// newSessionCache returns a cache of size records (zero means
// DefaultSessionCacheSize), or nil when size is negative (no caching).
func newSessionCache(size int, live bool) *sessionCache {
	if size < 0 {
		return nil
	}
	if size == 0 {
		size = DefaultSessionCacheSize
	}
	l, err := lru.New[string, *Session](size)
	if err != nil {
		panic(err) // unreachable: size > 0
	}
	c := &sessionCache{lru: l}
	c.live.Store(live)
	return c
}

func cacheKey(tenant, id string) string { return tenant + "/" + id }

// get returns a copy of tenant's session id if it is cached and the cache is live.
func (c *sessionCache) get(tenant, id string) (*Session, bool) {
	if c == nil || !c.live.Load() {
		return nil, false
	}
	s, ok := c.lru.Get(cacheKey(tenant, id))
	if !ok {
		return nil, false
	}
	cp := *s
	return &cp, true
}

// generation is taken before a store read whose result may be kept (put).
func (c *sessionCache) generation() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put keeps a ready record read from the store, unless anything was forgotten since
// gen was taken.
func (c *sessionCache) put(gen uint64, s *Session) {
	if c == nil || s.State != StateReady || !c.live.Load() {
		return
	}
	cp := *s
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		c.lru.Add(cacheKey(s.Tenant, s.ID), &cp)
	}
}

// forget drops tenant's session id.
func (c *sessionCache) forget(tenant, id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.lru.Remove(cacheKey(tenant, id))
}

// setLive turns serving from the cache on or off; off empties it.
func (c *sessionCache) setLive(live bool) {
	if c == nil {
		return
	}
	if !live {
		c.mu.Lock()
		c.live.Store(false)
		c.gen++
		c.lru.Purge()
		c.mu.Unlock()
		return
	}
	c.live.Store(true)
}

// invalidatingStore is the Service's Store: every session write through it forgets
// the record from the cache before it returns.
type invalidatingStore struct {
	Store
	cache   *sessionCache
	deleted func(tenant, id string) // told of each deleted session (its usage goes)
}

func (s invalidatingStore) CreateSession(ctx context.Context, sess *Session, max int) error {
	defer s.cache.forget(sess.Tenant, sess.ID)
	return s.Store.CreateSession(ctx, sess, max)
}

func (s invalidatingStore) UpdateSession(ctx context.Context, sess *Session) error {
	defer s.cache.forget(sess.Tenant, sess.ID)
	return s.Store.UpdateSession(ctx, sess)
}

func (s invalidatingStore) TouchSession(ctx context.Context, tenant, id string, at time.Time) error {
	defer s.cache.forget(tenant, id)
	return s.Store.TouchSession(ctx, tenant, id, at)
}

func (s invalidatingStore) DeleteSession(ctx context.Context, tenant, id string) error {
	defer s.cache.forget(tenant, id)
	if s.deleted != nil {
		defer s.deleted(tenant, id)
	}
	return s.Store.DeleteSession(ctx, tenant, id)
}

// watcherOf returns the SessionWatcher of st, looking through a BoundedStore.
func watcherOf(st Store) (SessionWatcher, bool) {
	if b, ok := st.(*BoundedStore); ok {
		st = b.inner
	}
	w, ok := st.(SessionWatcher)
	return w, ok
}
