package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cwsdev/cws/auth"
)

// legacy is a decoded plugin envelope.
type legacy struct {
	Status json.RawMessage `json:"status"`
	Error  *string         `json:"error"`
}

func (s *scopeServer) legacy(t *testing.T, path, token, body string) (int, legacy) {
	t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	a := s.do(t, http.MethodPost, path, token, b)
	var l legacy
	if err := json.Unmarshal(a.body, &l); err != nil {
		t.Fatalf("POST %s: %d %s: not an envelope: %v", path, a.status, a.body, err)
	}
	if !strings.Contains(string(a.body), `"status":`) || !strings.Contains(string(a.body), `"error":`) {
		t.Fatalf("POST %s: %s lacks status or error", path, a.body)
	}
	return a.status, l
}

func TestLegacyREST(t *testing.T) {
	s := newScopeServer(t, "")
	tok := s.token(t, "agent", "", auth.AllScopes()...)

	// Both body formats.
	st, l := s.legacy(t, "/mcp/create_new_file_with_text", tok, `{"pathInProject": "src/a.js", "text": "console.log(1);\n"}`)
	if st != 200 || l.Error != nil || !strings.Contains(string(l.Status), `"relativePath":"src/a.js"`) {
		t.Fatalf("direct format: %d %s %v", st, l.Status, l.Error)
	}
	st, l = s.legacy(t, "/mcp/open_file_in_editor", tok, `{"jsonrpc": "2.0", "id": 1, "params": {"arguments": {"pathInProject": "src/a.js"}}}`)
	if st != 200 || string(l.Status) != `"file is opened"` || l.Error != nil {
		t.Fatalf("JSON-RPC format: %d %s %v", st, l.Status, l.Error)
	}
	st, l = s.legacy(t, "/mcp/get_open_in_editor_file_text", tok, "")
	if st != 200 || string(l.Status) != `"console.log(1);\n"` {
		t.Errorf("text: %d %s", st, l.Status)
	}
	st, l = s.legacy(t, "/mcp/get_file_text_by_path", tok, `{"jsonrpc": "2.0", "id": 2, "params": {"arguments": {"pathInProject": "src/a.js"}}}`)
	if st != 200 || string(l.Status) != `{"content":"console.log(1);\n","path":"/workspace/src/a.js","relativePath":"src/a.js"}` {
		t.Errorf("get_file_text_by_path: %d %s", st, l.Status)
	}

	// Error classes and their HTTP statuses.
	for _, tc := range []struct {
		path, body string
		status     int
		msg        string
	}{
		{"/mcp/get_file_text_by_path", `{"pathInProject": "missing.js"}`, 200, "missing.js"},                        // an execution outcome
		{"/mcp/get_file_text_by_path", `{}`, 400, "missing required argument pathInProject"},                        // invalid params
		{"/mcp/get_file_text_by_path", `{"pathInProject": "../x"}`, 400, "leaves the workspace"},                    // traversal
		{"/mcp/get_file_text_by_path", `{"pathInProject": ".env"}`, 403, "deniedPaths"},                             // policy
		{"/mcp/execute_terminal_command", `{"command": "echo $(touch m)"}`, 403, "touch"},                           // command not allowed
		{"/mcp/no_such_tool", `{}`, 404, "tool not found: no_such_tool"},                                            // unknown tool
		{"/mcp/readFile", `{"path": "src/a.js"}`, 404, "tool not found"},                                            // not a vscode tool
		{"/mcp/get_file_text_by_path", `not json`, 400, "JSON object"},                                              // bad body
		{"/v1/sessions/nope/mcp/get_file_text_by_path", `{"pathInProject": "src/a.js"}`, 404, "not found"},          // unknown session
		{"/mcp/replace_current_file_text", `{"jsonrpc": "2.0", "id": 3, "params": {"arguments": {}}}`, 400, "text"}, // missing in JSON-RPC
	} {
		st, l := s.legacy(t, tc.path, tok, tc.body)
		if st != tc.status || l.Error == nil || !strings.Contains(*l.Error, tc.msg) || string(l.Status) != "null" {
			t.Errorf("POST %s %s: %d status %s error %v; want %d with %q", tc.path, tc.body, st, l.Status, deref(l.Error), tc.status, tc.msg)
		}
	}
	// Scope: a read-only token may read, not write.
	ro := s.token(t, "agent", "", auth.ScopeToolsRead)
	if st, l := s.legacy(t, "/mcp/rewrite_file_content", ro, `{"pathInProject": "src/a.js", "text": "x"}`); st != 403 || l.Error == nil {
		t.Errorf("read-only token writing: %d %v", st, deref(l.Error))
	}

	// list_tools: a bare array of the vscode tools.
	a := s.do(t, http.MethodGet, "/mcp/list_tools", tok, nil)
	var tools []struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		InputSchema map[string]any `json:"inputSchema"`
	}
	if err := json.Unmarshal(a.body, &tools); err != nil || a.status != 200 || len(tools) != 41 {
		t.Fatalf("list_tools: %d, %d tools, %v", a.status, len(tools), err)
	}
	if tools[0].Name != "get_open_in_editor_file_text" || tools[0].InputSchema["type"] != "object" || tools[0].Description == "" {
		t.Errorf("first tool = %+v", tools[0])
	}

	// initialize and status: JSON-RPC shaped, with the editor environment.
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		for _, p := range []string{"/mcp/initialize", "/mcp/status"} {
			a := s.do(t, m, p, tok, []byte(`{"jsonrpc": "2.0", "id": 9, "method": "x"}`))
			var v struct {
				JSONRPC string `json:"jsonrpc"`
				ID      any    `json:"id"`
				Result  struct {
					ProtocolVersion string `json:"protocolVersion"`
					Status          string `json:"status"`
					Environment     struct {
						WorkspaceRoot, ActiveFile, CurrentDirectory string
						OpenFiles                                   []string
					} `json:"environment"`
				} `json:"result"`
			}
			if err := json.Unmarshal(a.body, &v); err != nil || a.status != 200 || v.JSONRPC != "2.0" {
				t.Fatalf("%s %s: %d %s", m, p, a.status, a.body)
			}
			env := v.Result.Environment
			if env.WorkspaceRoot != "/workspace" || env.ActiveFile != "/workspace/src/a.js" || env.CurrentDirectory != "/workspace" || len(env.OpenFiles) != 1 {
				t.Errorf("%s %s environment = %s", m, p, a.body)
			}
			if p == "/mcp/status" && v.Result.Status != "running" || p == "/mcp/initialize" && v.Result.ProtocolVersion != "2024-11-05" {
				t.Errorf("%s %s = %s", m, p, a.body)
			}
			if m == http.MethodPost && v.ID != 9.0 {
				t.Errorf("%s %s id = %v", m, p, v.ID)
			}
		}
	}

	// The same session through /v1/sessions/{id}/mcp/…: the default session is listed.
	l2 := s.do(t, http.MethodGet, "/v1/sessions", s.token(t, "agent", "", auth.AllScopes()...), nil)
	var list struct {
		Sessions []struct{ ID string } `json:"sessions"`
	}
	_ = json.Unmarshal(l2.body, &list)
	if len(list.Sessions) != 1 {
		t.Fatalf("sessions: %s", l2.body)
	}
	id := list.Sessions[0].ID
	if st, l := s.legacy(t, "/v1/sessions/"+id+"/mcp/get_open_in_editor_file_path", tok, `{}`); st != 200 || string(l.Status) != `"/workspace/src/a.js"` {
		t.Errorf("bound session: %d %s %v", st, l.Status, deref(l.Error))
	}
	if a := s.do(t, http.MethodGet, "/v1/sessions/"+id+"/mcp/status", tok, nil); a.status != 200 || !strings.Contains(string(a.body), `"activeFile":"/workspace/src/a.js"`) {
		t.Errorf("bound status: %d %s", a.status, a.body)
	}
	bound := s.token(t, "agent", "other-session", auth.AllScopes()...)
	if st, _ := s.legacy(t, "/v1/sessions/"+id+"/mcp/get_open_in_editor_file_path", bound, `{}`); st != 404 {
		t.Errorf("a token bound to another session: %d", st)
	}

	// MCP itself is untouched at /mcp, and a string result is its text as it is.
	ctx := context.Background()
	client := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: s.url + "/mcp?toolsets=vscode", HTTPClient: bearer(tok)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "get_open_in_editor_file_path", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Content[0].(*sdk.TextContent).Text; txt != "/workspace/src/a.js" {
		t.Errorf("MCP text = %q", txt)
	}
	if sc, _ := json.Marshal(res.StructuredContent); string(sc) != `{"result":"/workspace/src/a.js"}` {
		t.Errorf("MCP structuredContent = %s", sc)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "get_file_text_by_path", Arguments: map[string]any{"pathInProject": "src/a.js"}})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Content[0].(*sdk.TextContent).Text; txt != `{"content":"console.log(1);\n","path":"/workspace/src/a.js","relativePath":"src/a.js"}` {
		t.Errorf("MCP object text = %q", txt)
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func bearer(tok string) *http.Client { return &http.Client{Transport: bearerTransport(tok)} }
