// Package memstore keeps cws's session state in process memory: the single-node
// workspace.Store, used when cws runs without Redis. State is lost on restart (the
// sandboxes' labels let cws rebuild it) and is not shared between replicas.
package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/cwsdev/cws/workspace"
)

// DefaultAuditSize is how many audit records the ring keeps by default.
const DefaultAuditSize = 10_000

// Option configures a Store.
type Option func(*Store)

// WithClock sets the clock used for claim expiry and rate-limit windows (tests).
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// WithAuditSize sets how many audit records are kept; n <= 0 keeps the default.
func WithAuditSize(n int) Option {
	return func(s *Store) {
		if n > 0 {
			s.audit = make([]workspace.AuditRecord, n)
		}
	}
}

// Store is an in-memory workspace.Store. One mutex guards everything: every operation
// is a few map accesses, so contention is not worth a finer scheme. It is safe for
// concurrent use.
type Store struct {
	now func() time.Time

	mu       sync.Mutex
	sessions map[string]map[string]*workspace.Session // tenant → id → session
	claims   map[string]claim
	state    map[stateKey]map[string][]byte                // a session's state: key → value
	secrets  map[string]map[string]*workspace.SecretRecord // tenant → name → secret
	windows  map[string]window
	audit    []workspace.AuditRecord // ring
	next     int                     // the ring slot written next
	full     bool                    // the ring has wrapped
	sweepAt  int                     // sweep expired claims/windows when a map grows past it
}

var _ workspace.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		now:      time.Now,
		sessions: make(map[string]map[string]*workspace.Session),
		claims:   make(map[string]claim),
		state:    make(map[stateKey]map[string][]byte),
		secrets:  make(map[string]map[string]*workspace.SecretRecord),
		windows:  make(map[string]window),
		audit:    make([]workspace.AuditRecord, DefaultAuditSize),
		sweepAt:  minSweep,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ping always succeeds: memory is always there.
func (s *Store) Ping(context.Context) error { return nil }

// Close does nothing; the Store stays usable.
func (s *Store) Close() error { return nil }

// minSweep is the map size below which expired claims and windows are left alone.
const minSweep = 1024

// maybeSweep drops expired claims and rate windows once the maps have grown past
// sweepAt, then doubles the threshold, so the cost is amortised over many inserts.
// The caller holds s.mu.
func (s *Store) maybeSweep(now time.Time) {
	if len(s.claims)+len(s.windows) < s.sweepAt {
		return
	}
	for k, c := range s.claims {
		if c.expired(now) {
			delete(s.claims, k)
		}
	}
	for k, w := range s.windows {
		if !now.Before(w.end) {
			delete(s.windows, k)
		}
	}
	s.sweepAt = max(minSweep, 2*(len(s.claims)+len(s.windows)))
}
