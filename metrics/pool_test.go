package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cwsdev/cws/metrics"
)

func TestPool(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := metrics.NewPool(reg, []string{"img:1"}, []string{"no_pool", "empty"})
	for _, c := range []struct {
		name   string
		labels map[string]string
	}{
		{"cws_pool_ready", map[string]string{"image": "img:1"}},
		{"cws_pool_hits_total", map[string]string{"image": "img:1"}},
		{"cws_pool_misses_total", map[string]string{"image": "img:1", "reason": "empty"}},
		{"cws_pool_misses_total", map[string]string{"image": "none", "reason": "no_pool"}},
		{"cws_pool_fill_failures_total", map[string]string{"image": "img:1"}},
	} {
		if v, ok := series(t, reg, c.name, c.labels); !ok || v != 0 {
			t.Errorf("%s%v = %v, %v; want exported at 0", c.name, c.labels, v, ok)
		}
	}
	p.PoolReady("img:1", 3)
	p.PoolHit("img:1")
	p.PoolMiss("", "no_pool")
	p.PoolMiss("img:1", "empty")
	p.PoolFillFailed("img:1")
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"cws_pool_ready", map[string]string{"image": "img:1"}, 3},
		{"cws_pool_hits_total", map[string]string{"image": "img:1"}, 1},
		{"cws_pool_misses_total", map[string]string{"image": "none", "reason": "no_pool"}, 1},
		{"cws_pool_misses_total", map[string]string{"image": "img:1", "reason": "empty"}, 1},
		{"cws_pool_fill_failures_total", map[string]string{"image": "img:1"}, 1},
	} {
		if v, _ := series(t, reg, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	var nilPool *metrics.Pool
	nilPool.PoolHit("img:1") // safe on nil
}
