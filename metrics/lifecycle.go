package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// lifecycle is what an operator watches of sessions moving between ready, suspended
// and archived, and of the snapshot store (workspace.LifecycleObserver).
type lifecycle struct {
	byState       *prometheus.GaugeVec
	suspends      *prometheus.CounterVec
	archives      *prometheus.CounterVec
	wake          *prometheus.HistogramVec
	snapshotBytes *prometheus.CounterVec
	forkDuration  prometheus.Histogram
	forked        prometheus.Counter
	wakeFailures  *prometheus.CounterVec
}

// SessionStates are the states cws_sessions_by_state reports.
var SessionStates = []string{"creating", "ready", "suspended", "archived", "lost", "failed"}

func newLifecycle(f promauto.Factory) lifecycle {
	l := lifecycle{
		byState: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "by_state",
			Help: "Sessions in the store, by state (ready, suspended, archived, ...).",
		}, []string{"state"}),
		suspends: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "suspends_total",
			Help: "Sessions suspended, by reason (idle, explicit).",
		}, []string{"reason"}),
		archives: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "archives_total",
			Help: "Sessions moved into the snapshot store, by reason (idle, explicit).",
		}, []string{"reason"}),
		wake: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "wake_duration_seconds",
			Help:    "Time to wake a session (its sandbox started, or made and restored), by the state it woke from.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
		}, []string{"from"}),
		snapshotBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "snapshot", Name: "bytes_total",
			Help: "Snapshot bytes, by kind (snapshot, archive) and what: taken (the workspace's file contents) or stored (written to the store, compressed, after deduplication).",
		}, []string{"kind", "what"}),
		forkDuration: f.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "fork_duration_seconds",
			Help:    "Time to fork a session into its new sessions, all of them.",
			Buckets: []float64{.25, .5, 1, 2, 4, 8, 15, 30, 60},
		}),
		forked: f.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "forked_total",
			Help: "Sessions made by forks.",
		}),
		wakeFailures: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "sessions", Name: "wake_failures_total",
			Help: "Wakes that failed, by the state the session stays in (suspended, archived) and the stage: sandbox (made or started), store (the snapshot store did not answer), restore (the archive's files could not be written back).",
		}, []string{"from", "stage"}),
	}
	for _, s := range SessionStates {
		l.byState.WithLabelValues(s)
	}
	for _, r := range []string{"idle", "explicit"} {
		l.suspends.WithLabelValues(r)
		l.archives.WithLabelValues(r)
	}
	for _, f := range []string{"suspended", "archived"} {
		l.wake.WithLabelValues(f)
	}
	for _, st := range []string{"sandbox", "store", "restore"} {
		l.wakeFailures.WithLabelValues("archived", st)
	}
	for _, k := range []string{"snapshot", "archive"} {
		for _, w := range []string{"taken", "stored"} {
			l.snapshotBytes.WithLabelValues(k, w)
		}
	}
	return l
}

// SessionsByState sets the sessions-by-state gauge; states not in counts are 0.
func (m *Metrics) SessionsByState(counts map[string]int) {
	if m == nil {
		return
	}
	for _, s := range SessionStates {
		m.life.byState.WithLabelValues(s).Set(float64(counts[s]))
	}
}

// Suspended counts a suspend.
func (m *Metrics) Suspended(reason string) {
	if m != nil {
		m.life.suspends.WithLabelValues(reason).Inc()
	}
}

// Archived counts an archive.
func (m *Metrics) Archived(reason string) {
	if m != nil {
		m.life.archives.WithLabelValues(reason).Inc()
	}
}

// Woke measures a wake.
func (m *Metrics) Woke(from string, d time.Duration) {
	if m != nil {
		m.life.wake.WithLabelValues(from).Observe(d.Seconds())
	}
}

// SnapshotWritten counts a snapshot's bytes.
func (m *Metrics) SnapshotWritten(kind string, bytes, stored int64) {
	if m == nil {
		return
	}
	m.life.snapshotBytes.WithLabelValues(kind, "taken").Add(float64(bytes))
	m.life.snapshotBytes.WithLabelValues(kind, "stored").Add(float64(stored))
}

// Forked measures a fork.
func (m *Metrics) Forked(count int, d time.Duration) {
	if m == nil {
		return
	}
	m.life.forkDuration.Observe(d.Seconds())
	m.life.forked.Add(float64(count))
}

// WakeFailed counts a wake that failed, by the state the session stays in and the stage
// that failed.
func (m *Metrics) WakeFailed(from, stage string) {
	if m != nil {
		m.life.wakeFailures.WithLabelValues(from, stage).Inc()
	}
}
