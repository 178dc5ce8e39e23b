package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/workspace"
)

// Defaults for Options.
const (
	DefaultPrefix      = "cws:"
	DefaultAuditMaxLen = 100_000
)

// Options configures a Store. The zero value is usable.
type Options struct {
	// Prefix starts every key; "" means DefaultPrefix. Tests use their own.
	Prefix string
	// AuditMaxLen caps the audit stream (approximately, XADD MAXLEN ~); 0 means
	// DefaultAuditMaxLen.
	AuditMaxLen int64
	// Now is the clock for rate-limit windows; nil means time.Now. Claim TTLs run on
	// Redis's clock.
	Now func() time.Time
}

// Store is a workspace.Store on Redis. It is safe for concurrent use.
type Store struct {
	rdb      redis.UniversalClient
	prefix   string
	auditMax int64
	now      func() time.Time
}

var _ workspace.Store = (*Store)(nil)

// New returns a Store on client. The Store owns client from then on: Close closes it.
func New(client redis.UniversalClient, opts Options) *Store {
	s := &Store{rdb: client, prefix: opts.Prefix, auditMax: opts.AuditMaxLen, now: opts.Now}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.auditMax <= 0 {
		s.auditMax = DefaultAuditMaxLen
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Open connects to the Redis at url (redis://, rediss:// or unix://, as parsed by
// redis.ParseURL), checks that it answers, and returns a Store with default Options.
// Socket reads and writes honour each operation's context deadline.
func Open(ctx context.Context, url string) (*Store, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	// Honour each operation's context deadline on the socket, so that a frozen Redis
	// fails an operation at its deadline (workspace.BoundedStore) rather than after
	// go-redis's own read timeout.
	opt.ContextTimeoutEnabled = true
	s := New(redis.NewClient(opt), Options{})
	if err := s.Ping(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	return s.fail("ping", s.rdb.Ping(ctx).Err())
}

// Close closes the client.
func (s *Store) Close() error { return s.rdb.Close() }

// fail classifies a Redis error: nil stays nil, the caller's cancellation or deadline
// is only wrapped with op, anything else wraps workspace.ErrUnavailable.
func (s *Store) fail(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("redis %s: %w", op, err)
	}
	return fmt.Errorf("%w: redis %s: %w", workspace.ErrUnavailable, op, err)
}

func (s *Store) sessionKey(tenant, id string) string {
	return s.prefix + "session:" + tenant + ":" + id
}
func (s *Store) tenantKey(tenant string) string { return s.prefix + "tenant:" + tenant + ":sessions" }
func (s *Store) allKey() string                 { return s.prefix + "sessions" }
func (s *Store) claimKey(key string) string     { return s.prefix + "claim:" + key }
func (s *Store) auditKey() string               { return s.prefix + "audit" }
func (s *Store) rateKey(key string, start int64) string {
	return fmt.Sprintf("%srate:%s:%d", s.prefix, key, start)
}
