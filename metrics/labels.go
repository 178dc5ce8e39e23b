package metrics

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics every request and tool call records are looked up by label values in a
// cache of their children: WithLabelValues hashes the values and takes the vector's
// lock each time. Label values stay bounded as before (route patterns, methods, status
// codes, catalogue tools, fixed outcomes), so the caches are too; no vector here is
// ever Reset or has children deleted, which would leave a cached child unexported.

type httpReqKey struct {
	route, method string
	code          int
}

type routeKey struct{ route, method string }

type toolKey struct{ tool, outcome string }

// child returns cache's entry for key, making it with mk on first use.
func child[K comparable, M any](cache *sync.Map, key K, mk func() M) M {
	if v, ok := cache.Load(key); ok {
		return v.(M)
	}
	v, _ := cache.LoadOrStore(key, mk())
	return v.(M)
}

func (m *Metrics) httpRequest(route, method string, code int) prometheus.Counter {
	return child(&m.httpReqChildren, httpReqKey{route, method, code}, func() prometheus.Counter {
		return m.httpRequests.WithLabelValues(route, method, strconv.Itoa(code))
	})
}

func (m *Metrics) httpDurationOf(route, method string) prometheus.Observer {
	return child(&m.httpDurChildren, routeKey{route, method}, func() prometheus.Observer {
		return m.httpDuration.WithLabelValues(route, method)
	})
}

func (m *Metrics) toolCall(tool, outcome string) prometheus.Counter {
	return child(&m.toolCallChildren, toolKey{tool, outcome}, func() prometheus.Counter {
		return m.toolCalls.WithLabelValues(tool, outcome)
	})
}

func (m *Metrics) toolDurationOf(tool string) prometheus.Observer {
	return child(&m.toolDurChildren, tool, func() prometheus.Observer {
		return m.toolDuration.WithLabelValues(tool)
	})
}
