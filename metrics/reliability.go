package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// reliability holds what an operator watches when something breaks: the store's
// health, sandboxes started again and sessions re-adopted, and failed MCP calls.
type reliability struct {
	storeUp       prometheus.Gauge
	storeFailures *prometheus.CounterVec
	restarted     *prometheus.CounterVec
	healed        *prometheus.CounterVec
	adopted       prometheus.Counter
	mcpFailures   *prometheus.CounterVec
}

// How a sandbox whose agent stopped answering was healed, for Healed.
const (
	HealAgent     = "agent"     // the agent was restarted in place
	HealContainer = "container" // the container was restarted, its workspace volume kept
	HealFailed    = "failed"    // neither brought the agent back
)

// Store failure kinds for StoreFailure.
const (
	StoreTimeout = "timeout" // the operation hit its deadline (a frozen or overloaded store)
	StoreError   = "error"   // the store answered with an error or could not be reached
)

func newReliability(f promauto.Factory) reliability {
	r := reliability{
		storeUp: f.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "store", Name: "up",
			Help: "1 when the session store answered its last operation (or readiness probe) in time, else 0.",
		}),
		storeFailures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "store", Name: "failures_total",
			Help: "Session store operations that failed, by kind (timeout, error).",
		}, []string{"kind"}),
		restarted: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "sandbox", Name: "restarted_total",
			Help: "Stopped sandboxes of live sessions started again, by who noticed (call, reconcile).",
		}, []string{"by"}),
		healed: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "sandbox", Name: "healed_total",
			Help: "Sandboxes whose agent stopped answering, by how they were brought back: agent (the agent restarted), container (the container restarted, its workspace volume kept), failed (neither worked).",
		}, []string{"how"}),
		adopted: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "adopted_total",
			Help: "Sessions re-adopted from their containers' labels after the store lost them.",
		}),
		mcpFailures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "mcp", Name: "call_failures_total",
			Help: "MCP tool calls answered with a JSON-RPC error, by code.",
		}, []string{"code"}),
	}
	r.storeUp.Set(1)
	for _, k := range []string{StoreTimeout, StoreError} {
		r.storeFailures.WithLabelValues(k)
	}
	for _, by := range []string{"call", "reconcile"} {
		r.restarted.WithLabelValues(by)
	}
	for _, how := range []string{HealAgent, HealContainer, HealFailed} {
		r.healed.WithLabelValues(how)
	}
	for _, c := range []string{"-32001", "-32002", "-32003", "-32004", "-32005", "-32602", "-32603"} {
		r.mcpFailures.WithLabelValues(c)
	}
	return r
}

// StoreHealth records whether the store answered in time.
func (m *Metrics) StoreHealth(up bool) {
	if m == nil {
		return
	}
	if up {
		m.rel.storeUp.Set(1)
	} else {
		m.rel.storeUp.Set(0)
	}
}

// StoreFailure counts one failed store operation (StoreTimeout or StoreError).
func (m *Metrics) StoreFailure(kind string) {
	if m != nil {
		m.rel.storeFailures.WithLabelValues(kind).Inc()
	}
}

// Restarted counts a stopped sandbox started again; by is "call" or "reconcile".
func (m *Metrics) Restarted(by string) {
	if m != nil {
		m.rel.restarted.WithLabelValues(by).Inc()
	}
}

// Healed counts a sandbox whose agent stopped answering and was healed; how is
// HealAgent, HealContainer or HealFailed.
func (m *Metrics) Healed(how string) {
	if m != nil {
		m.rel.healed.WithLabelValues(how).Inc()
	}
}

// Adopted counts a session re-adopted from its container's labels.
func (m *Metrics) Adopted() {
	if m != nil {
		m.rel.adopted.Inc()
	}
}

// MCPCallFailed counts an MCP tool call answered with JSON-RPC error code.
func (m *Metrics) MCPCallFailed(code string) {
	if m != nil {
		m.rel.mcpFailures.WithLabelValues(code).Inc()
	}
}
