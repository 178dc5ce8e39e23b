package workspace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/workspace/policy"
)

// Usage is what a session uses, as last sampled: CPU, memory and processes from the
// engine (sandbox.StatsReader: docker stats, the kubelet's summary), else from the
// sandbox's cgroup files read by its agent; disk from a walk of the workspace by its
// agent; its egress from the proxy. It is collected in the background (CollectUsage), so a
// read costs the engine nothing.
type Usage struct {
	CPUSeconds      float64   `json:"cpuSeconds"`
	MemoryBytes     int64     `json:"memoryBytes"`
	MemoryPeakBytes int64     `json:"memoryPeakBytes"`
	DiskBytes       int64     `json:"diskBytes"`
	DiskPartial     bool      `json:"diskPartial,omitempty"` // the walk stopped at its bound
	Processes       int       `json:"processes"`
	EgressBytesOut  int64     `json:"egressBytesOut"`
	EgressBytesIn   int64     `json:"egressBytesIn"`
	EgressCalls     int64     `json:"egressConnections"`
	EgressDenied    int64     `json:"egressDenied"`
	SampledAt       time.Time `json:"sampledAt,omitzero"` // the running sandbox's last sample; zero: none since it started
	DiskSampledAt   time.Time `json:"diskSampledAt,omitzero"`

	source string // "engine" or "cgroup": CPU deltas are counted within one source
}

// UsageObserver is what an Observer may implement to export usage by tenant (bounded
// labels): the CPU seconds used since the last collection, and what the tenant's
// sessions hold now.
type UsageObserver interface {
	TenantUsage(tenant string, cpuSeconds float64, memoryBytes, diskBytes int64)
}

// Usage sampling intervals.
const (
	DefaultUsageEvery = 10 * time.Second
	diskEvery         = time.Minute
)

type usageTable struct {
	mu sync.Mutex
	m  map[string]*Usage // by tenant + "/" + session id
}

func (t *usageTable) get(tenant, id string) (Usage, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	u, ok := t.m[tenant+"/"+id]
	if !ok {
		return Usage{}, false
	}
	return *u, true
}

func (t *usageTable) update(tenant, id string, f func(*Usage)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*Usage{}
	}
	k := tenant + "/" + id
	u := t.m[k]
	if u == nil {
		u = &Usage{}
		t.m[k] = u
	}
	f(u)
}

// clearLive zeroes what only a running sandbox has, and its sample's time: a woken
// session has no sample until the next one (its CPU time and disk stay as last seen).
func (t *usageTable) clearLive(tenant, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if u := t.m[tenant+"/"+id]; u != nil {
		u.MemoryBytes, u.Processes, u.source, u.SampledAt = 0, 0, "", time.Time{}
	}
}

// drop forgets a session's usage.
func (t *usageTable) drop(tenant, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, tenant+"/"+id)
}

// keep drops the entries of sessions not in live.
func (t *usageTable) keep(live map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k := range t.m {
		if !live[k] {
			delete(t.m, k)
		}
	}
}

// UsageOf returns the last sampled usage of caller's session id (scope sessions). It
// never wakes a sleeping session nor asks the engine.
func (s *Service) UsageOf(ctx context.Context, caller Caller, id string) (Usage, error) {
	sess, err := s.GetSession(ctx, caller, id)
	if err != nil {
		return Usage{}, err
	}
	u, _ := s.usage.get(sess.Tenant, sess.ID)
	return u, nil
}

// CachedUsage is the last sampled usage of a session, if any (for lists).
func (s *Service) CachedUsage(tenant, id string) (Usage, bool) { return s.usage.get(tenant, id) }

// usageLoop samples every ready session's usage every cfg.UsageEvery until ctx ends.
func (s *Service) usageLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.UsageEvery)
	defer t.Stop()
	for {
		s.CollectUsage(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CollectUsage samples the usage of every ready session: one engine request per
// session at most (the driver may answer many at once), and a disk walk by each agent
// at most once a minute.
func (s *Service) CollectUsage(ctx context.Context) {
	all, err := s.cfg.Store.AllSessions(ctx)
	if err != nil {
		return
	}
	live := map[string]bool{}
	var ids []string
	bySandbox := map[string]*Session{}
	for _, sess := range all {
		live[sess.Tenant+"/"+sess.ID] = true
		if sess.State == StateReady && sess.Sandbox != "" {
			ids = append(ids, sess.Sandbox)
			bySandbox[sess.Sandbox] = sess
		}
	}
	s.usage.keep(live)
	for _, sess := range all {
		if sess.State != StateReady {
			// Asleep: nothing runs (its CPU time and disk stay as last seen).
			s.usage.clearLive(sess.Tenant, sess.ID)
		}
	}
	type sums struct {
		cpu       float64
		mem, disk int64
	}
	tenants := map[string]*sums{}
	add := func(tenant string) *sums {
		if tenants[tenant] == nil {
			tenants[tenant] = &sums{}
		}
		return tenants[tenant]
	}
	for _, sess := range all {
		add(sess.Tenant)
	}
	var cpuMu sync.Mutex        // add, from the agents' goroutines below
	engine := map[string]bool{} // sandboxes the engine answered for
	if sr, ok := s.cfg.Sandboxes.(sandbox.StatsReader); ok && len(ids) > 0 {
		sctx, cancel := context.WithTimeout(ctx, s.cfg.UsageEvery)
		stats, _ := sr.Stats(sctx, ids)
		cancel()
		now := s.cfg.Now().UTC()
		for sb, st := range stats {
			sess := bySandbox[sb]
			if sess == nil {
				continue
			}
			engine[sb] = true
			s.usage.update(sess.Tenant, sess.ID, func(u *Usage) {
				if d := st.CPUSeconds - u.CPUSeconds; d > 0 && !u.SampledAt.IsZero() && u.source == "engine" {
					add(sess.Tenant).cpu += d
				}
				u.source = "engine"
				u.CPUSeconds, u.MemoryBytes, u.Processes, u.SampledAt = st.CPUSeconds, st.MemoryBytes, st.Processes, now
				u.MemoryPeakBytes = max(u.MemoryPeakBytes, st.MemoryPeakBytes, st.MemoryBytes)
			})
		}
	}
	// The agents: the disk walk at most once a minute; and the cgroup counters of the
	// sandboxes the engine could not answer for (a cluster whose node proxy cws may not
	// use, for one) — cheap reads of a few files inside.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for sb, sess := range bySandbox {
		u, _ := s.usage.get(sess.Tenant, sess.ID)
		disk := s.cfg.Now().Sub(u.DiskSampledAt) >= diskEvery
		fromEngine := engine[sb]
		if !disk && fromEngine {
			continue
		}
		// Only through a live connection of this replica's: a sample never dials (a
		// dial starts a stopped sandbox, and the newest connection takes the egress).
		c := s.liveAgent(sess.Sandbox)
		if c == nil {
			continue
		}
		s.own(sess)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			d, err := c.Usage(dctx, agent.UsageArgs{Disk: disk})
			if err != nil {
				return
			}
			now := s.cfg.Now().UTC()
			s.usage.update(sess.Tenant, sess.ID, func(u *Usage) {
				if disk {
					u.DiskBytes, u.DiskPartial, u.DiskSampledAt = d.Bytes, d.Partial, now
				}
				if !fromEngine && d.Cgroup {
					if delta := d.CPUSeconds - u.CPUSeconds; delta > 0 && !u.SampledAt.IsZero() && u.source == "cgroup" {
						cpuMu.Lock()
						add(sess.Tenant).cpu += delta
						cpuMu.Unlock()
					}
					u.source = "cgroup"
					u.CPUSeconds, u.MemoryBytes, u.Processes, u.SampledAt = d.CPUSeconds, d.MemoryBytes, d.Processes, now
					u.MemoryPeakBytes = max(u.MemoryPeakBytes, d.MemoryPeakBytes, d.MemoryBytes)
				}
			})
		}()
	}
	wg.Wait()
	uo, ok := s.obs.(UsageObserver)
	if !ok {
		return
	}
	for _, sess := range all {
		if u, ok := s.usage.get(sess.Tenant, sess.ID); ok {
			t := add(sess.Tenant)
			t.mem += u.MemoryBytes
			t.disk += u.DiskBytes
		}
	}
	for tenant, t := range tenants {
		uo.TenantUsage(tenant, t.cpu, t.mem, t.disk)
	}
}

// noteEgress adds one egress connection to its session's usage.
func (s *Service) noteEgress(tenant, id string, allowed bool, out, in int64) {
	s.usage.update(tenant, id, func(u *Usage) {
		u.EgressCalls++
		if !allowed {
			u.EgressDenied++
		}
		u.EgressBytesOut += out
		u.EgressBytesIn += in
	})
}

// admin checks that caller has the operator's view: a token of cws serve
// --admin-tenant carrying the admin scope.
func (s *Service) admin(caller Caller) error {
	if s.cfg.AdminTenant == "" || caller.Tenant != s.cfg.AdminTenant || !caller.Has(auth.ScopeAdmin) {
		return &ScopeError{Scope: auth.ScopeAdmin, What: "the operator's view across tenants (a token of the admin tenant carrying scope admin)"}
	}
	return nil
}

// SessionFilter narrows AdminSessions; empty fields match everything.
type SessionFilter struct {
	Tenant, State, Image string
	Labels               map[string]string // each must be set to this value
}

func (f SessionFilter) match(s *Session) bool {
	if f.Tenant != "" && s.Tenant != f.Tenant || f.State != "" && s.State != f.State || f.Image != "" && s.Image != f.Image {
		return false
	}
	for k, v := range f.Labels {
		if got, ok := s.Labels[k]; !ok || v != "" && got != v {
			return false
		}
	}
	return true
}

// AdminSessions lists every tenant's sessions that match f (the admin role).
func (s *Service) AdminSessions(ctx context.Context, caller Caller, f SessionFilter) ([]*Session, error) {
	if err := s.admin(caller); err != nil {
		return nil, err
	}
	all, err := s.cfg.Store.AllSessions(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	now := s.cfg.Now()
	out := all[:0]
	for _, sess := range all {
		if !sess.Expired(now) && f.match(sess) {
			out = append(out, sess)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].CreatedAt.Before(out[j].CreatedAt)
	})
	return out, nil
}

// TenantSummary is one tenant as the admin view shows it.
type TenantSummary struct {
	ID          string         `json:"id"`
	Sessions    map[string]int `json:"sessions"` // by state
	MaxSessions int            `json:"maxSessions,omitempty"`
	Network     string         `json:"network"` // false, true or allow list
	Toolsets    []string       `json:"toolsets"`
	Usage       Usage          `json:"usage"` // summed over its sessions
}

// TenantLister is what a Tenants may implement to list the tenants it knows.
type TenantLister interface {
	TenantIDs() []string
}

// AdminTenants summarizes every tenant (the admin role): sessions by state, policy
// highlights, usage summed.
func (s *Service) AdminTenants(ctx context.Context, caller Caller) ([]TenantSummary, error) {
	if err := s.admin(caller); err != nil {
		return nil, err
	}
	all, err := s.cfg.Store.AllSessions(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	by := map[string]*TenantSummary{}
	get := func(id string) *TenantSummary {
		t := by[id]
		if t == nil {
			t = &TenantSummary{ID: id, Sessions: map[string]int{}, Network: "false"}
			if p, ok := s.cfg.Tenants.Policy(id); ok && p != nil {
				t.MaxSessions, t.Toolsets = p.MaxSessions, p.EnabledToolsets()
				if p.Network != nil {
					b, _ := p.Network.MarshalJSON()
					t.Network = string(b)
				}
			}
			by[id] = t
		}
		return t
	}
	if tl, ok := s.cfg.Tenants.(TenantLister); ok {
		for _, id := range tl.TenantIDs() {
			get(id)
		}
	}
	for _, sess := range all {
		t := get(sess.Tenant)
		t.Sessions[sess.State]++
		if u, ok := s.usage.get(sess.Tenant, sess.ID); ok {
			t.Usage.CPUSeconds += u.CPUSeconds
			t.Usage.MemoryBytes += u.MemoryBytes
			t.Usage.DiskBytes += u.DiskBytes
			t.Usage.Processes += u.Processes
			t.Usage.EgressBytesOut += u.EgressBytesOut
			t.Usage.EgressBytesIn += u.EgressBytesIn
			t.Usage.EgressCalls += u.EgressCalls
		}
	}
	out := make([]TenantSummary, 0, len(by))
	for _, t := range by {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].ID, out[j].ID) < 0 })
	return out, nil
}

// SessionAudit returns the newest audit records of caller's session id, newest first
// (scope sessions), from the last n records of the audit log.
func (s *Service) SessionAudit(ctx context.Context, caller Caller, id string, limit int) ([]AuditRecord, error) {
	if _, err := s.GetSession(ctx, caller, id); err != nil {
		return nil, err
	}
	if limit <= 0 || limit > 1000 {
		limit = 200
	}
	recs, err := s.cfg.Store.RecentAudit(ctx, auditScan)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var out []AuditRecord
	for _, r := range recs {
		if r.Tenant == caller.Tenant && r.Session == id {
			if out = append(out, r); len(out) >= limit {
				break
			}
		}
	}
	return out, nil
}

// auditScan is how many of the newest audit records SessionAudit looks through: a
// session's timeline shows its calls among the last auditScan of every session's.
const auditScan = 5000

// PolicyView is the policy in force for a session: its tenant's (the ceiling) and the
// workspace's .cws-policy.json, which may only narrow it.
type PolicyView struct {
	Tenant         *policy.Policy  `json:"tenant"`
	Workspace      json.RawMessage `json:"workspace,omitempty"`      // the file as it is; absent: none
	WorkspaceError string          `json:"workspaceError,omitempty"` // why the file fails every call
}

// PolicyOf returns the policy in force for caller's session id (scope sessions). It
// reads the workspace's file through the agent, so it wakes a sleeping session.
func (s *Service) PolicyOf(ctx context.Context, caller Caller, id string) (*PolicyView, error) {
	if err := caller.need(auth.ScopeSessions, "reading a session's policy"); err != nil {
		return nil, err
	}
	sess, _, err := s.session(ctx, caller, id)
	if err != nil {
		return nil, err
	}
	tp, _ := s.cfg.Tenants.Policy(caller.Tenant)
	if tp == nil {
		tp = policy.Default()
	}
	v := &PolicyView{Tenant: tp}
	data, _, err := s.agentFor(sess.Sandbox).ReadFile(ctx, agent.ReadArgs{Path: policy.FileName, MaxSize: policy.MaxPolicyBytes})
	switch {
	case errors.Is(err, agent.ErrNotFound):
	case err != nil:
		return nil, mapAgentError(err)
	default:
		if _, perr := policy.ParseWorkspace(data); perr != nil {
			v.WorkspaceError = perr.Error()
		}
		if json.Valid(data) {
			v.Workspace = data
		} else {
			v.Workspace, _ = json.Marshal(string(data))
		}
	}
	return v, nil
}
