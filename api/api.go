// Package api is cws's HTTP surface: the REST API (/v1), MCP (/mcp, via api/mcp),
// health, metrics and the OpenAPI document. Handlers are thin: they decode, call
// workspace.Service and encode; errors map to HTTP in one table (errors.go).
package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/metrics"
	"github.com/cwsdev/cws/workspace"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures the router.
type Config struct {
	Service  *workspace.Service
	Verifier *auth.Verifier
	MCP      *mcp.Handler
	Metrics  *metrics.Metrics            // nil: no HTTP metrics
	Gatherer prometheus.Gatherer         // served at /metrics; nil: the default registry
	Ready    func(context.Context) error // readiness of Docker and the store
	Log      *slog.Logger
	// PublicURL is the base URL clients use (e.g. https://cws.example); it names the
	// MCP URLs in responses and the RFC 9728 resource.
	PublicURL string
	// Issuers are advertised as authorization_servers in the RFC 9728 metadata.
	Issuers []string
	// PreviewDomain, when set, makes preview links host-based:
	// {port}-{session}.{PreviewDomain} (a wildcard DNS name pointing at cws).
	PreviewDomain string
}

// Server is the HTTP handler with its drain switch.
type Server struct {
	cfg      Config
	log      *slog.Logger
	engine   *gin.Engine
	draining atomic.Bool
	previews *previews // ports.go
	attaches attachSet // terminals.go: the attached viewers, closed by Drain
}

// New builds the router.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.DefaultGatherer
	}
	gin.SetMode(gin.ReleaseMode)
	s := &Server{cfg: cfg, log: cfg.Log.With("component", "api")}
	s.cfg.PreviewDomain = strings.Trim(strings.ToLower(cfg.PreviewDomain), ".")
	s.previews = newPreviews(cfg.Service)
	e := gin.New()
	e.ContextWithFallback = true
	e.HandleMethodNotAllowed = true
	// An escaped slash stays inside its path segment (an id of "../x" reaches its
	// handler, which refuses it by name, instead of routing elsewhere).
	e.UseRawPath, e.UnescapePathValues = true, true
	e.Use(gin.Recovery())
	if cfg.Metrics != nil {
		e.Use(cfg.Metrics.GinMiddleware())
	}
	e.NoRoute(func(c *gin.Context) {
		c.AbortWithStatusJSON(http.StatusNotFound, ErrorBody{Error: ErrorDetail{Code: "not_found", Message: "no such route: see /openapi.json"}})
	})
	e.NoMethod(func(c *gin.Context) {
		c.AbortWithStatusJSON(http.StatusMethodNotAllowed, ErrorBody{Error: ErrorDetail{Code: "method_not_allowed", Message: "method not allowed: see /openapi.json"}})
	})
	authed := cfg.Verifier.Middleware(auth.MiddlewareOptions{
		ResourceMetadataURL: auth.MetadataURL(cfg.PublicURL),
		OnFailure: func(reason string) {
			if cfg.Metrics != nil {
				cfg.Metrics.AuthFailure(reason)
			}
		},
	})
	for _, r := range s.routes() {
		hs := []gin.HandlerFunc{}
		if r.wsToken {
			hs = append(hs, wsBearer)
		}
		if r.auth {
			hs = append(hs, authed)
		}
		hs = append(hs, r.handler)
		for _, m := range r.methods() {
			e.Handle(m, r.path, hs...)
		}
	}
	s.engine = e
	return s
}

// ServeHTTP serves a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.previewHost(w, r) {
		return
	}
	s.engine.ServeHTTP(w, r)
}

// Drain makes /readyz answer 503 so load balancers stop sending traffic, and closes the
// terminals' attached viewers ("going away": they attach again elsewhere; the terminals
// live on in their sandboxes), which would otherwise hold the shutdown for its grace.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.attaches.closeAll()
}

// Routes lists the registered method+path pairs (for tests and the OpenAPI check).
func (s *Server) Routes() gin.RoutesInfo { return s.engine.Routes() }

func caller(c *gin.Context) workspace.Caller {
	return workspace.CallerOf(auth.PrincipalFrom(c.Request.Context()))
}
