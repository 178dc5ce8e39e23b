package e2e_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox"
)

const (
	churnCycles  = 200
	churnWorkers = 4
)

// TestChurn creates and deletes sessions through REST on the real engine, 4 at a
// time, and checks that nothing is left: no container, no workspace volume, no
// session. The timing is logged, not asserted.
func TestChurn(t *testing.T) {
	dockerOnly(t, "counts leftovers on the Docker engine")
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantChurn) })

	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for w := range churnWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok := fx.token(t, tenantChurn, fmt.Sprintf("worker-%d", w), "")
			for next.Add(1) <= churnCycles && !failed.Load() {
				r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions", tok, nil, nil)
				if r.status != http.StatusCreated {
					t.Errorf("create: %d %s", r.status, r.body)
					failed.Store(true)
					return
				}
				id := decode[sessionView](t, r).ID
				if r := do(t, nil, srv.url, http.MethodDelete, "/v1/sessions/"+id, tok, nil, nil); r.status != http.StatusNoContent {
					t.Errorf("delete %s: %d %s", id, r.status, r.body)
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if failed.Load() {
		t.FailNow()
	}
	t.Logf("%d create/delete cycles, %d in parallel: %s, %s per cycle (%.1f cycles/s)",
		churnCycles, churnWorkers, elapsed.Round(time.Millisecond), (elapsed / churnCycles).Round(time.Millisecond),
		float64(churnCycles)/elapsed.Seconds())

	cs, vs := leftovers(t, engine(t), map[string]string{sandbox.LabelTenant: tenantChurn})
	if len(cs) != 0 || len(vs) != 0 {
		t.Errorf("after %d cycles: %d containers %v and %d volumes %v left", churnCycles, len(cs), cs, len(vs), vs)
	}
	r := do(t, nil, srv.url, http.MethodGet, "/v1/sessions", fx.token(t, tenantChurn, "worker-0", ""), nil, nil)
	if n := decode[struct{ Count int }](t, r).Count; n != 0 {
		t.Errorf("%d sessions listed after the churn, want 0", n)
	}
	if n, ok := metricValue(srv.metrics(t), "cws_sessions_active", nil); !ok || n != 0 {
		t.Errorf("cws_sessions_active = %v (present %v), want 0", n, ok)
	}
}
