package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/cwsdev/cws/workspace"
)

// usage serves GET /v1/sessions/:id/usage: the session's last sampled usage.
func (s *Server) usage(c *gin.Context) {
	u, err := s.cfg.Service.UsageOf(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, u)
}

// AuditList is the body of GET /v1/sessions/:id/audit.
type AuditList struct {
	Records []workspace.AuditRecord `json:"records"`
}

// sessionAudit serves GET /v1/sessions/:id/audit?limit=N: the session's newest audit
// records (its tool calls, lifecycle, egress and preview), newest first.
func (s *Server) sessionAudit(c *gin.Context) {
	limit, _ := strconv.Atoi(c.Query("limit"))
	recs, err := s.cfg.Service.SessionAudit(c.Request.Context(), caller(c), c.Param("id"), limit)
	if err != nil {
		fail(c, s.log, err)
		return
	}
	if recs == nil {
		recs = []workspace.AuditRecord{}
	}
	c.JSON(http.StatusOK, AuditList{Records: recs})
}

// adminSessions serves GET /v1/admin/sessions?tenant=&state=&image=&label=k=v (the
// admin role): every tenant's sessions, with their usage.
func (s *Server) adminSessions(c *gin.Context) {
	f := workspace.SessionFilter{Tenant: c.Query("tenant"), State: c.Query("state"), Image: c.Query("image")}
	for _, l := range c.QueryArray("label") {
		k, v, _ := strings.Cut(l, "=")
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	all, err := s.cfg.Service.AdminSessions(c.Request.Context(), caller(c), f)
	if err != nil {
		fail(c, s.log, err)
		return
	}
	out := SessionList{Sessions: make([]SessionView, 0, len(all))}
	for _, sess := range all {
		v := s.view(sess)
		v.Tenant = sess.Tenant
		out.Sessions = append(out.Sessions, v)
	}
	out.Count = len(out.Sessions)
	c.JSON(http.StatusOK, out)
}

// TenantList is the body of GET /v1/admin/tenants.
type TenantList struct {
	Tenants []workspace.TenantSummary `json:"tenants"`
}

// adminTenants serves GET /v1/admin/tenants (the admin role).
func (s *Server) adminTenants(c *gin.Context) {
	ts, err := s.cfg.Service.AdminTenants(c.Request.Context(), caller(c))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, TenantList{Tenants: ts})
}

// sessionPolicy serves GET /v1/sessions/:id/policy: the tenant's policy and the
// workspace's file.
func (s *Server) sessionPolicy(c *gin.Context) {
	v, err := s.cfg.Service.PolicyOf(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, v)
}
