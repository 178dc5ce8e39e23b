package e2e_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestEndToEnd drives the real `cws serve` on real Docker and Redis with the go-sdk
// client and a tenant's bearer token.
func TestEndToEnd(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantAcme, tenantBeta) })
	tok := fx.token(t, tenantAcme, "alice", "")

	list := func() []sessionView {
		r := do(t, nil, srv.url, http.MethodGet, "/v1/sessions", tok, nil, nil)
		if r.status != http.StatusOK {
			t.Fatalf("GET /v1/sessions: %d %s", r.status, r.body)
		}
		return decode[struct{ Sessions []sessionView }](t, r).Sessions
	}
	if n := len(list()); n != 0 {
		t.Fatalf("%d sessions before the first call, want 0", n)
	}

	c := connect(t, srv.url+"/mcp", tok, "")
	if v := c.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Errorf("default connect negotiated %q, want 2026-07-28", v)
	}
	const content = "hello from mcp\nthe needle is here\n"

	t.Run("mcp creates the default session", func(t *testing.T) {
		w := c.call(t, "writeFile", map[string]any{"path": "notes/hello.txt", "contents": content})
		if w["size"] != float64(len(content)) {
			t.Errorf("writeFile = %v", w)
		}
		ss := list()
		if len(ss) != 1 || ss[0].Sub != "alice" || ss[0].State != "ready" {
			t.Fatalf("sessions after the first call = %+v, want alice's one ready session", ss)
		}
		// The next call reuses it.
		c.call(t, "readFile", map[string]any{"path": "notes/hello.txt"})
		if n := len(list()); n != 1 {
			t.Fatalf("%d sessions after a second call, want 1", n)
		}
	})

	t.Run("core tools", func(t *testing.T) {
		r := c.call(t, "readFile", map[string]any{"path": "notes/hello.txt"})
		if r["content"] != content || r["isBinary"] != false || !strings.HasPrefix(fmt.Sprint(r["hash"]), "sha256:") {
			t.Errorf("readFile = %v", r)
		}
		s := c.call(t, "searchFiles", map[string]any{"query": "needle"})
		res, _ := s["results"].([]any)
		if len(res) != 1 {
			t.Fatalf("searchFiles needle = %v, want one match", s)
		}
		m := res[0].(map[string]any)
		if m["path"] != "notes/hello.txt" || m["line"] != float64(2) || !strings.Contains(fmt.Sprint(m["text"]), "needle") {
			t.Errorf("searchFiles match = %v", m)
		}
	})

	t.Run("runCommand streams progress", func(t *testing.T) {
		res, err := c.callRaw("runCommand", map[string]any{
			"command": "sh", "args": []string{"-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done"},
		}, mcp.Meta{"progressToken": "p1"})
		if err != nil || res.IsError {
			t.Fatalf("runCommand: %v %v", err, res)
		}
		out := text(res)
		if !strings.Contains(out, `"stdout":"line1\nline2\nline3\n"`) || !strings.Contains(out, `"exitCode":0`) {
			t.Errorf("runCommand result = %s", out)
		}
		msgs := c.progressMessages()
		if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, "line") }) {
			t.Errorf("progress notifications = %q, want at least one with the output", msgs)
		}
		t.Logf("%d progress notifications: %q", len(msgs), msgs)
	})

	t.Run("errors carry the seed's codes", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			tool string
			args map[string]any
			code int64
			msg  string
		}{
			{"denied path", "readFile", map[string]any{"path": ".env"}, -32002, "deniedPaths"},
			{"traversal", "readFile", map[string]any{"path": "../x"}, -32001, "traversal"},
			{"command not allowed", "runCommand", map[string]any{"command": "/bin/sh", "args": []string{"-c", "id"}}, -32004, "command not allowed"},
		} {
			// On the wire, exactly the seed's code.
			if we := rawToolCall(t, srv.url+"/mcp", tok, tc.tool, tc.args); we == nil || we.Code != tc.code || !strings.Contains(we.Message, tc.msg) {
				t.Errorf("%s: wire error %+v, want code %d with %q", tc.name, we, tc.code, tc.msg)
			}
			// Through the go-sdk client: a JSON-RPC error, except that the SDK reads
			// -32003 and -32004 as its own jsonrpc2 ErrClientClosing/ErrServerClosing
			// (go-sdk v1.8.0 internal/jsonrpc2/wire.go) and returns ErrConnectionClosed
			// with the server's message, code dropped.
			_, err := c.callRaw(tc.tool, tc.args, nil)
			var we *jsonrpc.Error
			switch {
			case err == nil:
				t.Errorf("%s: no error through the go-sdk client", tc.name)
			case errors.As(err, &we):
				if we.Code != tc.code || !strings.Contains(we.Message, tc.msg) {
					t.Errorf("%s: go-sdk got code %d %q, want %d with %q", tc.name, we.Code, we.Message, tc.code, tc.msg)
				}
			case tc.code == -32004 && errors.Is(err, mcp.ErrConnectionClosed) && strings.Contains(err.Error(), tc.msg):
				t.Logf("%s: go-sdk client folds -32004 into %v", tc.name, err)
			default:
				t.Errorf("%s: go-sdk got %T %v, want a JSON-RPC error %d", tc.name, err, err, tc.code)
			}
		}
		// The client session survives the folded error.
		c.call(t, "readFile", map[string]any{"path": "notes/hello.txt"})
	})

	t.Run("bound endpoint reaches the same workspace", func(t *testing.T) {
		ss := list()
		if len(ss) != 1 {
			t.Fatalf("sessions = %+v", ss)
		}
		if want := srv.url + "/v1/sessions/" + ss[0].ID + "/mcp"; ss[0].MCPURL != want {
			t.Errorf("mcpUrl = %q, want %q", ss[0].MCPURL, want)
		}
		bc := connect(t, srv.url+"/v1/sessions/"+ss[0].ID+"/mcp", tok, "2025-11-25")
		if v := bc.InitializeResult().ProtocolVersion; v != "2025-11-25" {
			t.Errorf("connect forcing 2025-11-25 negotiated %q", v)
		}
		if r := bc.call(t, "readFile", map[string]any{"path": "notes/hello.txt"}); r["content"] != content {
			t.Errorf("readFile through /v1/sessions/{id}/mcp = %v", r)
		}
		// And by REST, the same file.
		r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions/"+ss[0].ID+"/tools/readFile", tok, []byte(`{"path":"notes/hello.txt"}`), nil)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), `"content":"hello from mcp\nthe needle is here\n"`) {
			t.Errorf("REST readFile: %d %s", r.status, r.body)
		}
	})

	t.Run("1 MiB token through the real listener", func(t *testing.T) {
		before, _ := metricValue(srv.metrics(t), "cws_auth_failures_total", map[string]string{"reason": "too_large"})
		r := do(t, nil, srv.url, http.MethodGet, "/v1/sessions", strings.Repeat("a", 1<<20), nil, nil)
		if r.status != http.StatusUnauthorized || !strings.Contains(r.header.Get("WWW-Authenticate"), "resource_metadata=") {
			t.Fatalf("1 MiB token: %d %q %.200s", r.status, r.header.Get("WWW-Authenticate"), r.body)
		}
		if after, _ := metricValue(srv.metrics(t), "cws_auth_failures_total", map[string]string{"reason": "too_large"}); after != before+1 {
			t.Errorf("cws_auth_failures_total{reason=too_large} %v → %v", before, after)
		}
	})
}
