package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// terminals counts the interactive terminals (workspace.TerminalObserver), by tenant:
// the running ones as last seen, the attaches, the bytes through them, and the times a
// viewer too slow to keep up skipped output.
type terminals struct {
	running         *prometheus.GaugeVec
	attaches, skips *prometheus.CounterVec
	bytes           *prometheus.CounterVec
}

func newTerminals(f promauto.Factory) terminals {
	return terminals{
		running: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "terminal", Name: "open",
			Help: "Terminals running in the tenant's sessions, as cws last saw them (an open, a close, a list, an attach's end, a suspend).",
		}, []string{"tenant"}),
		attaches: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "terminal", Name: "attaches_total",
			Help: "Viewers attached to terminals (the WebSocket), by tenant.",
		}, []string{"tenant"}),
		skips: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "terminal", Name: "viewer_skips_total",
			Help: "Times a viewer too slow to keep up with a terminal's output skipped what it had not been sent, by tenant.",
		}, []string{"tenant"}),
		bytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "terminal", Name: "bytes_total",
			Help: "Bytes through attached viewers, by tenant and direction (out: the terminal's output sent; in: typed).",
		}, []string{"tenant", "direction"}),
	}
}

// TerminalsRunning sets the tenant's running terminals (workspace.TerminalObserver).
func (m *Metrics) TerminalsRunning(tenant string, n int) {
	m.term.running.WithLabelValues(tenant).Set(float64(n))
}

// TerminalAttach counts a viewer's attach.
func (m *Metrics) TerminalAttach(tenant string) {
	m.term.attaches.WithLabelValues(tenant).Inc()
	m.term.skips.WithLabelValues(tenant) // exported at 0
}

// TerminalBytes counts bytes through a viewer; direction is "out" or "in".
func (m *Metrics) TerminalBytes(tenant, direction string, n int64) {
	m.term.bytes.WithLabelValues(tenant, direction).Add(float64(max(n, 0)))
}

// TerminalSkipped counts a slow viewer's skip.
func (m *Metrics) TerminalSkipped(tenant string) {
	m.term.skips.WithLabelValues(tenant).Inc()
}
