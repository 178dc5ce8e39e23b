package workspace

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/snapshot"
	"github.com/cwsdev/cws/workspace/policy"
)

// CreateRequest asks for a new session. Zero fields take the tenant's defaults.
type CreateRequest struct {
	Image          string            `json:"image,omitempty"`
	TTL            time.Duration     `json:"-"` // idle TTL; capped by the tenant's
	Env            map[string]string `json:"env,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	IdempotencyKey string            `json:"-"`
	// Snapshot makes the session from one of the tenant's snapshots: its files, and
	// its image, env and labels unless the request sets them.
	Snapshot string `json:"snapshot,omitempty"`
	// Secrets are the tenant's secrets the session uses: variable → secret name. The
	// variable holds a placeholder; the egress proxy puts the value in (secrets.go).
	Secrets        map[string]string `json:"secrets,omitempty"`
	defaultSession bool              // the caller's default session: its container says so
	// restore fills the new workspace before the session is handed out (a snapshot's
	// or a fork's files); an error ends the session.
	restore func(ctx context.Context, sess *Session) error
}

// idempotencyTTL is how long an Idempotency-Key keeps answering with its session.
const idempotencyTTL = 24 * time.Hour

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns a session id: "s-" and 20 random base32 characters (100 bits).
func newID() string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	return "s-" + idEncoding.EncodeToString(b[:])[:20]
}

// CreateSession creates a session and its sandbox, and returns once the agent answers.
// With an IdempotencyKey, a repeated request returns the first one's session.
func (s *Service) CreateSession(ctx context.Context, caller Caller, req CreateRequest) (*Session, error) {
	if err := caller.need(auth.ScopeSessions, "creating a session"); err != nil {
		return nil, err
	}
	tp, ok := s.cfg.Tenants.Policy(caller.Tenant)
	if !ok {
		return nil, fmt.Errorf("%w: unknown tenant %q", ErrForbidden, caller.Tenant)
	}
	if err := validateLabels(req.Labels); err != nil {
		return nil, err
	}
	if req.Snapshot != "" {
		snap, err := s.getSnapshot(ctx, caller.Tenant, req.Snapshot)
		if err != nil {
			return nil, err
		}
		if req.Image == "" {
			req.Image = snap.Image
		}
		if req.Env == nil {
			req.Env = snap.Env
		}
		if req.Labels == nil {
			req.Labels = snap.Labels
		}
		req.restore = func(ctx context.Context, sess *Session) error { return s.restoreSnapshot(ctx, sess, snap.ID) }
	}
	if req.IdempotencyKey != "" {
		if len(req.IdempotencyKey) > 200 {
			return nil, invalidf("Idempotency-Key", "Idempotency-Key is longer than 200 characters")
		}
		id := newID()
		key := "idem:" + caller.Tenant + ":" + req.IdempotencyKey
		cur, claimed, err := s.cfg.Store.Claim(ctx, key, id, idempotencyTTL)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if !claimed {
			return s.cfg.Store.GetSession(ctx, caller.Tenant, cur)
		}
		sess, err := s.create(ctx, caller, tp, id, req)
		if err != nil {
			_ = s.cfg.Store.Release(context.WithoutCancel(ctx), key, id)
		}
		return sess, err
	}
	return s.create(ctx, caller, tp, newID(), req)
}

func validateLabels(l map[string]string) error {
	if len(l) > 32 {
		return invalidf("labels", "at most 32 labels")
	}
	for k, v := range l {
		if k == "" || len(k) > 63 || len(v) > 256 || strings.HasPrefix(k, "cws.") {
			return invalidf("labels", "label %q: keys are 1–63 characters and may not start with cws., values at most 256", k)
		}
	}
	return nil
}

func (s *Service) create(ctx context.Context, caller Caller, tp *policy.Policy, id string, req CreateRequest) (*Session, error) {
	start := s.cfg.Now()
	image, err := s.image(tp, req.Image)
	if err != nil {
		return nil, err
	}
	if err := tp.Narrow(nil).CheckEnv(req.Env); err != nil {
		return nil, err
	}
	secs, err := s.sessionSecrets(ctx, caller.Tenant, tp, req.Secrets, req.Env)
	if err != nil {
		return nil, err
	}
	idle := s.cfg.DefaultIdleTTL
	if tp.SessionTTL > 0 {
		idle = tp.SessionTTL.Std()
	}
	if req.TTL > 0 {
		idle = min(req.TTL, idle)
	}
	life := s.cfg.DefaultMaxLife
	if tp.MaxLifetime > 0 {
		life = tp.MaxLifetime.Std()
	}
	sess := &Session{ID: id, Tenant: caller.Tenant, Subject: caller.Subject, Image: image, State: StateCreating,
		Labels: req.Labels, Env: req.Env, Secrets: secs, CreatedAt: start.UTC(), LastUsed: start.UTC(), IdleTTL: idle, ExpiresAt: start.Add(life).UTC()}
	if err := s.cfg.Store.CreateSession(ctx, sess, tp.MaxSessions); err != nil {
		if errors.Is(err, ErrQuota) {
			return nil, fmt.Errorf("%w: tenant %s may hold %d sessions: delete one first", ErrQuota, caller.Tenant, tp.MaxSessions)
		}
		return nil, err
	}
	// From here on, a failure must not leave a container, a volume or a record behind.
	cleanup := func(cause error) error {
		bg := context.WithoutCancel(ctx)
		if sess.Sandbox != "" {
			s.endAgent(sess.Sandbox)
			_ = s.cfg.Sandboxes.Remove(bg, sess.Sandbox)
		}
		_ = s.cfg.Store.DeleteSession(bg, sess.Tenant, sess.ID)
		return cause
	}
	info, err := s.cfg.Sandboxes.Create(ctx, s.withTestSpec(s.spec(ctx, sess, tp, req.Env, req.defaultSession)))
	if err != nil {
		return nil, cleanup(fmt.Errorf("%w: create sandbox: %v", ErrUnavailable, err))
	}
	sess.Sandbox = info.ID
	s.own(sess)
	if err := s.waitReady(ctx, sess.Sandbox); err != nil {
		return nil, cleanup(err)
	}
	if req.restore != nil {
		if err := req.restore(ctx, sess); err != nil {
			return nil, cleanup(fmt.Errorf("fill the new workspace: %w", err))
		}
	}
	sess.State = StateReady
	if err := s.cfg.Store.UpdateSession(ctx, sess); err != nil {
		return nil, cleanup(err)
	}
	s.obs.SessionCreated(s.cfg.Now().Sub(start))
	s.countActiveSoon()
	s.log.Info("session created", "session", sess.ID, "tenant", sess.Tenant, "image", image, "sandbox", sess.Sandbox)
	return sess, nil
}

// image picks the session's image: the request's if the tenant allows it, else the
// tenant's first, else the server default.
func (s *Service) image(tp *policy.Policy, want string) (string, error) {
	if want == "" {
		if len(tp.Images) > 0 {
			return tp.Images[0], nil
		}
		return s.cfg.DefaultImage, nil
	}
	allowed := tp.Images
	if len(allowed) == 0 {
		allowed = []string{s.cfg.DefaultImage}
	}
	if !contains(allowed, want) {
		return "", &policy.Violation{Err: ErrPolicy, Rule: "images", Detail: fmt.Sprintf("image %q is not allowed; allowed: %s", want, strings.Join(allowed, ", "))}
	}
	return want, nil
}

func (s *Service) spec(ctx context.Context, sess *Session, tp *policy.Policy, env map[string]string, dflt bool) sandbox.Spec {
	lim := s.cfg.DefaultLimits
	if l := tp.Limits; l != nil {
		if l.CPUs > 0 {
			lim.NanoCPUs = int64(l.CPUs * 1e9)
		}
		if l.MemoryMB > 0 {
			lim.MemoryBytes = l.MemoryMB << 20
		}
		if l.Pids > 0 {
			lim.Pids = l.Pids
		}
		if l.NoFile > 0 {
			lim.NoFile = l.NoFile
		}
		if l.FileSizeMB > 0 {
			lim.FileSizeBytes = l.FileSizeMB << 20
		}
	}
	env = maps.Clone(env)
	delete(env, agent.EnvEgressCA) // only cws sets them
	delete(env, agent.EnvEgressVars)
	if se := s.secretEnv(ctx, sess); se != nil {
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, se)
	}
	return sandbox.Spec{Session: sess.ID, Tenant: sess.Tenant, Subject: sess.Subject, Image: sess.Image, Expires: sess.ExpiresAt,
		Network: tp.DirectNetwork(), Env: env, Labels: maps.Clone(sess.Labels), Limits: lim, Default: dflt}
}

// withTestSpec applies the test-only Config knobs to a Spec.
func (s *Service) withTestSpec(spec sandbox.Spec) sandbox.Spec {
	spec.WorkspaceTmpfsBytes = s.cfg.TestWorkspaceTmpfsBytes
	return spec
}

// waitReady pings the new sandbox's agent until it answers. A slow start is not a
// stuck agent: no heal is tried meanwhile.
func (s *Service) waitReady(ctx context.Context, sandboxID string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	defer s.starting(sandboxID)()
	c := s.agentFor(sandboxID)
	var err error
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 500*time.Millisecond) {
		if _, err = c.Ping(ctx); err == nil {
			return nil
		}
		if errors.Is(err, agent.ErrVersion) { // cws's own agent binary: no wait or retry helps
			return fmt.Errorf("the new sandbox's agent: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the sandbox's agent did not answer within %s: %v", ErrUnavailable, s.cfg.ReadyTimeout, err)
		case <-time.After(delay):
		}
	}
}

// GetSession returns one of caller's sessions. One the store forgot but whose
// container lives is adopted first.
func (s *Service) GetSession(ctx context.Context, caller Caller, id string) (*Session, error) {
	if err := caller.need(auth.ScopeSessions, "reading a session"); err != nil {
		return nil, err
	}
	return s.getSession(ctx, caller, id)
}

// SessionFor returns caller's session id for an endpoint bound to it
// (/v1/sessions/{id}/mcp). Unlike GetSession it needs no scope: the calls made there
// check their own. It is on every call's path there, so it answers from the session
// cache, which holds records exactly as the store has them, before reading the store.
func (s *Service) SessionFor(ctx context.Context, caller Caller, id string) (*Session, error) {
	if sess, ok := s.sessions.get(caller.Tenant, id); ok {
		if sess.Expired(s.cfg.Now()) {
			return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
		}
		return sess, nil
	}
	return s.getSession(ctx, caller, id)
}

// getSession returns one of caller's live sessions; an expired one is ErrNotFound.
func (s *Service) getSession(ctx context.Context, caller Caller, id string) (*Session, error) {
	sess, err := s.cfg.Store.GetSession(ctx, caller.Tenant, id)
	if errors.Is(err, ErrNotFound) && s.adoptByID(ctx, caller.Tenant, id) {
		sess, err = s.cfg.Store.GetSession(ctx, caller.Tenant, id)
	}
	if err != nil {
		return nil, err
	}
	if sess.Expired(s.cfg.Now()) {
		return nil, fmt.Errorf("session %s: %w", id, ErrNotFound)
	}
	return sess, nil
}

// ListSessions lists caller's tenant's live sessions.
func (s *Service) ListSessions(ctx context.Context, caller Caller) ([]*Session, error) {
	if err := caller.need(auth.ScopeSessions, "listing sessions"); err != nil {
		return nil, err
	}
	all, err := s.cfg.Store.ListSessions(ctx, caller.Tenant)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	out := all[:0]
	for _, sess := range all {
		if !sess.Expired(now) {
			out = append(out, sess)
		}
	}
	return out, nil
}

// RenewSession resets the idle TTL. The hard lifetime does not move.
func (s *Service) RenewSession(ctx context.Context, caller Caller, id string) (*Session, error) {
	if err := caller.need(auth.ScopeSessions, "renewing a session"); err != nil {
		return nil, err
	}
	sess, err := s.getSession(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now()
	if err := s.cfg.Store.TouchSession(ctx, caller.Tenant, id, now); err != nil {
		return nil, err
	}
	sess.LastUsed = now.UTC()
	s.actionAudit(caller, id, "renew", "", nil)
	return sess, nil
}

// DeleteSession removes a session, its container and its volume.
func (s *Service) DeleteSession(ctx context.Context, caller Caller, id string) error {
	if err := caller.need(auth.ScopeSessions, "deleting a session"); err != nil {
		return err
	}
	sess, err := s.cfg.Store.GetSession(ctx, caller.Tenant, id)
	if errors.Is(err, ErrNotFound) && s.adoptByID(ctx, caller.Tenant, id) {
		sess, err = s.cfg.Store.GetSession(ctx, caller.Tenant, id)
	}
	if err != nil {
		return err
	}
	return s.remove(ctx, sess)
}

func (s *Service) remove(ctx context.Context, sess *Session) error {
	if sess.Sandbox != "" {
		s.endAgent(sess.Sandbox) // its calls in flight end now: nothing waits on the agent
		if err := s.cfg.Sandboxes.Remove(ctx, sess.Sandbox); err != nil {
			return fmt.Errorf("%w: remove sandbox of %s: %v", ErrUnavailable, sess.ID, err)
		}
	}
	if sess.Archive != "" && s.cfg.Snapshots != nil {
		// Before the record: an archive whose session the store does not know is
		// adopted back (the store lost it), never left to resurrect a deleted one.
		if err := s.cfg.Snapshots.Delete(ctx, sess.Tenant, sess.Archive); err != nil && !errors.Is(err, snapshot.ErrNotFound) {
			return fmt.Errorf("%w: remove the archive of %s: %v", ErrUnavailable, sess.ID, err)
		}
	}
	if err := s.cfg.Store.DeleteSession(ctx, sess.Tenant, sess.ID); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	// A stray archive of it (an archive or a wake cut short) must never bring it back.
	_, _, _ = s.cfg.Store.Claim(ctx, tombstoneKey(sess.Tenant, sess.ID), "deleted", tombstoneTTL)
	if sess.Asleep() {
		// A wake that raced this delete may have made a sandbox for it since sess was
		// read: the delete wins, and that sandbox goes too.
		if boxes, err := s.cfg.Sandboxes.List(ctx, map[string]string{sandbox.LabelSession: sess.ID, sandbox.LabelTenant: sess.Tenant}); err == nil {
			for _, b := range boxes {
				s.endAgent(b.ID)
				_ = s.cfg.Sandboxes.Remove(ctx, b.ID)
			}
		}
	}
	_ = s.cfg.Store.Release(ctx, defaultKey(sess.Tenant, sess.Subject), sess.ID)
	s.mu.Lock()
	delete(s.policies, sess.ID)
	s.mu.Unlock()
	s.renewals.forget(sess.Tenant, sess.ID)
	s.countActive(ctx)
	return nil
}

func defaultKey(tenant, sub string) string { return "default:" + tenant + ":" + sub }

// tombstoneKey marks a deleted session for tombstoneTTL, so that a stray archive of it
// is removed rather than adopted (reconcileArchives).
func tombstoneKey(tenant, id string) string { return "deleted:" + tenant + ":" + id }

const tombstoneTTL = 30 * 24 * time.Hour

// defaultSession returns the one session per (tenant, sub) that /mcp uses when the token
// names none, creating it on first use (CallDefault checks the caller's scope). Replicas
// agree through Store.Claim.
func (s *Service) defaultSession(ctx context.Context, caller Caller) (*Session, error) {
	key := defaultKey(caller.Tenant, caller.Subject)
	for attempt := 0; attempt < 3; attempt++ {
		id := newID()
		cur, claimed, err := s.cfg.Store.Claim(ctx, key, id, 0)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if claimed {
			tp, ok := s.cfg.Tenants.Policy(caller.Tenant)
			if !ok {
				return nil, fmt.Errorf("%w: unknown tenant %q", ErrForbidden, caller.Tenant)
			}
			if s.adoptDefault(ctx, caller, id) {
				continue // the store had lost the claim, not the session: it is back
			}
			sess, err := s.create(ctx, caller, tp, id, CreateRequest{defaultSession: true})
			if err != nil {
				_ = s.cfg.Store.Release(context.WithoutCancel(ctx), key, id)
			}
			return sess, err
		}
		sess, err := s.waitCreated(ctx, caller, cur)
		if errors.Is(err, ErrNotFound) {
			_ = s.cfg.Store.Release(ctx, key, cur) // it was deleted or expired: claim anew
			continue
		}
		return sess, err
	}
	return nil, fmt.Errorf("%w: default session of %s kept disappearing", ErrUnavailable, caller.Subject)
}

// adoptDefault looks on the engine for caller's live default session that the store
// forgot (it lost its data), and adopts it with its claim. It reports whether it did.
func (s *Service) adoptDefault(ctx context.Context, caller Caller, claimed string) bool {
	boxes, err := s.cfg.Sandboxes.List(ctx, map[string]string{sandbox.LabelTenant: caller.Tenant,
		sandbox.LabelSubject: caller.Subject, sandbox.LabelDefault: "true"})
	if err != nil {
		return false
	}
	key := defaultKey(caller.Tenant, caller.Subject)
	for _, b := range boxes {
		if b.Tenant != caller.Tenant || b.Subject != caller.Subject || !b.Default || !adoptable(b, s.cfg.Now()) {
			continue
		}
		// Our fresh claim holds the key: release it so that adopt sets the adopted id.
		_ = s.cfg.Store.Release(ctx, key, claimed)
		if err := s.adopt(ctx, b); err == nil {
			return true
		}
	}
	return false
}

// waitCreated waits for a session another request is creating.
func (s *Service) waitCreated(ctx context.Context, caller Caller, id string) (*Session, error) {
	deadline := time.Now().Add(s.cfg.ReadyTimeout + 10*time.Second)
	for {
		sess, err := s.getSession(ctx, caller, id)
		if err != nil || sess.State == StateReady || sess.Asleep() { // an asleep one wakes on its call
			return sess, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: session %s is still %s", ErrUnavailable, id, sess.State)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// countActiveSoon recounts the active sessions in the background, one recount at a
// time: a create does not wait for a scan of every session in the store, and a burst
// of creates costs one or two scans, not one each.
func (s *Service) countActiveSoon() {
	if !s.counting.CompareAndSwap(false, true) {
		s.recount.Store(true)
		return
	}
	go func() {
		for {
			s.recount.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			s.countActive(ctx)
			cancel()
			if !s.recount.Load() {
				break
			}
		}
		s.counting.Store(false)
	}()
}

func (s *Service) countActive(ctx context.Context) {
	all, err := s.cfg.Store.AllSessions(ctx)
	if err == nil {
		s.obs.SessionsActive(len(all))
		counts := map[string]int{}
		for _, sess := range all {
			counts[sess.State]++
		}
		lifecycle(s.obs).SessionsByState(counts)
	}
}
