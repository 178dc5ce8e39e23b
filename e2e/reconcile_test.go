package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
)

// TestReconcileScope is TestRestart's orphan check without Docker: Reconcile removes
// an expired sandbox of a served tenant that the store does not know, counts it,
// adopts a live one, and leaves alone a sandbox of a tenant it does not serve (another
// cws on the same engine).
func TestReconcileScope(t *testing.T) {
	fx := newFixture(t)
	p := newInproc(t, fx)
	ctx := context.Background()
	orphan, err := p.local.Create(ctx, sandbox.Spec{Session: "s-orphan", Tenant: tenantAcme, Image: "local", Expires: time.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	live, err := p.local.Create(ctx, sandbox.Spec{Session: "s-live", Tenant: tenantAcme, Subject: "ghost", Image: "local"})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := p.local.Create(ctx, sandbox.Spec{Session: "s-foreign", Tenant: "other-" + runID, Image: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	boxes, _ := p.local.List(ctx, nil)
	for _, b := range boxes {
		left[b.ID] = true
	}
	if left[orphan.ID] {
		t.Errorf("the served tenant's orphan %s was not removed", orphan.ID)
	}
	if !left[live.ID] {
		t.Errorf("the served tenant's live sandbox %s was removed, not adopted", live.ID)
	}
	if !left[foreign.ID] {
		t.Errorf("the sandbox of a tenant this cws does not serve was removed")
	}
	if n := p.counter(t, "cws_sandbox_reaped_total", map[string]string{"reason": "orphan"}); n != 1 {
		t.Errorf("cws_sandbox_reaped_total{reason=orphan} = %v, want 1", n)
	}
}
