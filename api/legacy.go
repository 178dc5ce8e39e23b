package api

// The VSCode MCP plugin's REST flavour (seeds/vscode-mcp-plugin-tools.md), for agents
// and tools written against that plugin: POST /mcp/{tool} with the tool's arguments
// (directly, or as JSON-RPC params.arguments), answered {"status": …, "error": null} or
// {"status": null, "error": "…"}; /mcp/list_tools, a bare array of the vscode tools;
// /mcp/initialize and /mcp/status, JSON-RPC-shaped, with the session's editor
// environment. They use /mcp's session (the token's session claim, else the caller's
// default session); /v1/sessions/{id}/mcp/… use session id. MCP's own /mcp endpoint is
// untouched: these are its sub-paths.
//
// HTTP status of an error, by class (the REST table, errors.go):
//
//	200  the tool ran and failed (file not found, no active editor, git failed, …): the
//	     same outcomes MCP marks isError
//	400  invalid params (unknown or missing argument, bad value), path traversal, a body
//	     that is not JSON
//	401  missing or invalid token
//	403  policy violation, command not allowed, missing token scope, toolset not enabled
//	404  unknown tool (or not a vscode tool), unknown session
//	409  the session's sandbox runs an agent of another protocol (start a new session)
//	413  too large (maxFileSize, maxEditSize, body over 64 MiB, a request or an answer
//	     over what one frame to the workspace carries)
//	428  confirmation required (send "confirmed": true beside the arguments)
//	429  rate limited or quota exceeded
//	503  temporarily unavailable (the store or the sandbox): only this says retry; 500
//	     internal
//
// The error message of a 4xx says what was wrong; a 5xx says only its class.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/version"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset/vscode"
	"github.com/gin-gonic/gin"
)

// LegacyResponse is the plugin's envelope: exactly one of Status and Error is non-null.
type LegacyResponse struct {
	Status any     `json:"status"`
	Error  *string `json:"error"`
}

// LegacyTool is one /mcp/list_tools entry.
type LegacyTool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	InputSchema any    `json:"inputSchema"`
}

// legacySession is the session of a legacy request: the URL's, else the token's session
// claim, else "" (the caller's default session). A token bound to one session reaches
// no other.
func (s *Server) legacySession(c *gin.Context) (string, error) {
	p := auth.PrincipalFrom(c.Request.Context())
	id := c.Param("id")
	if id == "" {
		if p == nil {
			return "", workspace.ErrForbidden
		}
		return p.Session, nil
	}
	if p != nil && p.Session != "" && p.Session != id {
		return "", fmt.Errorf("session %s: %w", id, workspace.ErrNotFound)
	}
	if _, err := s.cfg.Service.SessionFor(c.Request.Context(), caller(c), id); err != nil {
		return "", err
	}
	return id, nil
}

// legacyFail answers err in the envelope with the table's status.
func (s *Server) legacyFail(c *gin.Context, err error) {
	status, _ := statusOf(err)
	msg := err.Error()
	switch {
	case errors.Is(err, workspace.ErrNotFound):
		msg = "not found"
	case status >= 500:
		s.log.Error("legacy request failed", "route", c.FullPath(), "status", status, "err", err)
		msg = http.StatusText(status)
	}
	c.AbortWithStatusJSON(status, LegacyResponse{Error: &msg})
}

// legacyArgs are a call's arguments from either body format: the arguments object
// itself, or JSON-RPC 2.0 with params.arguments.
func legacyArgs(body []byte) (json.RawMessage, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return json.RawMessage("{}"), nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("%w: the body must be a JSON object: the arguments, or JSON-RPC with params.arguments", workspace.ErrInvalid)
	}
	if _, rpc := top["jsonrpc"]; !rpc {
		return body, nil
	}
	var req struct {
		Params struct {
			Arguments json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("%w: JSON-RPC params: %v", workspace.ErrInvalid, err)
	}
	if len(req.Params.Arguments) == 0 || string(req.Params.Arguments) == "null" {
		return json.RawMessage("{}"), nil
	}
	return req.Params.Arguments, nil
}

func readBody(c *gin.Context) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxJSONBody))
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nil, fmt.Errorf("%w: request body over %d bytes", workspace.ErrTooLarge, maxJSONBody)
	}
	return body, err
}

// legacyCall serves POST /mcp/{tool}.
func (s *Server) legacyCall(c *gin.Context) {
	name := c.Param("tool")
	t, ok := s.cfg.Service.Catalog().Lookup(name)
	if !ok || t.Toolset != policy.ToolsetVSCode {
		msg := fmt.Sprintf("tool not found: %s (GET /mcp/list_tools lists them)", name)
		c.AbortWithStatusJSON(http.StatusNotFound, LegacyResponse{Error: &msg})
		return
	}
	body, err := readBody(c)
	if err != nil {
		s.legacyFail(c, err)
		return
	}
	args, err := legacyArgs(body)
	if err != nil {
		s.legacyFail(c, err)
		return
	}
	id, err := s.legacySession(c)
	if err != nil {
		s.legacyFail(c, err)
		return
	}
	ctx := c.Request.Context()
	var res *workspace.Result
	if id == "" {
		res, err = s.cfg.Service.CallDefault(ctx, caller(c), name, args, workspace.CallOptions{})
	} else {
		res, err = s.cfg.Service.Call(ctx, caller(c), id, name, args, workspace.CallOptions{})
	}
	if err != nil {
		s.legacyFail(c, err)
		return
	}
	if f, ok := res.Value.(workspace.Failure); ok && res.IsError {
		msg := f.Error.Message
		if f.Error.Path != "" && !strings.Contains(msg, f.Error.Path) {
			msg = f.Error.Path + ": " + msg
		}
		c.JSON(http.StatusOK, LegacyResponse{Error: &msg})
		return
	}
	c.JSON(http.StatusOK, LegacyResponse{Status: res.Value})
}

// legacyListTools serves GET /mcp/list_tools: the vscode tools the token may call.
func (s *Server) legacyListTools(c *gin.Context) {
	who := caller(c)
	out := []LegacyTool{}
	for _, t := range s.cfg.Service.Catalog().Tools(policy.ToolsetVSCode) {
		if who.May(t) {
			out = append(out, LegacyTool{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema})
		}
	}
	c.JSON(http.StatusOK, out)
}

// legacyEnvironment is the session's editor environment, as initialize and status give it.
type legacyEnvironment struct {
	WorkspaceRoot    string   `json:"workspaceRoot"`
	ActiveFile       string   `json:"activeFile"`
	CurrentDirectory string   `json:"currentDirectory"`
	OpenFiles        []string `json:"openFiles"`
}

// legacyInfo serves /mcp/initialize (status false) and /mcp/status: JSON-RPC-shaped
// results, with the request's id when it sent one (else 0).
func (s *Server) legacyInfo(status bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		var rpcID any = 0
		if c.Request.Method == http.MethodPost {
			if body, err := readBody(c); err == nil {
				var req struct {
					ID any `json:"id"`
				}
				if json.Unmarshal(body, &req) == nil && req.ID != nil {
					rpcID = req.ID
				}
			}
		}
		env, err := s.legacyEnv(c)
		if err != nil {
			st, _ := statusOf(err)
			msg := err.Error()
			if st >= 500 {
				msg = http.StatusText(st)
			}
			c.AbortWithStatusJSON(st, gin.H{"jsonrpc": "2.0", "id": rpcID, "error": gin.H{"code": mcp.Code(err), "message": msg}})
			return
		}
		var result any = gin.H{"status": "running", "environment": env}
		if !status {
			result = gin.H{
				"protocolVersion": "2024-11-05",
				"capabilities":    gin.H{"tools": gin.H{"listChanged": true}, "resources": gin.H{}},
				"serverInfo":      gin.H{"name": "vscode-mcp-server", "version": version.Version},
				"environment":     env,
			}
		}
		c.JSON(http.StatusOK, gin.H{"jsonrpc": "2.0", "id": rpcID, "result": result})
	}
}

func (s *Server) legacyEnv(c *gin.Context) (*legacyEnvironment, error) {
	id, err := s.legacySession(c)
	if err != nil {
		return nil, err
	}
	_, raw, err := s.cfg.Service.SessionState(c.Request.Context(), caller(c), id, vscode.EditorKey)
	if err != nil {
		return nil, err
	}
	var ed vscode.Editor
	if raw != nil {
		if err := json.Unmarshal(raw, &ed); err != nil {
			return nil, fmt.Errorf("editor state: %w", err)
		}
	}
	env := &legacyEnvironment{WorkspaceRoot: policy.WorkspaceDir, CurrentDirectory: policy.WorkspaceDir, OpenFiles: []string{}}
	if ed.Active != "" {
		env.ActiveFile = policy.WorkspaceDir + "/" + ed.Active
	}
	for _, f := range ed.Open {
		env.OpenFiles = append(env.OpenFiles, policy.WorkspaceDir+"/"+f)
	}
	return env, nil
}
