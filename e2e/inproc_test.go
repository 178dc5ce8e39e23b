package e2e_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/metrics"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// loadPolicies reads each fixture tenant's policy file the way `cws serve` does.
func loadPolicies(t testing.TB, fx *fixture) policy.ByTenant {
	t.Helper()
	out, err := policy.LoadFiles(fx.tenants.PolicyFiles())
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// inproc is the real router composed as cmd/cws/serve.go composes it, over the
// in-memory store and sandboxtest.Local instead of Redis and Docker.
type inproc struct {
	fx      *fixture
	handler *api.Server
	local   *sandboxtest.Local
	svc     *workspace.Service
	reg     *prometheus.Registry
	url     string // an httptest server on handler, for the go-sdk client
}

const publicURL = "http://cws.test"

func newInproc(t testing.TB, fx *fixture) *inproc {
	t.Helper()
	pols := loadPolicies(t, fx)
	local := sandboxtest.New(t)
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: "test", Commit: "test"})
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: local, Tenants: pols, Observer: m, DefaultImage: "local"})
	t.Cleanup(svc.Close)
	var tools []string
	for _, tl := range svc.Catalog().Tools() {
		tools = append(tools, tl.Name)
	}
	m.Init(tools, workspace.Outcomes, workspace.DenialRules, auth.Reasons)
	verifier := auth.NewVerifier(fx.tenants, auth.VerifierOptions{})
	mh := mcp.New(mcp.Config{Service: svc, Verifier: verifier, Tenants: pols,
		ResourceMetadataURL: publicURL + auth.WellKnownPath, OnAuthFailure: m.AuthFailure})
	h := api.New(api.Config{Service: svc, Verifier: verifier, MCP: mh, Metrics: m, Gatherer: reg,
		Ready: func(context.Context) error { return nil }, PublicURL: publicURL, Issuers: fx.tenants.Issuers()})
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return &inproc{fx: fx, handler: h, local: local, svc: svc, reg: reg, url: ts.URL}
}

// counter reads one series of a counter from the registry (0 when absent).
func (p *inproc) counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}
