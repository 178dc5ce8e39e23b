package policy

import (
	"encoding/json"
	"testing"

	"github.com/cwsdev/cws/egress"
)

// TestNarrowNetwork: the tenant's network is the ceiling; a workspace file may only
// narrow it (false turns it off, an allow list intersects), never widen it.
func TestNarrowNetwork(t *testing.T) {
	type probe struct {
		host string
		port int
		ok   bool
	}
	tests := []struct {
		name, tenant, ws string
		mode             egress.Mode
		probes           []probe
	}{
		{"omitted: off", `{}`, "", egress.Off, nil},
		{"false: off", `{"network": false}`, "", egress.Off, nil},
		{"true: open", `{"network": true}`, "", egress.Open, nil},
		{"allow list", `{"network": {"allow": ["a.test", "*.b.test:443"], "deny": ["x.b.test"]}}`, "", egress.Listed,
			[]probe{{"a.test", 80, true}, {"y.b.test", 443, true}, {"y.b.test", 80, false}, {"x.b.test", 443, false}, {"c.test", 443, false}}},
		{"workspace narrows", `{"network": {"allow": ["a.test", "c.test"]}}`, `{"network": {"allow": ["a.test", "d.test"]}}`, egress.Listed,
			[]probe{{"a.test", 80, true}, {"c.test", 80, false}, {"d.test", 80, false}}},
		{"workspace denies", `{"network": {"allow": ["*.a.test"]}}`, `{"network": {"allow": ["*.a.test"], "deny": ["x.a.test"]}}`, egress.Listed,
			[]probe{{"y.a.test", 80, true}, {"x.a.test", 80, false}}},
		{"workspace false turns it off", `{"network": {"allow": ["a.test"]}}`, `{"network": false}`, egress.Off, nil},
		{"workspace true does not widen", `{"network": {"allow": ["a.test"]}}`, `{"network": true}`, egress.Listed,
			[]probe{{"a.test", 80, true}, {"b.test", 80, false}}},
		{"workspace can't open a closed tenant", `{"network": false}`, `{"network": {"allow": ["a.test"]}}`, egress.Off, nil},
		{"workspace omitted keeps the tenant's", `{"network": {"allow": ["a.test"]}}`, `{"maxFileSize": 10}`, egress.Listed,
			[]probe{{"a.test", 80, true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.tenant, tt.ws).Egress()
			if p.Mode != tt.mode {
				t.Fatalf("mode = %v, want %v", p.Mode, tt.mode)
			}
			for _, pr := range tt.probes {
				if ok, rule := p.Rules.Allows(pr.host, pr.port); ok != pr.ok {
					t.Errorf("Allows(%s:%d) = %v (%s), want %v", pr.host, pr.port, ok, rule, pr.ok)
				}
			}
		})
	}
	if p := mustParse(t, `{"network": {"allow": ["a.test"]}, "egress": {"maxConnections": 9}}`, "").Egress(); p.MaxConns != 9 {
		t.Errorf("egress.maxConnections = %d, want 9", p.MaxConns)
	}
}

// TestNetworkForms: true goes through the proxy (any public name: egress.Open, never
// a route of the sandbox's own); only "direct" gives the sandbox its own route; each
// form writes back as it was read.
func TestNetworkForms(t *testing.T) {
	tests := []struct {
		in     string
		direct bool
		mode   egress.Mode
		out    string
	}{
		{`{}`, false, egress.Off, "false"},
		{`{"network": false}`, false, egress.Off, "false"},
		{`{"network": null}`, false, egress.Off, "false"},
		{`{"network": true}`, false, egress.Open, "true"},
		{`{"network": "direct"}`, true, egress.Open, `"direct"`},
		{`{"network": {"allow": ["a.test"]}}`, false, egress.Listed, `{"allow":["a.test"]}`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if p.DirectNetwork() != tt.direct {
				t.Errorf("DirectNetwork() = %v, want %v", p.DirectNetwork(), tt.direct)
			}
			if m := p.Narrow(nil).Egress().Mode; m != tt.mode {
				t.Errorf("egress mode = %v, want %v", m, tt.mode)
			}
			var n Network
			if p.Network != nil {
				n = *p.Network
			}
			if b, _ := json.Marshal(n); string(b) != tt.out {
				t.Errorf("marshalled %s, want %s", b, tt.out)
			}
		})
	}
	// A workspace file can't turn a tenant's true into a route of its own.
	if _, err := ParseWorkspace([]byte(`{"network": "direct"}`)); err == nil {
		t.Error(`a workspace file with network "direct" parsed`)
	}
}

// TestPreviewPorts: ports and ranges; the workspace may only narrow; none listed, none.
func TestPreviewPorts(t *testing.T) {
	tests := []struct {
		name, tenant, ws string
		open, shut       []int
	}{
		{"none by default", `{}`, "", nil, []int{80, 3000}},
		{"ports and ranges", `{"previewPorts": [3000, "8000-8099"]}`, "", []int{3000, 8000, 8099}, []int{3001, 7999, 8100}},
		{"workspace narrows", `{"previewPorts": [3000, "8000-8099"]}`, `{"previewPorts": ["8000-8010"]}`, []int{8000, 8010}, []int{3000, 8011}},
		{"workspace can't widen", `{"previewPorts": [3000]}`, `{"previewPorts": [3000, 4000]}`, []int{3000}, []int{4000}},
		{"workspace empty: none", `{"previewPorts": [3000]}`, `{"previewPorts": []}`, nil, []int{3000}},
		{"workspace can't open a closed tenant", `{}`, `{"previewPorts": [3000]}`, nil, []int{3000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustParse(t, tt.tenant, tt.ws)
			for _, p := range tt.open {
				if !e.PreviewAllowed(p) {
					t.Errorf("port %d refused", p)
				}
			}
			for _, p := range tt.shut {
				if e.PreviewAllowed(p) {
					t.Errorf("port %d allowed", p)
				}
			}
		})
	}
	// A round trip keeps the list as written.
	p, err := Parse([]byte(`{"previewPorts": [3000, "8000-8099"], "network": {"allow": ["@go"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	if q, err := Parse(b); err != nil || !q.Narrow(nil).PreviewAllowed(8050) || q.Narrow(nil).Egress().Mode != egress.Listed {
		t.Errorf("round trip of %s: %v", b, err)
	}
}
