package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Pool holds the warm pool's metrics (sandbox/docker's PoolObserver). Images are the
// configured pool images; a miss for an image that has no pool is counted under
// image="none".
type Pool struct {
	ready       *prometheus.GaugeVec
	hits        *prometheus.CounterVec
	misses      *prometheus.CounterVec
	fillFailure *prometheus.CounterVec
}

// NewPool registers the pool's metrics on reg, with every image and miss reason given
// exported at 0.
func NewPool(reg prometheus.Registerer, images, missReasons []string) *Pool {
	f := promauto.With(reg)
	p := &Pool{
		ready: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "pool", Name: "ready",
			Help: "Started, agent-ready pooled containers waiting for a session, by image.",
		}, []string{"image"}),
		hits: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "pool", Name: "hits_total",
			Help: "Session creates served by a pooled container, by image.",
		}, []string{"image"}),
		misses: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "pool", Name: "misses_total",
			Help: "Session creates that went cold, by image and reason (no_pool, empty, class, bind).",
		}, []string{"image", "reason"}),
		fillFailure: f.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "pool", Name: "fill_failures_total",
			Help: "Pooled containers that could not be made (create, start or first ping failed), by image.",
		}, []string{"image"}),
	}
	for _, img := range images {
		p.ready.WithLabelValues(img)
		p.hits.WithLabelValues(img)
		p.fillFailure.WithLabelValues(img)
		for _, r := range missReasons {
			p.misses.WithLabelValues(img, r)
		}
	}
	for _, r := range missReasons {
		p.misses.WithLabelValues("none", r)
	}
	return p
}

// PoolReady sets how many pooled containers of image are ready.
func (p *Pool) PoolReady(image string, n int) {
	if p != nil {
		p.ready.WithLabelValues(image).Set(float64(n))
	}
}

// PoolHit counts a create served from image's pool.
func (p *Pool) PoolHit(image string) {
	if p != nil {
		p.hits.WithLabelValues(image).Inc()
	}
}

// PoolMiss counts a create that went cold; image is "" when it has no pool.
func (p *Pool) PoolMiss(image, reason string) {
	if p == nil {
		return
	}
	if image == "" {
		image = "none"
	}
	p.misses.WithLabelValues(image, reason).Inc()
}

// PoolFillFailed counts a pooled container of image that could not be made.
func (p *Pool) PoolFillFailed(image string) {
	if p != nil {
		p.fillFailure.WithLabelValues(image).Inc()
	}
}
