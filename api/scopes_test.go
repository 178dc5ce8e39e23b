package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

const (
	scopesTenant = "acme"
	scopesSecret = "0123456789abcdef0123456789abcdef-scopes"
)

// scopeServer is the real router and MCP handler over memstore and sandboxtest, with
// tenants from a tenants file.
type scopeServer struct {
	url    string
	tenant *auth.Tenant
}

// newScopeServer serves tenant acme; tenantExtra is added to its tenants-file entry
// (e.g. "    defaultScopes: [tools:read]\n").
func newScopeServer(t *testing.T, tenantExtra string) *scopeServer {
	t.Helper()
	return newServerWith(t, tenantExtra, `{"deniedPaths": [".env"], "allowedCommands": ["echo"]}`, nil)
}

// newServerWith is newScopeServer with acme's policy and the router's config changed.
func newServerWith(t *testing.T, tenantExtra, policyJSON string, configure func(*api.Config)) *scopeServer {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.yaml")
	yaml := "tenants:\n  - id: " + scopesTenant + "\n    issuer: acme-platform\n    keys:\n      - {kid: k1, alg: HS256, secret: \"" + scopesSecret + "\"}\n" + tenantExtra
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	tenants, err := auth.LoadTenants(path)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := policy.Parse([]byte(policyJSON))
	if err != nil {
		t.Fatal(err)
	}
	pols := policy.ByTenant{scopesTenant: tp}
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: sandboxtest.New(t), Tenants: pols,
		DefaultImage: "test-image", PolicyTTL: time.Nanosecond})
	t.Cleanup(svc.Close)
	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{})
	mh := mcp.New(mcp.Config{Service: svc, Verifier: verifier, Tenants: pols})
	cfg := api.Config{Service: svc, Verifier: verifier, MCP: mh, PublicURL: "http://cws.test"}
	if configure != nil {
		configure(&cfg)
	}
	hs := httptest.NewServer(api.New(cfg))
	t.Cleanup(hs.Close)
	return &scopeServer{url: hs.URL, tenant: tenants.Get(scopesTenant)}
}

// token mints a token for sub granting scopes (none: no scope claim).
func (s *scopeServer) token(t *testing.T, sub, session string, scopes ...string) string {
	t.Helper()
	tok, err := s.tenant.Mint(sub, time.Hour, session, scopes, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (s *scopeServer) do(t *testing.T, method, path, token string, body []byte, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, s.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header, b}
}

// session creates a session with a token holding every scope.
func (s *scopeServer) session(t *testing.T) string {
	t.Helper()
	a := s.do(t, http.MethodPost, "/v1/sessions", s.token(t, "ci", "", auth.AllScopes()...), nil)
	if a.status != http.StatusCreated {
		t.Fatalf("create session: %d %s", a.status, a.body)
	}
	var v struct{ ID string }
	_ = json.Unmarshal(a.body, &v)
	return v.ID
}

// forbidden is the REST body of a scope refusal, byte for byte.
func forbidden(what, scope string) string {
	return `{"error":{"code":"forbidden","message":"` + what + ` needs scope ` + scope +
		`, which the token does not grant","rpcCode":-32002,"rule":"scope","scope":"` + scope + `"}}`
}

// TestRESTScopes: each endpoint answers 403 naming the scope it needs, and works with it.
func TestRESTScopes(t *testing.T) {
	s := newScopeServer(t, "")
	id := s.session(t)
	others := func(scope string) []string {
		return slices.DeleteFunc(auth.AllScopes(), func(x string) bool { return x == scope })
	}
	tests := []struct {
		name, method, path, body string
		scope, what              string
		okStatus                 int
	}{
		{"readFile", "POST", "/v1/sessions/{id}/tools/readFile", `{"path":"nope"}`, auth.ScopeToolsRead, "readFile", 200},
		{"gitStatus", "POST", "/v1/sessions/{id}/tools/gitStatus", `{}`, auth.ScopeToolsRead, "gitStatus", 200},
		{"writeFile", "POST", "/v1/sessions/{id}/tools/writeFile", `{"path":"a.txt","contents":"x"}`, auth.ScopeToolsWrite, "writeFile", 200},
		{"gitCommit", "POST", "/v1/sessions/{id}/tools/gitCommit", `{"message":"m"}`, auth.ScopeToolsWrite, "gitCommit", 200},
		{"runCommand", "POST", "/v1/sessions/{id}/tools/runCommand", `{"command":"echo","args":["hi"]}`, auth.ScopeToolsExec, "runCommand", 200},
		{"startProcess", "POST", "/v1/sessions/{id}/tools/startProcess", `{"command":"echo"}`, auth.ScopeToolsExec, "startProcess", 200},
		{"readProcessOutput", "POST", "/v1/sessions/{id}/tools/readProcessOutput", `{"id":"p-nope"}`, auth.ScopeToolsExec, "readProcessOutput", 0},
		{"killProcess", "POST", "/v1/sessions/{id}/tools/killProcess", `{"id":"p-nope"}`, auth.ScopeToolsExec, "killProcess", 0},
		{"diff", "GET", "/v1/sessions/{id}/diff", "", auth.ScopeToolsRead, "the diff", 0},
		{"create", "POST", "/v1/sessions", "", auth.ScopeSessions, "creating a session", 201},
		{"list", "GET", "/v1/sessions", "", auth.ScopeSessions, "listing sessions", 200},
		{"get", "GET", "/v1/sessions/{id}", "", auth.ScopeSessions, "reading a session", 200},
		{"renew", "POST", "/v1/sessions/{id}/renew", "", auth.ScopeSessions, "renewing a session", 200},
		{"upload", "PUT", "/v1/sessions/{id}/archive", "", auth.ScopeArchive, "uploading an archive", 200},
		{"download", "GET", "/v1/sessions/{id}/archive", "", auth.ScopeArchive, "downloading the archive", 200},
		{"delete", "DELETE", "/v1/sessions/{id}", "", auth.ScopeSessions, "deleting a session", 204}, // last
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := strings.ReplaceAll(tt.path, "{id}", id)
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			if tt.name == "upload" {
				body = make([]byte, 1024) // an empty tar archive
			}
			a := s.do(t, tt.method, path, s.token(t, "agent", "", others(tt.scope)...), body)
			if a.status != http.StatusForbidden || string(bytes.TrimSpace(a.body)) != forbidden(tt.what, tt.scope) {
				t.Fatalf("without %s: %d %s\nwant 403 %s", tt.scope, a.status, a.body, forbidden(tt.what, tt.scope))
			}
			if ct := a.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("refusal Content-Type = %q", ct)
			}
			if tt.okStatus == 0 {
				return
			}
			a = s.do(t, tt.method, path, s.token(t, "agent", "", tt.scope), body)
			if a.status != tt.okStatus {
				t.Fatalf("with %s alone: %d %s, want %d", tt.scope, a.status, a.body, tt.okStatus)
			}
		})
	}
}

// TestDefaultScopesFromTenantsFile: a token without a scope claim gets the tenant's
// defaultScopes; with none configured, all of them.
func TestDefaultScopesFromTenantsFile(t *testing.T) {
	t.Run("configured", func(t *testing.T) {
		s := newScopeServer(t, "    defaultScopes: [tools:read]\n")
		id := s.session(t)
		tok := s.token(t, "agent", "") // no scope claim
		if a := s.do(t, "POST", "/v1/sessions/"+id+"/tools/listFiles", tok, []byte(`{}`)); a.status != http.StatusOK {
			t.Errorf("listFiles with the default tools:read: %d %s", a.status, a.body)
		}
		a := s.do(t, "POST", "/v1/sessions/"+id+"/tools/writeFile", tok, []byte(`{"path":"a","contents":"b"}`))
		if a.status != http.StatusForbidden || string(bytes.TrimSpace(a.body)) != forbidden("writeFile", auth.ScopeToolsWrite) {
			t.Errorf("writeFile with the default tools:read: %d %s", a.status, a.body)
		}
		if a := s.do(t, "GET", "/v1/sessions", tok, nil); a.status != http.StatusForbidden {
			t.Errorf("list sessions with the default tools:read: %d %s", a.status, a.body)
		}
		// An explicit claim replaces the default.
		if a := s.do(t, "GET", "/v1/sessions", s.token(t, "ci", "", auth.ScopeSessions), nil); a.status != http.StatusOK {
			t.Errorf("list sessions with a sessions claim: %d %s", a.status, a.body)
		}
	})
	t.Run("absent: all scopes", func(t *testing.T) {
		s := newScopeServer(t, "")
		tok := s.token(t, "old-token", "")
		a := s.do(t, "POST", "/v1/sessions", tok, nil)
		if a.status != http.StatusCreated {
			t.Fatalf("create with a token without scope: %d %s", a.status, a.body)
		}
		var v struct{ ID string }
		_ = json.Unmarshal(a.body, &v)
		for _, p := range []struct{ method, path string }{{"GET", "/v1/sessions/" + v.ID + "/archive"}, {"POST", "/v1/sessions/" + v.ID + "/tools/listProcesses"}} {
			if a := s.do(t, p.method, p.path, tok, nil); a.status != http.StatusOK {
				t.Errorf("%s %s: %d %s", p.method, p.path, a.status, a.body)
			}
		}
	})
}

// rpc sends one JSON-RPC request to an MCP endpoint and returns the answer's result
// and error as sent on the wire (the go-sdk client folds some codes).
func (s *scopeServer) rpc(t *testing.T, endpoint, token, method string, params any) (json.RawMessage, *wireError) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	a := s.do(t, http.MethodPost, endpoint, token, body, "Accept", "application/json, text/event-stream", "Mcp-Protocol-Version", "2025-11-25")
	if a.status != http.StatusOK {
		t.Fatalf("%s %s: HTTP %d %s", method, endpoint, a.status, a.body)
	}
	msgs := [][]byte{a.body}
	if strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") {
		msgs = nil
		for _, line := range strings.Split(string(a.body), "\n") {
			if d, ok := strings.CutPrefix(line, "data:"); ok {
				msgs = append(msgs, []byte(strings.TrimSpace(d)))
			}
		}
	}
	for _, m := range msgs {
		var ans struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *wireError      `json:"error"`
		}
		if json.Unmarshal(m, &ans) == nil && string(ans.ID) == "7" {
			return ans.Result, ans.Error
		}
	}
	t.Fatalf("%s: no answer in %s", method, a.body)
	return nil, nil
}

type wireError struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// TestMCPScopes: over MCP a refusal is -32002 whose data names the scope; tools/list
// shows only the tools the token may call; /mcp's default session needs no sessions
// scope.
func TestMCPScopes(t *testing.T) {
	s := newScopeServer(t, "")
	id := s.session(t)
	readOnly := s.token(t, "reader", "", auth.ScopeToolsRead)
	agent := s.token(t, "agent", "", auth.ToolScopes()...)
	ciOnly := s.token(t, "platform", "", auth.ScopeSessions, auth.ScopeArchive)

	for _, ep := range []struct{ name, url, token string }{
		{"bound", "/v1/sessions/" + id + "/mcp", readOnly},
		{"session claim", "/mcp", s.token(t, "reader", id, auth.ScopeToolsRead)},
		{"default session", "/mcp", readOnly},
	} {
		t.Run(ep.name, func(t *testing.T) {
			for _, tc := range []struct{ tool, scope, args string }{
				{"writeFile", auth.ScopeToolsWrite, `{"path":"a","contents":"b"}`},
				{"gitCheckout", auth.ScopeToolsWrite, `{"ref":"main"}`},
				{"runCommand", auth.ScopeToolsExec, `{"command":"echo"}`},
				{"listProcesses", auth.ScopeToolsExec, `{}`},
			} {
				_, we := s.rpc(t, ep.url, ep.token, "tools/call", map[string]any{"name": tc.tool, "arguments": json.RawMessage(tc.args)})
				wantData := `{"rule":"scope","scope":"` + tc.scope + `"}`
				if we == nil || we.Code != -32002 || string(we.Data) != wantData || we.Message != tc.tool+" needs scope "+tc.scope+", which the token does not grant" {
					t.Errorf("%s: wire error %+v (data %s), want -32002 with data %s", tc.tool, we, we.dataString(), wantData)
				}
			}
			res, we := s.rpc(t, ep.url, ep.token, "tools/call", map[string]any{"name": "listFiles", "arguments": map[string]any{}})
			if we != nil || !strings.Contains(string(res), `"entries"`) {
				t.Errorf("listFiles with tools:read: %s %+v", res, we)
			}
			res, we = s.rpc(t, ep.url, ep.token, "tools/list", map[string]any{})
			if we != nil {
				t.Fatalf("tools/list: %+v", we)
			}
			if got, want := toolNames(t, res), []string{"findFiles", "gitDiff", "gitLog", "gitShow", "gitStatus", "listFiles", "readFile", "searchFiles"}; !slices.Equal(got, want) {
				t.Errorf("tools/list with tools:read = %q, want %q", got, want)
			}
		})
	}

	t.Run("agent token", func(t *testing.T) {
		res, we := s.rpc(t, "/mcp", agent, "tools/list", map[string]any{})
		if we != nil || len(toolNames(t, res)) != len(workspace.NewCatalog(toolset.All()...).Tools(policy.ToolsetCore)) {
			t.Errorf("tools/list with every tools scope: %s %+v", res, we)
		}
		// Its default session is created without the sessions scope.
		if _, we := s.rpc(t, "/mcp", agent, "tools/call", map[string]any{"name": "writeFile", "arguments": map[string]any{"path": "x", "contents": "y"}}); we != nil {
			t.Errorf("writeFile on /mcp with tools scopes only: %+v", we)
		}
	})

	t.Run("a token without tools scopes creates no default session", func(t *testing.T) {
		_, we := s.rpc(t, "/mcp", ciOnly, "tools/call", map[string]any{"name": "readFile", "arguments": map[string]any{"path": "x"}})
		if we == nil || we.Code != -32002 || string(we.Data) != `{"rule":"scope","scope":"tools:read"}` {
			t.Errorf("readFile with sessions and archive: %+v", we)
		}
		res, _ := s.rpc(t, "/mcp", ciOnly, "tools/list", map[string]any{})
		if n := toolNames(t, res); len(n) != 0 {
			t.Errorf("tools/list without tools scopes = %q, want none", n)
		}
		a := s.do(t, "GET", "/v1/sessions", ciOnly, nil)
		var list struct{ Sessions []struct{ Sub string } }
		_ = json.Unmarshal(a.body, &list)
		for _, ss := range list.Sessions {
			if ss.Sub == "platform" {
				t.Errorf("a refused /mcp call made a session: %s", a.body)
			}
		}
	})
}

func (we *wireError) dataString() string {
	if we == nil {
		return ""
	}
	return string(we.Data)
}

func toolNames(t *testing.T, res json.RawMessage) []string {
	t.Helper()
	var l struct{ Tools []struct{ Name string } }
	if err := json.Unmarshal(res, &l); err != nil {
		t.Fatalf("tools/list result %s: %v", res, err)
	}
	var out []string
	for _, tl := range l.Tools {
		out = append(out, tl.Name)
	}
	slices.Sort(out)
	return out
}
