package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// network counts the workspaces' network edges (workspace.NetObserver): egress
// connections through the proxy (direction out) and preview connections into a port
// (direction in). Tenants are bounded by the tenants file.
type network struct {
	egressConns, egressBytes   *prometheus.CounterVec
	previewConns, previewBytes *prometheus.CounterVec
	secrets                    *prometheus.CounterVec
}

func newNetwork(f promauto.Factory) network {
	return network{
		egressConns: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "egress", Name: "connections_total",
			Help: "Connections workspaces made through their egress proxy, by tenant and decision (allowed, denied, failed).",
		}, []string{"tenant", "decision"}),
		egressBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "egress", Name: "bytes_total",
			Help: "Bytes through the egress proxy, by tenant and direction (out: sent by the workspace; in: received).",
		}, []string{"tenant", "direction"}),
		previewConns: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "preview", Name: "connections_total",
			Help: "Connections into workspace ports (preview URLs, port-forward), by tenant and decision.",
		}, []string{"tenant", "decision"}),
		previewBytes: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "preview", Name: "bytes_total",
			Help: "Bytes through preview connections, by tenant and direction (out: sent by the workspace; in: received).",
		}, []string{"tenant", "direction"}),
		secrets: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "egress", Name: "secrets_total",
			Help: "Secrets the egress proxy put into a connection's requests (outcome injected) or refused to send (refused), by tenant and secret name (\"\": a placeholder not of the session).",
		}, []string{"tenant", "secret", "outcome"}),
	}
}

// SecretUse counts a secret put in or refused (workspace.SecretObserver).
func (m *Metrics) SecretUse(tenant, secret, outcome string) {
	m.net.secrets.WithLabelValues(tenant, secret, outcome).Inc()
}

// NetConn counts one network-edge connection (workspace.NetObserver); direction is
// "out" (egress) or "in" (preview).
func (m *Metrics) NetConn(tenant, direction, decision string, out, in int64) {
	conns, bytes := m.net.egressConns, m.net.egressBytes
	if direction == "in" {
		conns, bytes = m.net.previewConns, m.net.previewBytes
	}
	conns.WithLabelValues(tenant, decision).Inc()
	if out > 0 {
		bytes.WithLabelValues(tenant, "out").Add(float64(out))
	}
	if in > 0 {
		bytes.WithLabelValues(tenant, "in").Add(float64(in))
	}
}

// usage is what sessions use, by tenant (workspace.UsageObserver).
type usage struct {
	cpu       *prometheus.CounterVec
	mem, disk *prometheus.GaugeVec
}

func newUsage(f promauto.Factory) usage {
	return usage{
		cpu: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "session", Name: "cpu_seconds_total",
			Help: "CPU time the tenant's sandboxes used, as sampled from the engine.",
		}, []string{"tenant"}),
		mem: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "session", Name: "memory_bytes",
			Help: "Memory the tenant's running sandboxes use now, summed.",
		}, []string{"tenant"}),
		disk: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "session", Name: "disk_bytes",
			Help: "Bytes in the tenant's workspaces (running ones, as last walked), summed.",
		}, []string{"tenant"}),
	}
}

// TenantUsage records one usage collection of a tenant (workspace.UsageObserver).
func (m *Metrics) TenantUsage(tenant string, cpuSeconds float64, memoryBytes, diskBytes int64) {
	m.use.cpu.WithLabelValues(tenant).Add(max(cpuSeconds, 0)) // exported at 0 from the first collection
	m.use.mem.WithLabelValues(tenant).Set(float64(memoryBytes))
	m.use.disk.WithLabelValues(tenant).Set(float64(diskBytes))
}
