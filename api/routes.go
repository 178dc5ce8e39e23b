package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// route is one endpoint: registered with gin and described in /openapi.json from the
// same table, so the two cannot drift.
type route struct {
	method  string // "ANY" for MCP endpoints
	path    string // gin syntax: /v1/sessions/:id
	auth    bool
	summary string
	handler gin.HandlerFunc
	// OpenAPI details.
	request  string // request body media type, "" for none
	response string // success media type
	status   int    // success status
}

func (r route) methods() []string {
	if r.method == "ANY" {
		return []string{http.MethodGet, http.MethodPost, http.MethodDelete}
	}
	return []string{r.method}
}

func (s *Server) routes() []route {
	const js, tar, diff = "application/json", "application/x-tar", "text/x-diff"
	return []route{
		{method: "GET", path: "/healthz", summary: "Liveness: 200 while the process runs.", handler: s.healthz, response: js, status: 200},
		{method: "GET", path: "/readyz", summary: "Readiness: 200 when Docker and the store answer; 503 while draining.", handler: s.readyz, response: js, status: 200},
		{method: "GET", path: "/metrics", summary: "Prometheus metrics.", handler: s.metrics, response: "text/plain", status: 200},
		{method: "GET", path: "/openapi.json", summary: "This document.", handler: s.openapi, response: js, status: 200},
		{method: "GET", path: "/.well-known/oauth-protected-resource", summary: "RFC 9728 protected resource metadata.", handler: s.wellKnown, response: js, status: 200},
		{method: "ANY", path: "/mcp", summary: "MCP (Streamable HTTP, stateless) for the caller's session: the token's session claim, else one default session per (tenant, sub). ?toolsets=core,vscode,lsp.", handler: s.mcp, request: js, response: js, status: 200},
		{method: "POST", path: "/v1/sessions", auth: true, summary: "Create a session (image, ttl, env, labels); Idempotency-Key makes retries safe.", handler: s.createSession, request: js, response: js, status: 201},
		{method: "GET", path: "/v1/sessions", auth: true, summary: "List the tenant's sessions.", handler: s.listSessions, response: js, status: 200},
		{method: "GET", path: "/v1/sessions/:id", auth: true, summary: "Get a session.", handler: s.getSession, response: js, status: 200},
		{method: "DELETE", path: "/v1/sessions/:id", auth: true, summary: "Delete a session, its container and its volume.", handler: s.deleteSession, status: 204},
		{method: "POST", path: "/v1/sessions/:id/renew", auth: true, summary: "Renew a session's idle TTL.", handler: s.renewSession, response: js, status: 200},
		{method: "POST", path: "/v1/sessions/:id/tools/:tool", auth: true, summary: "Call a tool; the body is its arguments.", handler: s.callTool, request: js, response: js, status: 200},
		{method: "PUT", path: "/v1/sessions/:id/archive", auth: true, summary: "Upload a tar archive (optionally gzipped) into the workspace, streamed.", handler: s.upload, request: tar, response: js, status: 200},
		{method: "GET", path: "/v1/sessions/:id/archive", auth: true, summary: "Download the workspace as a tar archive, streamed.", handler: s.download, response: tar, status: 200},
		{method: "GET", path: "/v1/sessions/:id/diff", auth: true, summary: "The workspace's changes since its last commit, as a git patch (new files included).", handler: s.diff, response: diff, status: 200},
		{method: "ANY", path: "/v1/sessions/:id/mcp", auth: true, summary: "MCP bound to this session.", handler: s.boundMCP, request: js, response: js, status: 200},
	}
}
