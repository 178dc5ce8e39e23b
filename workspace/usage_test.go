package workspace_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// countingStats is the local sandboxes with a StatsReader that counts its requests.
type countingStats struct {
	*sandboxtest.Local
	calls, ids atomic.Int64
}

func (c *countingStats) Stats(_ context.Context, ids []string) (map[string]sandbox.Stats, error) {
	c.calls.Add(1)
	c.ids.Add(int64(len(ids)))
	out := map[string]sandbox.Stats{}
	for _, id := range ids {
		out[id] = sandbox.Stats{CPUSeconds: 1.5, MemoryBytes: 64 << 20, Processes: 3}
	}
	return out, nil
}

// TestUsageCostsNothingPerRead: a collection asks the engine once for all the ready
// sessions, reads of usage (any number, lists included) ask it nothing, and another
// tenant's usage is not found.
func TestUsageCostsNothingPerRead(t *testing.T) {
	tp, _ := policy.Parse([]byte("{}"))
	drv := &countingStats{Local: sandboxtest.New(t)}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Store: memstore.New(), Sandboxes: drv,
		Tenants: tenants{testTenant: tp, otherTenant: tp}, DefaultImage: "test-image"})
	t.Cleanup(svc.Close)
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	ctx := context.Background()
	var ids []string
	for range 5 {
		s, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
	}
	svc.CollectUsage(ctx)
	if drv.calls.Load() != 1 || drv.ids.Load() != 5 {
		t.Fatalf("one collection: %d engine requests for %d sandboxes, want 1 for 5", drv.calls.Load(), drv.ids.Load())
	}
	for range 100 {
		for _, id := range ids {
			u, err := svc.UsageOf(ctx, caller, id)
			if err != nil {
				t.Fatal(err)
			}
			if u.CPUSeconds != 1.5 || u.MemoryBytes != 64<<20 || u.Processes != 3 || u.SampledAt.IsZero() {
				t.Fatalf("usage = %+v", u)
			}
		}
	}
	if drv.calls.Load() != 1 {
		t.Errorf("500 reads made %d engine requests", drv.calls.Load()-1)
	}
	// The disk walk ran once per session, and is not repeated within a minute.
	u, _ := svc.UsageOf(ctx, caller, ids[0])
	if u.DiskSampledAt.IsZero() {
		t.Errorf("no disk sample: %+v", u)
	}
	at := u.DiskSampledAt
	svc.CollectUsage(ctx)
	if u, _ = svc.UsageOf(ctx, caller, ids[0]); !u.DiskSampledAt.Equal(at) {
		t.Errorf("the disk was walked again %v after the first walk", u.DiskSampledAt.Sub(at))
	}
	other := workspace.Caller{Tenant: otherTenant, Subject: "mallory", Scopes: auth.AllScopes()}
	if _, err := svc.UsageOf(ctx, other, ids[0]); !errorsIs(err, workspace.ErrNotFound) {
		t.Errorf("another tenant's usage: %v, want not found", err)
	}
	// The admin view needs the admin tenant and the admin scope.
	if _, err := svc.AdminSessions(ctx, workspace.Caller{Tenant: testTenant, Scopes: []string{auth.ScopeAdmin}}, workspace.SessionFilter{}); err == nil {
		t.Error("AdminSessions without --admin-tenant answered")
	}
}

// TestUsageAcrossSuspend: a suspended session keeps its CPU time and disk and has no
// live figures; after a resume it has no sample (sampledAt is absent) until the next
// collection, rather than the zeros of the sleep.
func TestUsageAcrossSuspend(t *testing.T) {
	tp, _ := policy.Parse([]byte("{}"))
	drv := &countingStats{Local: sandboxtest.New(t)}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Store: memstore.New(), Sandboxes: drv,
		Tenants: tenants{testTenant: tp}, DefaultImage: "test-image"})
	t.Cleanup(svc.Close)
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	ctx := context.Background()
	s, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	svc.CollectUsage(ctx)
	before, _ := svc.UsageOf(ctx, caller, s.ID)
	if _, err := svc.Suspend(ctx, caller, s.ID); err != nil {
		t.Fatal(err)
	}
	u, _ := svc.UsageOf(ctx, caller, s.ID)
	if u.MemoryBytes != 0 || u.Processes != 0 || !u.SampledAt.IsZero() || u.CPUSeconds != before.CPUSeconds || u.DiskSampledAt != before.DiskSampledAt {
		t.Errorf("suspended: usage %+v, was %+v", u, before)
	}
	if _, err := svc.Resume(ctx, caller, s.ID); err != nil {
		t.Fatal(err)
	}
	if u, _ := svc.UsageOf(ctx, caller, s.ID); !u.SampledAt.IsZero() {
		t.Errorf("resumed, before a collection: usage %+v, want no sample", u)
	}
	svc.CollectUsage(ctx)
	if u, _ := svc.UsageOf(ctx, caller, s.ID); u.SampledAt.IsZero() || u.MemoryBytes != 64<<20 {
		t.Errorf("resumed, after a collection: usage %+v", u)
	}
}
