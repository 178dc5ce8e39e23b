package workspace

import (
	"context"
	"time"
)

// Store keeps sessions and the small shared state every replica must agree on. It is
// implemented by redisstore (production, shared by replicas) and memstore (single node);
// storetest.Run holds both to the same contract.
type Store interface {
	// CreateSession records a new session. It fails with ErrQuota when the tenant already
	// has max sessions (checked and recorded atomically; max 0 means no limit), and with
	// ErrConflict when the id exists.
	CreateSession(ctx context.Context, s *Session, max int) error
	// GetSession returns a tenant's session. A session of another tenant is ErrNotFound,
	// exactly like a missing one.
	GetSession(ctx context.Context, tenant, id string) (*Session, error)
	// UpdateSession overwrites a session that exists (ErrNotFound otherwise).
	UpdateSession(ctx context.Context, s *Session) error
	// TouchSession sets LastUsed (renewing the idle TTL); ErrNotFound if missing.
	TouchSession(ctx context.Context, tenant, id string, at time.Time) error
	// DeleteSession removes a session and frees its quota slot; ErrNotFound if missing.
	DeleteSession(ctx context.Context, tenant, id string) error
	// ListSessions lists a tenant's sessions, oldest first.
	ListSessions(ctx context.Context, tenant string) ([]*Session, error)
	// AllSessions lists every tenant's sessions (reconcile and reaper).
	AllSessions(ctx context.Context) ([]*Session, error)

	// GetState returns the value a session's state holds under key (editor state,
	// breakpoints), nil when unset. A missing session is ErrNotFound.
	GetState(ctx context.Context, tenant, id, key string) ([]byte, error)
	// PutState sets a session's state value under key; nil deletes it. A missing session
	// is ErrNotFound. DeleteSession deletes the session's state with it.
	PutState(ctx context.Context, tenant, id, key string, value []byte) error

	// Claim sets key to value unless it is set to another value; it returns the value in
	// force and whether this call set it. A Claim of the value already in force renews
	// it (its TTL starts again) and reports it claimed: a holder keeps a long claim
	// alive, and learns when it lost it. Idempotency keys, default sessions and wakes
	// use it. ttl 0 means no expiry.
	Claim(ctx context.Context, key, value string, ttl time.Duration) (current string, claimed bool, err error)
	// Release deletes key if it still holds value.
	Release(ctx context.Context, key, value string) error

	// Allow counts one event against key in a fixed window and reports whether it is
	// within limit (shared across replicas with Redis).
	Allow(ctx context.Context, key string, limit int, window time.Duration) (bool, error)

	// Audit appends a record to a capped log; RecentAudit returns the newest n, newest first.
	Audit(ctx context.Context, r AuditRecord) error
	RecentAudit(ctx context.Context, n int) ([]AuditRecord, error)

	// PutSecret records a tenant's secret, replacing one of the same name.
	PutSecret(ctx context.Context, tenant string, sec *SecretRecord) error
	// GetSecret returns a tenant's secret; another tenant's, or a missing one, is
	// ErrNotFound.
	GetSecret(ctx context.Context, tenant, name string) (*SecretRecord, error)
	// ListSecrets lists a tenant's secrets by name.
	ListSecrets(ctx context.Context, tenant string) ([]*SecretRecord, error)
	// DeleteSecret removes a tenant's secret; ErrNotFound if missing.
	DeleteSecret(ctx context.Context, tenant, name string) error

	// Ping checks the store is reachable (readiness).
	Ping(ctx context.Context) error
	Close() error
}

// SecretRecord is a tenant's secret as stored: its value only sealed (package secrets,
// bound to the tenant and the name).
type SecretRecord struct {
	Name      string    `json:"name"`
	Hosts     []string  `json:"hosts"`
	Sealed    []byte    `json:"sealed"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// AuditBatcher is what a Store may implement to append many audit records in one round
// trip (redisstore does); the Service's audit writer then sends what has queued up
// together.
type AuditBatcher interface {
	AuditBatch(ctx context.Context, records []AuditRecord) error
}
