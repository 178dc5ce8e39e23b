package metrics

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// Unmatched is the route label of requests that matched no route.
const Unmatched = "unmatched"

// GinMiddleware counts and times every request by route pattern (c.FullPath, e.g.
// "/v1/sessions/:id"; never the raw path), method and status code. Put it first, so it
// also sees requests that auth rejects.
func (m *Metrics) GinMiddleware() gin.HandlerFunc {
	if m == nil {
		return func(c *gin.Context) { c.Next() }
	}
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = Unmatched
		}
		method := methodLabel(c.Request.Method)
		m.httpRequest(route, method, c.Writer.Status()).Inc()
		m.httpDurationOf(route, method).Observe(time.Since(start).Seconds())
	}
}

// methodLabel keeps the method label bounded: clients may send any token.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "OTHER"
}
