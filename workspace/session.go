package workspace

import "time"

// Session states.
const (
	StateCreating = "creating" // recorded before the sandbox exists, so a crash leaves a trace
	StateReady    = "ready"
	StateFailed   = "failed"
	StateLost     = "lost" // its container was removed behind cws's back; calls answer ErrSessionLost
	// StateSuspended: no sandbox runs; its volume (or PVC) keeps the files. The next
	// call wakes it.
	StateSuspended = "suspended"
	// StateArchived: no sandbox and no volume; the snapshot store keeps the files (the
	// archive snapshot Session.Archive). The next call wakes it into a new sandbox.
	StateArchived = "archived"
)

// Session is one agent's workspace: a sandbox owned by a tenant.
type Session struct {
	ID        string            `json:"id"`
	Tenant    string            `json:"tenant"`
	Subject   string            `json:"sub"`              // the JWT sub that created it
	Image     string            `json:"image"`            // the workspace image
	Sandbox   string            `json:"sandbox"`          // the driver's id (container id)
	State     string            `json:"state"`            // creating, ready, failed
	Labels    map[string]string `json:"labels,omitempty"` // the caller's labels
	Env       map[string]string `json:"env,omitempty"`    // the caller's env (snapshots and wakes carry it)
	CreatedAt time.Time         `json:"createdAt"`
	LastUsed  time.Time         `json:"lastUsed"`
	IdleTTL   time.Duration     `json:"idleTTL"`   // renewed by use; zero means no idle expiry
	ExpiresAt time.Time         `json:"expiresAt"` // hard end of life; zero means none

	SuspendedAt time.Time `json:"suspendedAt,omitzero"` // when it left ready, suspended or archived
	Archive     string    `json:"archive,omitempty"`    // its archive snapshot, when archived

	// WakeError is why the last wake from its archive failed (the session stays
	// archived, its archive untouched, and the next call tries again); cleared by a wake.
	WakeError   string    `json:"wakeError,omitempty"`
	WakeErrorAt time.Time `json:"wakeErrorAt,omitzero"`
	// Notes say what a restore into this session had to change (names an older cws
	// stored without their bytes, renamed where they clashed).
	Notes []string `json:"notes,omitempty"`

	// Secrets are the tenant's secrets the session asked for at create: the workspace
	// sees only each one's placeholder, in its variable (secrets.go).
	Secrets []SessionSecret `json:"secrets,omitempty"`
}

// SessionSecret is one secret a session uses: the variable that holds its
// placeholder, the secret's name, and the placeholder (not secret: useless anywhere
// but in this session's requests through the proxy).
type SessionSecret struct {
	Env         string `json:"env"`
	Name        string `json:"name"`
	Placeholder string `json:"placeholder"`
}

// Asleep reports whether the session's sandbox is down (suspended or archived): a
// call must wake it first.
func (s *Session) Asleep() bool { return s.State == StateSuspended || s.State == StateArchived }

// IdleUntil is when the session expires unless it is used again.
func (s *Session) IdleUntil() time.Time {
	if s.IdleTTL <= 0 {
		return time.Time{}
	}
	return s.LastUsed.Add(s.IdleTTL)
}

// Deadline is the earlier of the idle and the hard expiry; zero means never.
func (s *Session) Deadline() time.Time {
	idle := s.IdleUntil()
	switch {
	case idle.IsZero():
		return s.ExpiresAt
	case s.ExpiresAt.IsZero() || idle.Before(s.ExpiresAt):
		return idle
	}
	return s.ExpiresAt
}

// Expired reports whether the session is past its deadline at now.
func (s *Session) Expired(now time.Time) bool {
	d := s.Deadline()
	return !d.IsZero() && !now.Before(d)
}

// AuditRecord is one tool call, as kept in the audit stream.
type AuditRecord struct {
	Time     time.Time `json:"time"`
	Tenant   string    `json:"tenant"`
	Subject  string    `json:"sub"`
	Session  string    `json:"session"`
	Tool     string    `json:"tool"`
	Decision string    `json:"decision"` // allow, deny
	Outcome  string    `json:"outcome"`  // ok, error, denied, invalid, ...
	Duration float64   `json:"durationSeconds"`
	Rule     string    `json:"rule,omitempty"` // the policy rule that denied it
	Args     string    `json:"args,omitempty"` // a tool call's arguments, compact JSON cut short
	// Network edges (Tool "egress" or "preview"): the remote end or the port, and the
	// bytes each way (out: from the workspace).
	Target   string `json:"target,omitempty"`
	BytesOut int64  `json:"bytesOut,omitempty"`
	BytesIn  int64  `json:"bytesIn,omitempty"`
	// Secrets names the secrets the proxy put into the exchange, comma-separated,
	// never a value.
	Secrets string `json:"secrets,omitempty"`
}
