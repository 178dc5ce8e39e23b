package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/cwsdev/cws/console"
)

// route is one endpoint: registered with gin and described in /openapi.json from the
// same table, so the two cannot drift.
type route struct {
	method string // "ANY" for MCP endpoints
	path   string // gin syntax: /v1/sessions/:id
	auth   bool
	// wsToken: a browser's WebSocket may carry its token as a subprotocol
	// ("bearer.<token>", see wsBearer) instead of the Authorization header it can't set.
	wsToken bool
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
	if r.method == "ALL" { // a proxy: every method
		return []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}
	}
	return []string{r.method}
}

func (s *Server) routes() []route {
	const js, tar, diff = "application/json", "application/x-tar", "text/x-diff"
	rs := []route{
		{method: "GET", path: "/healthz", summary: "Liveness: 200 while the process runs.", handler: s.healthz, response: js, status: 200},
		{method: "GET", path: "/readyz", summary: "Readiness: 200 when Docker and the store answer; 503 while draining.", handler: s.readyz, response: js, status: 200},
		{method: "GET", path: "/metrics", summary: "Prometheus metrics.", handler: s.metrics, response: "text/plain", status: 200},
		{method: "GET", path: "/console", summary: "The web console (redirects to /console/).", handler: func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/console/") }, status: 301},
		{method: "GET", path: "/console/*file", summary: "The web console: static files; it calls this API with the token a person pastes.", handler: gin.WrapH(console.Handler("/console/")), response: "text/html", status: 200},
		{method: "GET", path: "/openapi.json", summary: "This document.", handler: s.openapi, response: js, status: 200},
		{method: "GET", path: "/.well-known/oauth-protected-resource", summary: "RFC 9728 protected resource metadata.", handler: s.wellKnown, response: js, status: 200},
		{method: "ANY", path: "/mcp", summary: "MCP (Streamable HTTP, stateless) for the caller's session: the token's session claim, else one default session per (tenant, sub). ?toolsets=core,vscode,lsp.", handler: s.mcp, request: js, response: js, status: 200},
		{method: "POST", path: "/v1/sessions", auth: true, summary: "Create a session (image, ttl, env, labels); Idempotency-Key makes retries safe.", handler: s.createSession, request: js, response: js, status: 201},
		{method: "GET", path: "/v1/sessions", auth: true, summary: "List the tenant's sessions.", handler: s.listSessions, response: js, status: 200},
		{method: "GET", path: "/v1/sessions/:id", auth: true, summary: "Get a session.", handler: s.getSession, response: js, status: 200},
		{method: "DELETE", path: "/v1/sessions/:id", auth: true, summary: "Delete a session, its container and its volume.", handler: s.deleteSession, status: 204},
		{method: "POST", path: "/v1/sessions/:id/renew", auth: true, summary: "Renew a session's idle TTL.", handler: s.renewSession, response: js, status: 200},
		{method: "POST", path: "/v1/sessions/:id/suspend", auth: true, summary: "Suspend a session: its sandbox stops, its files stay; the next call (or resume) wakes it. Idempotent.", handler: s.suspendSession, response: js, status: 200},
		{method: "POST", path: "/v1/sessions/:id/resume", auth: true, summary: "Wake a suspended or archived session now. Idempotent.", handler: s.resumeSession, response: js, status: 200},
		{method: "POST", path: "/v1/sessions/:id/snapshots", auth: true, summary: "Take a snapshot of the whole workspace ({\"name\"}), .git and denied paths included.", handler: s.createSnapshot, request: js, response: js, status: 201},
		{method: "POST", path: "/v1/sessions/:id/fork", auth: true, summary: "Make count (1–16) new sessions with this one's files at one instant ({\"count\"}); each succeeds or fails on its own.", handler: s.forkSession, request: js, response: js, status: 201},
		{method: "GET", path: "/v1/snapshots", auth: true, summary: "List the tenant's snapshots.", handler: s.listSnapshots, response: js, status: 200},
		{method: "GET", path: "/v1/snapshots/:id", auth: true, summary: "Get a snapshot.", handler: s.getSnapshot, response: js, status: 200},
		{method: "DELETE", path: "/v1/snapshots/:id", auth: true, summary: "Delete a snapshot.", handler: s.deleteSnapshot, status: 204},
		{method: "PUT", path: "/v1/secrets/:name", auth: true, summary: "Write a secret of the tenant ({\"value\", \"hosts\"}; scope secrets): its value is sealed and never shown again; sessions that use it get the new value on their next request.", handler: s.putSecret, request: js, response: js, status: 200},
		{method: "GET", path: "/v1/secrets", auth: true, summary: "List the tenant's secrets: names, hosts and dates, never values (scope secrets).", handler: s.listSecrets, response: js, status: 200},
		{method: "DELETE", path: "/v1/secrets/:name", auth: true, summary: "Delete a secret of the tenant (scope secrets); requests of sessions that use it are refused from then on.", handler: s.deleteSecret, status: 204},
		{method: "GET", path: "/v1/sessions/:id/usage", auth: true, summary: "What the session uses, as last sampled (every 10 s; disk every minute): CPU seconds, memory now and at peak, disk bytes, processes, egress bytes and connections.", handler: s.usage, response: js, status: 200},
		{method: "GET", path: "/v1/sessions/:id/policy", auth: true, summary: "The policy in force: the tenant's (the ceiling) and the workspace's .cws-policy.json, which may only narrow it (wakes a sleeping session).", handler: s.sessionPolicy, response: js, status: 200},
		{method: "GET", path: "/v1/sessions/:id/audit", auth: true, summary: "The session's newest audit records (tool calls, lifecycle, egress, preview), newest first; ?limit= (default 200, at most 1000).", handler: s.sessionAudit, response: js, status: 200},
		{method: "GET", path: "/v1/admin/sessions", auth: true, summary: "Admin role: every tenant's sessions; ?tenant= ?state= ?image= ?label=k=v (repeatable).", handler: s.adminSessions, response: js, status: 200},
		{method: "GET", path: "/v1/admin/tenants", auth: true, summary: "Admin role: every tenant with its sessions by state, policy highlights and usage.", handler: s.adminTenants, response: js, status: 200},
		{method: "POST", path: "/v1/sessions/:id/tools/:tool", auth: true, summary: "Call a tool; the body is its arguments.", handler: s.callTool, request: js, response: js, status: 200},
		{method: "PUT", path: "/v1/sessions/:id/archive", auth: true, summary: "Upload a tar archive (optionally gzipped) into the workspace, streamed.", handler: s.upload, request: tar, response: js, status: 200},
		{method: "GET", path: "/v1/sessions/:id/archive", auth: true, summary: "Download the workspace as a tar archive, streamed.", handler: s.download, response: tar, status: 200},
		{method: "GET", path: "/v1/sessions/:id/diff", auth: true, summary: "The workspace's changes since its last commit, as a git patch (new files included).", handler: s.diff, response: diff, status: 200},
		{method: "ALL", path: "/v1/sessions/:id/ports/:port/*path", auth: true, summary: "Preview: proxy to a port of the workspace (scope ports; the policy's previewPorts must allow it). POST/DELETE .../link make ({\"ttl\"}) and revoke (?id=) browser links; Upgrade: cws-tcp opens a raw TCP tunnel.", handler: s.ports, response: "*/*", status: 200},
		{method: "ALL", path: "/p/:cap/*path", summary: "Preview through a link: no token, the link's capability is the path.", handler: s.pathLink, response: "*/*", status: 200},
		{method: "POST", path: "/v1/sessions/:id/terminals", auth: true, summary: "Open an interactive terminal (scope tools:exec): a program on a PTY ({\"command\", \"args\", \"cwd\", \"env\", \"cols\", \"rows\"}; default the image's shell). Wakes a sleeping session.", handler: s.openTerminal, request: js, response: js, status: 201},
		{method: "GET", path: "/v1/sessions/:id/terminals", auth: true, summary: "List the session's terminals, running and ended (exit code, endReason).", handler: s.listTerminals, response: js, status: 200},
		{method: "GET", path: "/v1/sessions/:id/terminals/:tid", auth: true, summary: "Get a terminal: running or ended, exit code, endReason, size, viewers.", handler: s.getTerminal, response: js, status: 200},
		{method: "DELETE", path: "/v1/sessions/:id/terminals/:tid", auth: true, summary: "Close a terminal: its program is hung up, then killed after 2 s; answers its final state.", handler: s.closeTerminal, response: js, status: 200},
		{method: "GET", path: "/v1/sessions/:id/terminals/:tid/attach", auth: true, wsToken: true, summary: "Attach to a terminal as a WebSocket: binary frames are input and output, text frames JSON control (resize, signal; from the server attached, skipped, error, exit). The scrollback is replayed first; ?readonly=1 can't type. A browser passes its token as the subprotocol bearer.<token> beside cws.terminal.v1. Wakes a sleeping session.", handler: s.attachTerminal, response: "application/octet-stream", status: 101},
		{method: "ANY", path: "/v1/sessions/:id/mcp", auth: true, summary: "MCP bound to this session.", handler: s.boundMCP, request: js, response: js, status: 200},
	}
	// The VSCode plugin's REST flavour (legacy.go), for /mcp's session and for a chosen one.
	for _, base := range []struct{ path, which string }{{"/mcp", "the /mcp session (token's session claim, else the caller's default session)"}, {"/v1/sessions/:id/mcp", "this session"}} {
		rs = append(rs,
			route{method: "GET", path: base.path + "/initialize", auth: true, summary: "VSCode plugin REST: server info and the editor environment of " + base.which + " (JSON-RPC shaped).", handler: s.legacyInfo(false), response: js, status: 200},
			route{method: "POST", path: base.path + "/initialize", auth: true, summary: "VSCode plugin REST: as GET; a JSON-RPC body's id is echoed.", handler: s.legacyInfo(false), request: js, response: js, status: 200},
			route{method: "GET", path: base.path + "/status", auth: true, summary: "VSCode plugin REST: running status and the editor environment of " + base.which + " (JSON-RPC shaped).", handler: s.legacyInfo(true), response: js, status: 200},
			route{method: "POST", path: base.path + "/status", auth: true, summary: "VSCode plugin REST: as GET.", handler: s.legacyInfo(true), request: js, response: js, status: 200},
			route{method: "GET", path: base.path + "/list_tools", auth: true, summary: "VSCode plugin REST: the vscode tools the token may call, as a bare array of {name, description, inputSchema}.", handler: s.legacyListTools, response: js, status: 200},
			route{method: "POST", path: base.path + "/:tool", auth: true, summary: "VSCode plugin REST: call a vscode tool in " + base.which + "; the body is its arguments or JSON-RPC with params.arguments. Answers {status, error}.", handler: s.legacyCall, request: js, response: js, status: 200},
		)
	}
	return rs
}
