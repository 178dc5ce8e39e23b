package workspace

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DefaultStoreTimeout bounds each store operation when BoundedStore is given none.
const DefaultStoreTimeout = time.Second

// BoundedStore bounds every operation of a Store with a short deadline, so that a
// slow or frozen store (a Redis under SIGSTOP, a failover in progress) fails calls
// fast and retryably (ErrUnavailable) instead of hanging them. It reports the store's
// health after each operation. It is safe for concurrent use.
type BoundedStore struct {
	inner   Store
	timeout time.Duration
	health  func(up bool, failure string)
}

var _ Store = (*BoundedStore)(nil)

// Failure kinds passed to the health func.
const (
	StoreTimeout = "timeout" // the operation did not finish within the deadline
	StoreError   = "error"   // the store answered with an error or was unreachable
)

// BoundStore wraps s. timeout is each operation's deadline (zero means
// DefaultStoreTimeout). health, if not nil, is called after every operation: up is
// false when the store failed (failure says how), true when it answered.
func BoundStore(s Store, timeout time.Duration, health func(up bool, failure string)) *BoundedStore {
	if timeout <= 0 {
		timeout = DefaultStoreTimeout
	}
	if health == nil {
		health = func(bool, string) {}
	}
	return &BoundedStore{inner: s, timeout: timeout, health: health}
}

// bound runs op under the deadline and classifies its error: the deadline is
// ErrUnavailable (retryable); the caller's own cancellation stays as it is.
func bound[T any](b *BoundedStore, ctx context.Context, name string, op func(context.Context) (T, error)) (T, error) {
	octx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	v, err := op(octx)
	switch {
	case err == nil, ctx.Err() != nil:
		b.health(true, "")
	case errors.Is(err, context.DeadlineExceeded) || octx.Err() != nil:
		b.health(false, StoreTimeout)
		return v, fmt.Errorf("%w: session store %s did not answer within %s", ErrUnavailable, name, b.timeout)
	case errors.Is(err, ErrUnavailable):
		b.health(false, StoreError)
	default: // not found, conflict, quota: the store answered
		b.health(true, "")
	}
	return v, err
}

func bound0(b *BoundedStore, ctx context.Context, name string, op func(context.Context) error) error {
	_, err := bound(b, ctx, name, func(ctx context.Context) (struct{}, error) { return struct{}{}, op(ctx) })
	return err
}

// CreateSession is Store.CreateSession, bounded.
func (b *BoundedStore) CreateSession(ctx context.Context, s *Session, max int) error {
	return bound0(b, ctx, "create session", func(ctx context.Context) error { return b.inner.CreateSession(ctx, s, max) })
}

// GetSession is Store.GetSession, bounded.
func (b *BoundedStore) GetSession(ctx context.Context, tenant, id string) (*Session, error) {
	return bound(b, ctx, "get session", func(ctx context.Context) (*Session, error) { return b.inner.GetSession(ctx, tenant, id) })
}

// UpdateSession is Store.UpdateSession, bounded.
func (b *BoundedStore) UpdateSession(ctx context.Context, s *Session) error {
	return bound0(b, ctx, "update session", func(ctx context.Context) error { return b.inner.UpdateSession(ctx, s) })
}

// TouchSession is Store.TouchSession, bounded.
func (b *BoundedStore) TouchSession(ctx context.Context, tenant, id string, at time.Time) error {
	return bound0(b, ctx, "touch session", func(ctx context.Context) error { return b.inner.TouchSession(ctx, tenant, id, at) })
}

// DeleteSession is Store.DeleteSession, bounded.
func (b *BoundedStore) DeleteSession(ctx context.Context, tenant, id string) error {
	return bound0(b, ctx, "delete session", func(ctx context.Context) error { return b.inner.DeleteSession(ctx, tenant, id) })
}

// ListSessions is Store.ListSessions, bounded.
func (b *BoundedStore) ListSessions(ctx context.Context, tenant string) ([]*Session, error) {
	return bound(b, ctx, "list sessions", func(ctx context.Context) ([]*Session, error) { return b.inner.ListSessions(ctx, tenant) })
}

// AllSessions is Store.AllSessions, bounded.
func (b *BoundedStore) AllSessions(ctx context.Context) ([]*Session, error) {
	return bound(b, ctx, "list all sessions", b.inner.AllSessions)
}

// Claim is Store.Claim, bounded.
func (b *BoundedStore) Claim(ctx context.Context, key, value string, ttl time.Duration) (string, bool, error) {
	type claim struct {
		cur string
		ok  bool
	}
	c, err := bound(b, ctx, "claim", func(ctx context.Context) (claim, error) {
		cur, ok, err := b.inner.Claim(ctx, key, value, ttl)
		return claim{cur, ok}, err
	})
	return c.cur, c.ok, err
}

// Release is Store.Release, bounded.
func (b *BoundedStore) Release(ctx context.Context, key, value string) error {
	return bound0(b, ctx, "release", func(ctx context.Context) error { return b.inner.Release(ctx, key, value) })
}

// Allow is Store.Allow, bounded.
func (b *BoundedStore) Allow(ctx context.Context, key string, limit int, window time.Duration) (bool, error) {
	return bound(b, ctx, "rate limit", func(ctx context.Context) (bool, error) { return b.inner.Allow(ctx, key, limit, window) })
}

// Audit is Store.Audit, bounded.
func (b *BoundedStore) Audit(ctx context.Context, r AuditRecord) error {
	return bound0(b, ctx, "audit", func(ctx context.Context) error { return b.inner.Audit(ctx, r) })
}

// AuditBatch is AuditBatcher.AuditBatch of the wrapped store, bounded; a store without
// it gets the records one by one.
func (b *BoundedStore) AuditBatch(ctx context.Context, records []AuditRecord) error {
	return bound0(b, ctx, "audit", func(ctx context.Context) error {
		if ab, ok := b.inner.(AuditBatcher); ok {
			return ab.AuditBatch(ctx, records)
		}
		for _, r := range records {
			if err := b.inner.Audit(ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
}

// RecentAudit is Store.RecentAudit, bounded.
func (b *BoundedStore) RecentAudit(ctx context.Context, n int) ([]AuditRecord, error) {
	return bound(b, ctx, "recent audit", func(ctx context.Context) ([]AuditRecord, error) { return b.inner.RecentAudit(ctx, n) })
}

// Ping is Store.Ping, bounded.
func (b *BoundedStore) Ping(ctx context.Context) error {
	return bound0(b, ctx, "ping", b.inner.Ping)
}

// Close closes the wrapped store.
func (b *BoundedStore) Close() error { return b.inner.Close() }

// GetState is Store.GetState, bounded.
func (b *BoundedStore) GetState(ctx context.Context, tenant, id, key string) ([]byte, error) {
	return bound(b, ctx, "get state", func(ctx context.Context) ([]byte, error) { return b.inner.GetState(ctx, tenant, id, key) })
}

// PutState is Store.PutState, bounded.
func (b *BoundedStore) PutState(ctx context.Context, tenant, id, key string, value []byte) error {
	return bound0(b, ctx, "put state", func(ctx context.Context) error { return b.inner.PutState(ctx, tenant, id, key, value) })
}

// PutSecret is Store.PutSecret, bounded.
func (b *BoundedStore) PutSecret(ctx context.Context, tenant string, sec *SecretRecord) error {
	return bound0(b, ctx, "put secret", func(ctx context.Context) error { return b.inner.PutSecret(ctx, tenant, sec) })
}

// GetSecret is Store.GetSecret, bounded.
func (b *BoundedStore) GetSecret(ctx context.Context, tenant, name string) (*SecretRecord, error) {
	return bound(b, ctx, "get secret", func(ctx context.Context) (*SecretRecord, error) { return b.inner.GetSecret(ctx, tenant, name) })
}

// ListSecrets is Store.ListSecrets, bounded.
func (b *BoundedStore) ListSecrets(ctx context.Context, tenant string) ([]*SecretRecord, error) {
	return bound(b, ctx, "list secrets", func(ctx context.Context) ([]*SecretRecord, error) { return b.inner.ListSecrets(ctx, tenant) })
}

// DeleteSecret is Store.DeleteSecret, bounded.
func (b *BoundedStore) DeleteSecret(ctx context.Context, tenant, name string) error {
	return bound0(b, ctx, "delete secret", func(ctx context.Context) error { return b.inner.DeleteSecret(ctx, tenant, name) })
}
