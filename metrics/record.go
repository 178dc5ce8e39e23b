package metrics

import "time"

// ToolCall records one tool call. tool must be a catalogue name and outcome one of a
// fixed set, never a client's string: both become label values.
func (m *Metrics) ToolCall(tool, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.toolCall(tool, outcome).Inc()
	m.toolDurationOf(tool).Observe(d.Seconds())
}

// PolicyDenial records a call denied by the named policy rule (e.g. "deniedPaths").
func (m *Metrics) PolicyDenial(rule string) {
	if m == nil {
		return
	}
	m.denials.WithLabelValues(rule).Inc()
}

// AuthFailure records rejected credentials; reason is one of auth's fixed reasons.
func (m *Metrics) AuthFailure(reason string) {
	if m == nil {
		return
	}
	m.authFailures.WithLabelValues(reason).Inc()
}

// SessionCreated records how long a session took to create. It does not change
// cws_sessions_active.
func (m *Metrics) SessionCreated(d time.Duration) {
	if m == nil {
		return
	}
	m.createSeconds.Observe(d.Seconds())
}

// SessionsActive sets cws_sessions_active to n (after a count, e.g. at reconcile).
func (m *Metrics) SessionsActive(n int) {
	if m == nil {
		return
	}
	m.sessions.Set(float64(n))
}

// SessionsActiveInc adds one to cws_sessions_active.
func (m *Metrics) SessionsActiveInc() {
	if m == nil {
		return
	}
	m.sessions.Inc()
}

// SessionsActiveDec takes one from cws_sessions_active.
func (m *Metrics) SessionsActiveDec() {
	if m == nil {
		return
	}
	m.sessions.Dec()
}

// Reaped records a sandbox removed by the reaper; reason is ReapExpired or ReapOrphan.
func (m *Metrics) Reaped(reason string) {
	if m == nil {
		return
	}
	m.reaped.WithLabelValues(reason).Inc()
}

// ExecUnenforced records a command started under an allowedCommands policy in a sandbox
// without Landlock: it ran, but the kernel did not hold it to the allowlist.
func (m *Metrics) ExecUnenforced() {
	if m == nil {
		return
	}
	m.unenforced.Inc()
}
