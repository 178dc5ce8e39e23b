// Package metrics defines cws's Prometheus metrics and the small API the rest of cws
// records them through. Names live in the cws namespace, in base units; counters end
// in _total; labels are bounded (tool, outcome, route pattern, rule, reason; never ids
// or raw paths). It depends on nothing of ours.
//
// All methods are safe on a nil *Metrics, where they do nothing, so packages can take
// metrics as an optional dependency.
package metrics

import (
	"net/http"
	"runtime"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "cws"

// BuildInfo identifies the running build in cws_build_info.
type BuildInfo struct {
	Version string // release, e.g. "0.1.0"
	Commit  string // git commit, "unknown" when not set at link time
}

// Metrics holds cws's metrics, registered on one Registerer.
type Metrics struct {
	httpRequests  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
	toolCalls     *prometheus.CounterVec
	toolDuration  *prometheus.HistogramVec
	sessions      prometheus.Gauge
	createSeconds prometheus.Histogram
	denials       *prometheus.CounterVec
	authFailures  *prometheus.CounterVec
	reaped        *prometheus.CounterVec
	rel           reliability // reliability.go
	life          lifecycle   // lifecycle.go
	net           network     // network.go
	use           usage       // network.go
	term          terminals   // terminal.go
	unenforced    prometheus.Counter

	// The children of the per-request vectors, by label values (labels.go): a lookup
	// in a sync.Map instead of hashing the values on every request.
	httpReqChildren, httpDurChildren, toolCallChildren, toolDurChildren sync.Map
}

// Reap reasons for Reaped.
const (
	ReapExpired = "expired" // the session passed its deadline
	ReapOrphan  = "orphan"  // a managed container without a session
	ReapLost    = "lost"    // a session whose container was removed behind cws's back
	// ReapOrphanVolume: a workspace volume left by a container removed behind cws's back.
	ReapOrphanVolume = "orphan_volume"
)

// New registers cws's metrics on reg and returns them. It also registers the Go and
// process collectors unless reg has them already. A nil reg registers nothing (tests).
// It panics if cws's own metrics are already registered on reg, like promauto.
func New(reg prometheus.Registerer, build BuildInfo) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		httpRequests: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests served, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		httpDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time to serve an HTTP request (whole stream for streamed ones), by route pattern and method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "method"}),
		toolCalls: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "tool", Name: "calls_total",
			Help: "Tool calls, by tool and outcome (ok, error, denied, invalid, ...).",
		}, []string{"tool", "outcome"}),
		toolDuration: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "tool", Name: "call_duration_seconds",
			Help: "Time to run a tool call, by tool.",
			// 100 µs (a cached read) … 5 min (a long build or test run).
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"tool"}),
		sessions: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "active",
			Help: "Sessions that exist now.",
		}),
		createSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "session", Name: "create_duration_seconds",
			Help:    "Time to create a session, sandbox included.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120},
		}),
		denials: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "policy", Name: "denials_total",
			Help: "Tool calls denied by policy, by rule.",
		}, []string{"rule"}),
		authFailures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "auth", Name: "failures_total",
			Help: "Rejected credentials, by reason.",
		}, []string{"reason"}),
		reaped: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "sandbox", Name: "reaped_total",
			Help: "Sandboxes removed by the reaper, by reason (expired, orphan).",
		}, []string{"reason"}),
		unenforced: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "exec", Name: "unenforced_total",
			Help: "Commands started with an allowedCommands policy the sandbox could not enforce with Landlock (they ran unenforced).",
		}),
	}
	f.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help:        "Always 1; the labels identify the build.",
		ConstLabels: prometheus.Labels{"version": build.Version, "commit": build.Commit, "goversion": runtime.Version()},
	}).Set(1)
	m.rel = newReliability(f)
	m.life = newLifecycle(f)
	m.net = newNetwork(f)
	m.use = newUsage(f)
	m.term = newTerminals(f)
	for _, reason := range []string{ReapExpired, ReapOrphan, ReapLost, ReapOrphanVolume} {
		m.reaped.WithLabelValues(reason)
	}
	if reg != nil {
		registerOnce(reg, collectors.NewGoCollector())
		registerOnce(reg, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// registerOnce registers c unless reg has it already (as prometheus.DefaultRegisterer
// does). These collectors are a convenience: a registry that holds a differently
// configured one keeps its own, so the error is dropped rather than failing startup.
func registerOnce(reg prometheus.Registerer, c prometheus.Collector) {
	_ = reg.Register(c)
}

// Init exports the known label combinations at 0, so dashboards and rate() see the
// series before the first event: every tool × outcome (and each tool's duration),
// every denial rule and every auth failure reason.
func (m *Metrics) Init(tools, outcomes, denialRules, authReasons []string) {
	if m == nil {
		return
	}
	for _, tool := range tools {
		m.toolDuration.WithLabelValues(tool)
		for _, outcome := range outcomes {
			m.toolCalls.WithLabelValues(tool, outcome)
		}
	}
	for _, rule := range denialRules {
		m.denials.WithLabelValues(rule)
	}
	for _, reason := range authReasons {
		m.authFailures.WithLabelValues(reason)
	}
}

// Handler serves g's metrics in the Prometheus (or, when asked, OpenMetrics) text
// format.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
}
