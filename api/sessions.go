package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cwsdev/cws/workspace"
	"github.com/gin-gonic/gin"
)

// SessionView is a session as the API shows it.
type SessionView struct {
	ID        string            `json:"id"`
	Subject   string            `json:"sub"`
	Image     string            `json:"image"`
	State     string            `json:"state"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
	LastUsed  time.Time         `json:"lastUsed"`
	IdleUntil time.Time         `json:"idleUntil,omitzero"`
	ExpiresAt time.Time         `json:"expiresAt,omitzero"`
	// SuspendedAt is when a suspended or archived session went to sleep.
	SuspendedAt time.Time `json:"suspendedAt,omitzero"`
	MCPURL      string    `json:"mcpUrl"`
	// Tenant is set in the admin view, which spans tenants.
	Tenant string `json:"tenant,omitempty"`
	// Usage is the last sampled usage (GET …/usage), when there is one.
	Usage *workspace.Usage `json:"usage,omitempty"`
	// WakeError is why the last wake from its archive failed (the session stays
	// archived with its archive untouched; the next call tries again).
	WakeError   string    `json:"wakeError,omitempty"`
	WakeErrorAt time.Time `json:"wakeErrorAt,omitzero"`
	// Notes say what restoring its files had to change (names renamed).
	Notes []string `json:"notes,omitempty"`
	// Secrets are the secrets the session uses: variable → secret name (never a value).
	Secrets map[string]string `json:"secrets,omitempty"`
}

func (s *Server) view(sess *workspace.Session) SessionView {
	v := SessionView{ID: sess.ID, Subject: sess.Subject, Image: sess.Image, State: sess.State, Labels: sess.Labels,
		CreatedAt: sess.CreatedAt, LastUsed: sess.LastUsed, IdleUntil: sess.IdleUntil(), ExpiresAt: sess.ExpiresAt,
		SuspendedAt: sess.SuspendedAt, MCPURL: s.cfg.PublicURL + "/v1/sessions/" + sess.ID + "/mcp",
		WakeError: sess.WakeError, WakeErrorAt: sess.WakeErrorAt, Notes: sess.Notes}
	if u, ok := s.cfg.Service.CachedUsage(sess.Tenant, sess.ID); ok {
		v.Usage = &u
	}
	for _, sec := range sess.Secrets {
		if v.Secrets == nil {
			v.Secrets = map[string]string{}
		}
		v.Secrets[sec.Env] = sec.Name
	}
	return v
}

// CreateSessionRequest is the body of POST /v1/sessions (all optional).
type CreateSessionRequest struct {
	Image  string            `json:"image,omitempty"`
	TTL    string            `json:"ttl,omitempty"` // idle TTL, e.g. "30m"; capped by the tenant's policy
	Env    map[string]string `json:"env,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Snapshot makes the session from one of the tenant's snapshots (its files, and
	// its image, env and labels unless given here).
	Snapshot string `json:"snapshot,omitempty"`
	// Secrets are the tenant's secrets the session uses: variable → secret name. The
	// variable holds a placeholder; cws's egress proxy puts the value in, for the
	// secret's hosts only.
	Secrets map[string]string `json:"secrets,omitempty"`
}

func (s *Server) createSession(c *gin.Context) {
	var req CreateSessionRequest
	if c.Request.ContentLength != 0 {
		if err := decodeJSON(c, &req); err != nil {
			fail(c, s.log, err)
			return
		}
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			fail(c, s.log, fmt.Errorf("%w: ttl %q: want a positive duration such as 30m", workspace.ErrInvalid, req.TTL))
			return
		}
		ttl = d
	}
	sess, err := s.cfg.Service.CreateSession(c.Request.Context(), caller(c), workspace.CreateRequest{
		Image: req.Image, TTL: ttl, Env: req.Env, Labels: req.Labels, Snapshot: req.Snapshot, Secrets: req.Secrets, IdempotencyKey: c.GetHeader("Idempotency-Key")})
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.Header("Location", "/v1/sessions/"+sess.ID)
	c.JSON(http.StatusCreated, s.view(sess))
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []SessionView `json:"sessions"`
	Count    int           `json:"count"`
}

func (s *Server) listSessions(c *gin.Context) {
	all, err := s.cfg.Service.ListSessions(c.Request.Context(), caller(c))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	out := SessionList{Sessions: make([]SessionView, 0, len(all))}
	for _, sess := range all {
		out.Sessions = append(out.Sessions, s.view(sess))
	}
	out.Count = len(out.Sessions)
	c.JSON(http.StatusOK, out)
}

func (s *Server) getSession(c *gin.Context) {
	sess, err := s.cfg.Service.GetSession(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, s.view(sess))
}

func (s *Server) deleteSession(c *gin.Context) {
	if err := s.cfg.Service.DeleteSession(c.Request.Context(), caller(c), c.Param("id")); err != nil {
		fail(c, s.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *Server) renewSession(c *gin.Context) {
	sess, err := s.cfg.Service.RenewSession(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, s.view(sess))
}

func (s *Server) suspendSession(c *gin.Context) {
	sess, err := s.cfg.Service.Suspend(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, s.view(sess))
}

func (s *Server) resumeSession(c *gin.Context) {
	sess, err := s.cfg.Service.Resume(c.Request.Context(), caller(c), c.Param("id"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusOK, s.view(sess))
}

// maxJSONBody bounds a JSON request body (tool arguments carry file contents).
const maxJSONBody = 64 << 20

func decodeJSON(c *gin.Context, v any) error {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxJSONBody)
	if err := c.ShouldBindJSON(v); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return fmt.Errorf("%w: request body over %d bytes", workspace.ErrTooLarge, maxJSONBody)
		}
		return fmt.Errorf("%w: malformed JSON body: %v", workspace.ErrInvalid, err)
	}
	return nil
}
