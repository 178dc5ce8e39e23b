// Package workspace is cws's domain: sessions, the tool catalogue, and the policy every
// tool call is checked against. Handlers (api, api/mcp) stay thin and call Service;
// ownership, policy, quota and deadlines are decided here.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/secrets"
	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/tool"
)

// Sandboxes is the sandbox driver as the Service uses it (sandbox/docker implements it).
// Attach fails with sandbox.ErrStopped for a stopped sandbox and sandbox.ErrNotFound
// for a removed one; Start starts a stopped sandbox again (a no-op when it runs).
type Sandboxes interface {
	Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error)
	Attach(ctx context.Context, id string) (io.ReadWriteCloser, error)
	Start(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error)
}

// Observer receives what the Service measures (metrics.Metrics implements it).
type Observer interface {
	ToolCall(tool, outcome string, d time.Duration)
	PolicyDenial(rule string)
	SessionCreated(d time.Duration)
	SessionsActive(n int)
	Reaped(reason string)
	// ExecUnenforced counts a command started with an exec policy that the sandbox
	// could not enforce (no Landlock).
	ExecUnenforced()
}

// FaultObserver is what an Observer may also implement to receive what the Service
// does about faults (metrics.Metrics does).
type FaultObserver interface {
	// Restarted counts stopped sandboxes started again, by who noticed ("call", "reconcile").
	Restarted(by string)
	// Adopted counts sessions taken back into the store from their containers' labels.
	Adopted()
	// Healed counts sandboxes whose agent stopped answering, by how they were brought
	// back: "agent" (its agent restarted), "container" (its container restarted), or
	// "failed" (neither worked).
	Healed(how string)
}

// Tenants gives a tenant's policy: the ceiling every session of it is held to.
type Tenants interface {
	Policy(tenant string) (*policy.Policy, bool)
}

// Config configures a Service.
type Config struct {
	Store     Store
	Sandboxes Sandboxes
	Tenants   Tenants
	Observer  Observer // nil: nothing is measured
	Log       *slog.Logger

	// Tools are the catalogue: every toolset's tools, in listing order (cmd/cws wires
	// core.Tools(), lsp.Tools(), …; the service never imports a toolset).
	Tools []*tool.Tool
	// UsageEvery is how often every ready session's usage is sampled (usage.go); zero:
	// never (cws serve sets DefaultUsageEvery).
	UsageEvery time.Duration
	// AdminTenant names the tenant whose tokens carrying scope admin have the
	// operator's view across tenants (/v1/admin); empty: nobody has it.
	AdminTenant string
	// Egress is the workspaces' egress proxy (package egress); nil: every connection a
	// workspace makes to its proxy is refused.
	Egress *egress.Proxy
	// SecretsKey seals the tenants' secrets (secrets.go); nil: the secrets API answers
	// ErrNotConfigured and no session may ask for a secret. Their injection also needs
	// Egress.CA (LoadSecretsCA).
	SecretsKey *secrets.Key
	// MaxPortConns is the most exchanges with a session's ports (proxied requests,
	// WebSockets, port forwards) under way at once on this replica; past it HoldPort
	// is ErrQuota. Each holds up to the agent connection's stream window in cws while
	// its client reads slowly, so a link holder can't pin unbounded memory. Zero:
	// DefaultMaxPortConns.
	MaxPortConns int
	// Diff computes the REST diff of a session (core.Diff); nil: the diff endpoint
	// answers that it is not available.
	Diff func(ctx context.Context, env tool.Env) (string, error)

	DefaultImage   string        // image when neither the request nor the tenant names one
	DefaultIdleTTL time.Duration // idle TTL when the tenant sets none; zero means 30 min
	DefaultMaxLife time.Duration // hard lifetime when the tenant sets none; zero means 24 h
	DefaultLimits  sandbox.Limits
	ReadyTimeout   time.Duration // how long a new sandbox may take to answer; zero means 60 s
	PolicyTTL      time.Duration // how long a workspace .cws-policy.json is cached; zero means 1 s
	Now            func() time.Time

	// SessionCacheSize is how many session records each replica caches for tool calls
	// (see sessionCache); zero means DefaultSessionCacheSize, negative turns it off.
	SessionCacheSize int
	// RenewFlush is how often the idle-TTL renewals of calls are written to the store,
	// batched (see renewals); zero means DefaultRenewFlush.
	RenewFlush time.Duration
	// LocalReads, when set, lets reads and stats be answered in this process through
	// the workspace root an agent sends on the socket path (agent.Local; cmd/cws wires
	// server.OpenLocal). nil: every call goes to the agent.
	LocalReads agent.LocalOpener
	// AgentLiveness is how soon a silent agent is noticed (see agent.Liveness); zero
	// fields take the agent package's defaults. Its OnUnresponsive is the Service's: an
	// unresponsive agent is healed (heal.go).
	AgentLiveness agent.Liveness

	// Snapshots is the snapshot store (snapshots, forks' sources, archives); nil:
	// those answer ErrUnavailable, and suspended sessions are never archived.
	Snapshots *snapshot.Store
	// SuspendAfter suspends a session idle this long when its tenant sets no
	// suspendAfter; zero: never.
	SuspendAfter time.Duration
	// ArchiveAfter archives a session suspended this long when its tenant sets no
	// archiveAfter; zero: never.
	ArchiveAfter time.Duration

	// TestWorkspaceTmpfsBytes, for tests only, gives every new sandbox a tmpfs
	// workspace of this size (sandbox.Spec.WorkspaceTmpfsBytes) so that a full disk can
	// be provoked. Zero, always in production, means the session's volume.
	TestWorkspaceTmpfsBytes int64
}

// Caller is who is calling: the tenant, subject and scopes of a verified token.
type Caller struct {
	Tenant  string
	Subject string
	// Scopes are what the token grants (auth.Scope*; its tenant's default when it
	// carries none). Nil grants nothing: every operation needs a scope.
	Scopes []string
}

// Service runs sessions and tool calls.
type Service struct {
	terminals terminalCounts // the running terminals last seen, by tenant and session
	cfg       Config
	log       *slog.Logger
	obs       Observer
	fobs      FaultObserver
	catalog   *Catalog
	audit     chan AuditRecord
	// auditMu guards auditClosed: a call or a stream that ends after Close (an attach
	// still open) drops its record instead of sending on the closed channel.
	auditMu     sync.RWMutex
	auditClosed bool

	batcher     Store         // the Store as given: an AuditBatcher, maybe
	sessions    *sessionCache // nil: off
	renewals    *renewals
	stopWatcher context.CancelFunc

	policyReads singleflight.Group // by session id: one workspace policy read at a time
	wakes       singleflight.Group // by tenant/session: one wake at a time
	// starting holds, by sandbox ID, a channel closed once the wake of a suspended
	// session has started its sandbox: the session is recorded ready just before, and
	// a call that finds the sandbox stopped meanwhile waits for that start instead of
	// making its own.
	wakeStarts sync.Map
	portConns  sync.Map          // sandbox ID → *atomic.Int64: its exchanges under way (HoldPort)
	quiet      [256]sync.RWMutex // by session id's hash: writes read-lock, a snapshot locks (quiesce)
	inflightMu sync.Mutex
	inflight   map[string]int // session id → its calls under way on this replica

	mu        sync.Mutex
	agents    map[string]*agent.Client // by sandbox id
	healing   map[string]*healing      // by sandbox id: heals under way, or cooling down
	waking    map[string]bool          // by sandbox id: created, its agent not yet answering
	policies  map[string]cachedPolicy  // by session id
	policyGen uint64                   // counts policyChanged: a read that raced one is not kept

	owners       sync.Map    // sandbox id → owner: the session it serves (netedge.go)
	usage        *usageTable // by session: the last sampled usage (usage.go)
	stopUsage    context.CancelFunc
	linkKeyCache atomic.Value // []byte: the preview links' signing key (links.go)

	counting, recount atomic.Bool  // countActiveSoon: a recount runs; another is due
	lastCollect       atomic.Value // time.Time of the snapshot store's last collection
	known             knownSums    // by sandbox: its last capture's contents (captureknown.go)
}

type cachedPolicy struct {
	eff *policy.Effective
	err error
	at  time.Time
}

// New returns a Service. Call Close to flush the audit log.
func New(cfg Config) *Service {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.DefaultIdleTTL == 0 {
		cfg.DefaultIdleTTL = 30 * time.Minute
	}
	if cfg.DefaultMaxLife == 0 {
		cfg.DefaultMaxLife = 24 * time.Hour
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if cfg.PolicyTTL == 0 {
		cfg.PolicyTTL = time.Second
	}
	batcher := cfg.Store
	watcher, shared := watcherOf(cfg.Store)
	cache := newSessionCache(cfg.SessionCacheSize, !shared)
	usage := &usageTable{}
	cfg.Store = invalidatingStore{Store: cfg.Store, cache: cache, deleted: usage.drop}
	s := &Service{
		cfg: cfg, log: cfg.Log.With("component", "workspace"), obs: cfg.Observer, fobs: faults(cfg.Observer),
		catalog: NewCatalog(cfg.Tools...), inflight: map[string]int{},
		audit:    make(chan AuditRecord, 4096),
		sessions: cache, renewals: newRenewals(cfg.RenewFlush), stopWatcher: func() {}, batcher: batcher,
		agents: map[string]*agent.Client{}, policies: map[string]cachedPolicy{}, healing: map[string]*healing{},
		waking: map[string]bool{}, usage: usage,
	}
	s.lastCollect.Store(time.Time{})
	if cfg.Egress != nil && cfg.Egress.Observe == nil {
		cfg.Egress.Observe = s.egressRecord
	}
	if shared && cache != nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopWatcher = cancel
		go watcher.WatchSessions(ctx, cache.forget, cache.setLive)
	}
	go s.auditLoop()
	go s.renewLoop()
	s.stopUsage = func() {}
	if s.cfg.UsageEvery > 0 {
		uctx, cancel := context.WithCancel(context.Background())
		s.stopUsage = cancel
		go s.usageLoop(uctx)
	}
	return s
}

// Catalog returns the tool catalogue.
func (s *Service) Catalog() *Catalog { return s.catalog }

// Close writes the pending renewals, stops the audit writer after flushing what is
// queued, and ends agent streams.
func (s *Service) Close() {
	s.stopUsage()
	close(s.renewals.stop)
	<-s.renewals.done
	s.stopWatcher()
	s.auditMu.Lock()
	s.auditClosed = true
	close(s.audit)
	s.auditMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.agents {
		c.Shutdown()
		delete(s.agents, id)
	}
	for _, h := range s.healing {
		h.cancel()
	}
}

// liveAgent returns a sandbox's agent client if this replica has one with a live
// connection, else nil: it never dials.
func (s *Service) liveAgent(sandboxID string) *agent.Client {
	s.mu.Lock()
	c := s.agents[sandboxID]
	s.mu.Unlock()
	if c == nil || !c.Connected() {
		return nil
	}
	return c
}

// agentFor returns the (cached) agent client of a sandbox.
func (s *Service) agentFor(sandboxID string) *agent.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.agents[sandboxID]
	if !ok {
		live := s.cfg.AgentLiveness
		live.OnUnresponsive = func(err error) { s.heal(sandboxID, err) }
		c = agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
			s.awaitHeal(ctx, sandboxID)
			return s.attach(ctx, sandboxID)
		}, versionString(), s.log.With("sandbox", sandboxID)).WithLiveness(live).
			WithEgress(func(conn net.Conn) { s.serveEgress(sandboxID, conn) })
		if s.cfg.LocalReads != nil {
			c.WithLocal(s.cfg.LocalReads)
		}
		s.agents[sandboxID] = c
	}
	return c
}

// attach opens a stream to a sandbox's agent. A stopped sandbox (an engine restart, a
// docker stop) is started again first: its volume, and so its files, are intact. A
// removed one is ErrSessionLost.
func (s *Service) attach(ctx context.Context, sandboxID string) (io.ReadWriteCloser, error) {
	conn, err := s.cfg.Sandboxes.Attach(ctx, sandboxID)
	if errors.Is(err, sandbox.ErrStopped) && s.awaitStart(ctx, sandboxID) {
		conn, err = s.cfg.Sandboxes.Attach(ctx, sandboxID)
		if errors.Is(err, sandbox.ErrStopped) {
			// The wake could not start it, and puts the session back to suspended:
			// starting it here would leave a suspended session running.
			return nil, fmt.Errorf("%w: the session's wake could not start its sandbox (retry in a moment)", ErrUnavailable)
		}
	}
	if errors.Is(err, sandbox.ErrStopped) {
		s.log.Warn("sandbox is stopped, starting it again", "sandbox", sandboxID)
		if err := s.cfg.Sandboxes.Start(ctx, sandboxID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			return nil, fmt.Errorf("start stopped sandbox: %w", err)
		}
		s.fobs.Restarted("call")
		conn, err = s.cfg.Sandboxes.Attach(ctx, sandboxID)
	}
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrSessionLost, err)
	}
	return conn, err
}

// awaitStart waits, if a wake on this replica is starting sandboxID, until it has, and
// says whether it waited.
func (s *Service) awaitStart(ctx context.Context, sandboxID string) bool {
	ch, ok := s.wakeStarts.Load(sandboxID)
	if !ok {
		return false
	}
	select {
	case <-ch.(chan struct{}):
		return true
	case <-ctx.Done():
		return false
	}
}

// forgetAgent drops a sandbox's agent client (a stopped sandbox started again, a lost
// one): its stream ends, and a call in flight on it retries on a fresh one as usual.
// A heal under way stops. It never waits on the agent.
func (s *Service) forgetAgent(sandboxID string) {
	if c := s.takeAgent(sandboxID); c != nil {
		c.Close()
	}
}

// endAgent drops the agent client of a sandbox that is being removed: the calls in
// flight end at once (the agent is told to stop them), and nothing redials. A heal
// under way stops. It never waits on the agent.
func (s *Service) endAgent(sandboxID string) {
	s.owners.Delete(sandboxID)
	s.portConns.Delete(sandboxID)
	if c := s.takeAgent(sandboxID); c != nil {
		c.Shutdown()
	}
}

// takeAgent removes a sandbox's agent client from the Service, and stops its heal.
func (s *Service) takeAgent(sandboxID string) *agent.Client {
	s.mu.Lock()
	c := s.agents[sandboxID]
	delete(s.agents, sandboxID)
	h := s.healing[sandboxID]
	s.mu.Unlock()
	if h != nil {
		h.cancel()
	}
	return c
}

// auditBatch is the most audit records written in one round trip.
const auditBatch = 256

// auditLoop writes the audit records as they are queued; with an AuditBatcher store,
// what has queued up while a write was in flight goes in one batch.
func (s *Service) auditLoop() {
	batcher, _ := s.batcher.(AuditBatcher)
	batch := make([]AuditRecord, 0, auditBatch)
	for r := range s.audit {
		batch = append(batch[:0], r)
	drain:
		for batcher != nil && len(batch) < auditBatch {
			select {
			case r, ok := <-s.audit:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		if len(batch) > 1 {
			err = batcher.AuditBatch(ctx, batch)
		} else {
			err = s.cfg.Store.Audit(ctx, r)
		}
		if err != nil {
			s.log.Warn("audit records lost", "err", err, "records", len(batch), "tool", r.Tool, "session", r.Session)
		}
		cancel()
	}
}

type nopObserver struct{}

func (nopObserver) ToolCall(string, string, time.Duration) {}
func (nopObserver) PolicyDenial(string)                    {}
func (nopObserver) SessionCreated(time.Duration)           {}
func (nopObserver) SessionsActive(int)                     {}
func (nopObserver) Reaped(string)                          {}
func (nopObserver) Restarted(string)                       {}
func (nopObserver) Adopted()                               {}
func (nopObserver) Healed(string)                          {}

// faults returns the Observer's FaultObserver side, or one that drops everything.
func faults(o Observer) FaultObserver {
	if f, ok := o.(FaultObserver); ok {
		return f
	}
	return nopObserver{}
}
func (nopObserver) ExecUnenforced() {}
