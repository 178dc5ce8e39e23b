package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cwsdev/cws/metrics"
)

// dashboard is the part of Grafana's dashboard model that cws-dashboard.json uses.
// Loading is strict: a field outside it (a typo, or a model change) fails the test.
type dashboard struct {
	UID           string   `json:"uid"`
	Title         string   `json:"title"`
	Description   string   `json:"description"`
	Tags          []string `json:"tags"`
	Editable      bool     `json:"editable"`
	GraphTooltip  int      `json:"graphTooltip"`
	SchemaVersion int      `json:"schemaVersion"`
	Version       int      `json:"version"`
	Refresh       string   `json:"refresh"`
	Time          struct{ From, To string }
	Timezone      string          `json:"timezone"`
	Annotations   json.RawMessage `json:"annotations"`
	Links         []any           `json:"links"`
	Templating    struct {
		List []templateVar `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type templateVar struct {
	Name       string          `json:"name"`
	Label      string          `json:"label"`
	Type       string          `json:"type"`
	Datasource *datasourceRef  `json:"datasource"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Current    json.RawMessage `json:"current"`
	Hide       int             `json:"hide"`
	Refresh    int             `json:"refresh"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Multi      bool            `json:"multi"`
	Options    []any           `json:"options"`
	Regex      string          `json:"regex"`
	Sort       int             `json:"sort"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Description string         `json:"description"`
	Datasource  *datasourceRef `json:"datasource"`
	GridPos     struct {
		X int `json:"x"`
		Y int `json:"y"`
		W int `json:"w"`
		H int `json:"h"`
	} `json:"gridPos"`
	FieldConfig json.RawMessage `json:"fieldConfig"`
	Options     json.RawMessage `json:"options"`
	Targets     []struct {
		RefID        string         `json:"refId"`
		Datasource   *datasourceRef `json:"datasource"`
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
	} `json:"targets"`
	Collapsed bool    `json:"collapsed"`
	Panels    []panel `json:"panels"`
}

// loadDashboard reads deploy/grafana/cws-dashboard.json strictly and checks its shape.
func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana", "cws-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("cws-dashboard.json: %v", err)
	}
	if dec.More() {
		t.Fatal("cws-dashboard.json: data after the dashboard object")
	}
	return d
}

// queries returns every PromQL expression of the dashboard (panels and variables).
func (d dashboard) queries() []string {
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			out = append(out, v.Definition)
		}
	}
	return out
}

// metricRef finds metric names in PromQL: cws's own, and the Go and process collectors'.
var metricRef = regexp.MustCompile(`\b(?:cws|go|process)_[a-zA-Z0-9_:]+`)

// metricsQueried returns the metric families the dashboard reads, with a histogram's
// _bucket/_sum/_count suffix removed when the family without it is in known.
func (d dashboard) metricsQueried(known map[string]bool) []string {
	set := map[string]bool{}
	for _, q := range d.queries() {
		for _, name := range metricRef.FindAllString(q, -1) {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && known[base] {
					name = base
				}
			}
			set[name] = true
		}
	}
	out := make([]string, 0, len(set))
	for name := range set {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// exportedMetrics is what cws registers, with every labelled family instantiated.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, metrics.BuildInfo{Version: "test", Commit: "test"})
	m.Init([]string{"readFile"}, []string{"ok"}, []string{"deniedPaths"}, []string{"expired"})
	// The HTTP families are labelled: one request through the middleware creates them.
	gin.SetMode(gin.TestMode)
	r := gin.New()
	r.Use(m.GinMiddleware())
	r.GET("/healthz", func(c *gin.Context) { c.Status(http.StatusOK) })
	r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/healthz", nil))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range families {
		known[f.GetName()] = true
	}
	return known
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title (provisioning keys on the uid)")
	}

	// The data source is a variable, so the dashboard imports into any Grafana.
	vars := map[string]templateVar{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		t.Errorf("no datasource variable of type prometheus: %+v", v)
	}

	ids := map[int]bool{}
	titles := map[string]bool{}
	type cell struct{ x, y int }
	used := map[cell]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := used[cell{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				used[cell{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		titles[p.Title] = true
		if p.Description == "" {
			t.Errorf("panel %q has no description", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || refs[tg.RefID] || tg.RefID == "" {
				t.Errorf("panel %q: empty query or missing/duplicate refId %q", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: query %s does not use the datasource variable", p.Title, tg.RefID)
			}
			if err := balanced(tg.Expr); err != nil {
				t.Errorf("panel %q: %s: %v", p.Title, tg.Expr, err)
			}
		}
	}
	for _, want := range []string{
		"Sessions active", "Tool calls by tool and outcome", "Tool latency p50", "Tool latency p99",
		"Session create latency", "Policy denials by rule", "Auth failures by reason", "Sandboxes reaped",
		"Sessions by state", "Suspends and archives", "Wake time p95", "Snapshot bytes", "Fork time p95",
	} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}

	known := exportedMetrics(t)
	queried := d.metricsQueried(known)
	for _, name := range queried {
		if !known[name] {
			t.Errorf("dashboard queries %s, which cws does not export", name)
		}
	}
	for _, want := range []string{
		"cws_sessions_active", "cws_tool_calls_total", "cws_tool_call_duration_seconds",
		"cws_session_create_duration_seconds", "cws_policy_denials_total",
		"cws_auth_failures_total", "cws_sandbox_reaped_total",
		"cws_sessions_by_state", "cws_sessions_suspends_total", "cws_sessions_archives_total",
		"cws_sessions_wake_duration_seconds", "cws_snapshot_bytes_total", "cws_sessions_fork_duration_seconds",
	} {
		if !slices.Contains(queried, want) {
			t.Errorf("dashboard does not show %s", want)
		}
	}
}

// balanced checks brackets and quotes of a PromQL expression: a cheap guard against
// the typos that make a panel show "parse error".
func balanced(expr string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inQuote := false
	for _, r := range expr {
		switch {
		case r == '"':
			inQuote = !inQuote
		case inQuote:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if inQuote || len(stack) > 0 {
		return fmt.Errorf("unclosed %q", stack)
	}
	return nil
}
