package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cwsdev/cws/metrics"
)

func newMetrics(t *testing.T) (*metrics.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return metrics.New(reg, metrics.BuildInfo{Version: "1.2.3", Commit: "abc123"}), reg
}

// series returns the value of the one series of name whose labels include want, and
// whether there is one.
func series(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func TestBuildInfo(t *testing.T) {
	_, reg := newMetrics(t)
	v, ok := series(t, reg, "cws_build_info", map[string]string{"version": "1.2.3", "commit": "abc123"})
	if !ok || v != 1 {
		t.Fatalf("cws_build_info = %v, %v; want 1", v, ok)
	}
	if _, ok := series(t, reg, "go_goroutines", nil); !ok {
		t.Error("Go collector not registered")
	}
}

func TestNewOnDefaultLikeRegistry(t *testing.T) {
	// A registry that already has the Go and process collectors, like the default one.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics.New(reg, metrics.BuildInfo{})
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	metrics.New(nil, metrics.BuildInfo{}) // nil registers nothing and doesn't panic
}

func TestInitExportsZeros(t *testing.T) {
	m, reg := newMetrics(t)
	m.Init([]string{"readFile", "runCommand"}, []string{"ok", "error"}, []string{"deniedPaths"}, []string{"expired", "bad_signature"})
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"cws_tool_calls_total", map[string]string{"tool": "readFile", "outcome": "ok"}},
		{"cws_tool_calls_total", map[string]string{"tool": "runCommand", "outcome": "error"}},
		{"cws_tool_call_duration_seconds", map[string]string{"tool": "runCommand"}},
		{"cws_policy_denials_total", map[string]string{"rule": "deniedPaths"}},
		{"cws_auth_failures_total", map[string]string{"reason": "bad_signature"}},
		{"cws_sandbox_reaped_total", map[string]string{"reason": "expired"}},
		{"cws_sandbox_reaped_total", map[string]string{"reason": "orphan"}},
		{"cws_sessions_active", nil},
	} {
		v, ok := series(t, reg, c.name, c.labels)
		if !ok || v != 0 {
			t.Errorf("%s%v = %v (exists %v), want 0", c.name, c.labels, v, ok)
		}
	}
	if n := testutil.CollectAndCount(reg, "cws_tool_calls_total"); n != 4 {
		t.Errorf("cws_tool_calls_total has %d series, want 2 tools × 2 outcomes", n)
	}
}

func TestRecorders(t *testing.T) {
	m, reg := newMetrics(t)
	m.ToolCall("readFile", "ok", 300*time.Microsecond)
	m.ToolCall("readFile", "ok", 2*time.Minute)
	m.ToolCall("readFile", "denied", time.Millisecond)
	m.PolicyDenial("deniedPaths")
	m.AuthFailure("expired")
	m.AuthFailure("expired")
	m.SessionCreated(1500 * time.Millisecond)
	m.SessionsActive(7)
	m.SessionsActiveInc()
	m.SessionsActiveDec()
	m.SessionsActiveDec()
	m.Reaped(metrics.ReapOrphan)

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cws_tool_calls_total", map[string]string{"tool": "readFile", "outcome": "ok"}, 2},
		{"cws_tool_calls_total", map[string]string{"tool": "readFile", "outcome": "denied"}, 1},
		{"cws_tool_call_duration_seconds", map[string]string{"tool": "readFile"}, 3},
		{"cws_policy_denials_total", map[string]string{"rule": "deniedPaths"}, 1},
		{"cws_auth_failures_total", map[string]string{"reason": "expired"}, 2},
		{"cws_session_create_duration_seconds", nil, 1},
		{"cws_sessions_active", nil, 6},
		{"cws_sandbox_reaped_total", map[string]string{"reason": "orphan"}, 1},
		{"cws_sandbox_reaped_total", map[string]string{"reason": "expired"}, 0},
	} {
		if v, ok := series(t, reg, c.name, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (exists %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestNilMetrics(t *testing.T) {
	var m *metrics.Metrics
	m.Init([]string{"a"}, []string{"ok"}, nil, nil)
	m.ToolCall("a", "ok", time.Second)
	m.PolicyDenial("r")
	m.AuthFailure("r")
	m.SessionCreated(time.Second)
	m.SessionsActive(1)
	m.SessionsActiveInc()
	m.SessionsActiveDec()
	m.Reaped(metrics.ReapExpired)
	r := gin.New()
	r.Use(m.GinMiddleware())
	r.GET("/x", func(c *gin.Context) { c.Status(http.StatusNoContent) })
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil))
	if w.Code != http.StatusNoContent {
		t.Fatalf("status %d through a nil Metrics' middleware", w.Code)
	}
}

func TestGinMiddlewareUsesRoutePattern(t *testing.T) {
	gin.SetMode(gin.TestMode)
	m, reg := newMetrics(t)
	r := gin.New()
	r.Use(m.GinMiddleware())
	r.GET("/v1/sessions/:id", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"id": c.Param("id")}) })
	r.DELETE("/v1/sessions/:id", func(c *gin.Context) { c.AbortWithStatus(http.StatusNotFound) })

	for _, req := range []struct{ method, path string }{
		{http.MethodGet, "/v1/sessions/abc"},
		{http.MethodGet, "/v1/sessions/def"},
		{http.MethodDelete, "/v1/sessions/abc"},
		{http.MethodGet, "/nope/secret-id"},
		{"BREW", "/v1/sessions/abc"},
	} {
		r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(req.method, req.path, nil))
	}

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cws_http_requests_total", map[string]string{"route": "/v1/sessions/:id", "method": "GET", "code": "200"}, 2},
		{"cws_http_requests_total", map[string]string{"route": "/v1/sessions/:id", "method": "DELETE", "code": "404"}, 1},
		{"cws_http_requests_total", map[string]string{"route": "unmatched", "method": "GET", "code": "404"}, 1},
		{"cws_http_requests_total", map[string]string{"route": "unmatched", "method": "OTHER"}, 1},
		{"cws_http_request_duration_seconds", map[string]string{"route": "/v1/sessions/:id", "method": "GET"}, 2},
	} {
		if v, ok := series(t, reg, c.name, c.labels); !ok || v != c.want {
			t.Errorf("%s%v = %v (exists %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	// No raw path or id anywhere in the exposition.
	w := httptest.NewRecorder()
	metrics.Handler(reg).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := w.Body.String()
	for _, leak := range []string{"/v1/sessions/abc", "secret-id", `"BREW"`} {
		if strings.Contains(body, leak) {
			t.Errorf("exposition contains %q", leak)
		}
	}
	if !strings.Contains(body, `cws_http_requests_total{code="200",method="GET",route="/v1/sessions/:id"} 2`) {
		t.Errorf("exposition lacks the route-pattern series:\n%s", body)
	}
}

// TestCachedChildrenConcurrent: the per-request series are cached by label values;
// concurrent first uses must land on one series.
func TestCachedChildrenConcurrent(t *testing.T) {
	m, reg := newMetrics(t)
	r := gin.New()
	r.Use(m.GinMiddleware())
	r.GET("/x", func(c *gin.Context) { c.Status(http.StatusTeapot) })
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 500 {
				m.ToolCall("readFile", "ok", time.Millisecond)
				r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil))
			}
		}()
	}
	for range 8 {
		<-done
	}
	if v, _ := series(t, reg, "cws_tool_calls_total", map[string]string{"tool": "readFile", "outcome": "ok"}); v != 4000 {
		t.Errorf("cws_tool_calls_total = %v, want 4000", v)
	}
	if v, _ := series(t, reg, "cws_tool_call_duration_seconds", map[string]string{"tool": "readFile"}); v != 4000 {
		t.Errorf("cws_tool_call_duration_seconds count = %v, want 4000", v)
	}
	if v, _ := series(t, reg, "cws_http_requests_total", map[string]string{"route": "/x", "method": "GET", "code": "418"}); v != 4000 {
		t.Errorf("cws_http_requests_total = %v, want 4000", v)
	}
	if v, _ := series(t, reg, "cws_http_request_duration_seconds", map[string]string{"route": "/x", "method": "GET"}); v != 4000 {
		t.Errorf("cws_http_request_duration_seconds count = %v, want 4000", v)
	}
}
