package api

import (
	"context"
	"net/http"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (s *Server) healthz(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) }

func (s *Server) readyz(c *gin.Context) {
	if s.draining.Load() {
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "draining"})
		return
	}
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(c.Request.Context(), 3*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unready", "reason": err.Error()})
			return
		}
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready"})
}

func (s *Server) metrics(c *gin.Context) {
	promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}).ServeHTTP(c.Writer, c.Request)
}

func (s *Server) wellKnown(c *gin.Context) {
	auth.ProtectedResourceMetadata(s.cfg.PublicURL+"/mcp", s.cfg.Issuers)(c)
}

func (s *Server) mcp(c *gin.Context) { s.cfg.MCP.ServeHTTP(c.Writer, c.Request) }

func (s *Server) boundMCP(c *gin.Context) {
	id := c.Param("id")
	if _, err := s.cfg.Service.SessionFor(c.Request.Context(), caller(c), id); err != nil {
		fail(c, s.log, err)
		return
	}
	s.cfg.MCP.ServeBound(c.Writer, c.Request, id)
}
