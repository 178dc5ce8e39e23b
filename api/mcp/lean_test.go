package mcp_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// twinServers are two routers on one Service: one answers tools/call on the lean
// path, the other (SDKOnly) through the go-sdk.
type twinServers struct {
	lean, sdk string
	leanMCP   *mcp.Handler
	tenant    *auth.Tenant
	sessions  []string
	svc       *workspace.Service
	local     *sandboxtest.Local
}

func newTwins(t *testing.T) *twinServers {
	t.Helper()
	tenants, _ := auth.NewDevTenants()
	tp, err := policy.Parse([]byte(`{"deniedPaths": [".env"], "allowedCommands": ["echo"], "maxFileSize": 100000,
		"confirmationRequired": ["deleteFile"]}`))
	if err != nil {
		t.Fatal(err)
	}
	pols := policy.ByTenant{auth.DevTenantID: tp}
	local := sandboxtest.New(t)
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: local,
		Tenants: pols, DefaultImage: "local"})
	t.Cleanup(svc.Close)
	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{})
	var leanMCP *mcp.Handler
	serve := func(sdkOnly bool) string {
		mh := mcp.New(mcp.Config{Service: svc, Verifier: verifier, Tenants: pols, SDKOnly: sdkOnly})
		if !sdkOnly {
			leanMCP = mh
		}
		hs := httptest.NewServer(api.New(api.Config{Service: svc, Verifier: verifier, MCP: mh, PublicURL: "http://cws.test"}))
		t.Cleanup(hs.Close)
		return hs.URL
	}
	tw := &twinServers{lean: serve(false), sdk: serve(true), tenant: tenants.Get(auth.DevTenantID), svc: svc, local: local}
	tw.leanMCP = leanMCP
	caller := workspace.Caller{Tenant: auth.DevTenantID, Subject: "agent", Scopes: auth.AllScopes()}
	for range 2 {
		sess, err := svc.CreateSession(t.Context(), caller, workspace.CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		tw.sessions = append(tw.sessions, sess.ID)
		if len(tw.sessions) == 1 { // larger than maxFileSize: written behind the policy's back
			if err := os.WriteFile(local.Path(sess.Sandbox, "big"), bytes.Repeat([]byte("x"), 200_000), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	files := map[string]string{
		"f4k":    strings.Repeat("0123456789abcdef", 256),
		"html":   `<a href="x">&amp;</a> "quoted" \ back` + "\u2028 é ✓\n",
		".env":   "SECRET=1\n",
		"gone.t": "to delete\n",
	}
	for name, content := range files {
		args := fmt.Sprintf(`{"path":%q,"contents":%q}`, name, content)
		if _, err := svc.Call(t.Context(), caller, tw.sessions[0], "writeFile", []byte(args), workspace.CallOptions{}); err != nil && name != ".env" {
			t.Fatal(name, err)
		}
	}
	return tw
}

type reply struct {
	status int
	header http.Header
	chunk  []string
	body   string
}

func (tw *twinServers) post(t *testing.T, base, path, token, body string, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	h := resp.Header.Clone()
	h.Del("Date")
	return reply{status: resp.StatusCode, header: h, chunk: resp.TransferEncoding, body: string(b)}
}

// TestLeanMatchesSDK holds the lean tools/call path to the SDK's bytes on the wire:
// status, headers (but Date), transfer encoding and body, over successes, tool errors
// and every JSON-RPC error the seed defines. The one difference allowed: the lean
// path's answer carries a Content-Length where the SDK's is chunked.
func TestLeanMatchesSDK(t *testing.T) {
	tw := newTwins(t)
	s0, s1 := tw.sessions[0], tw.sessions[1]
	mint := func(session string, scopes ...string) string {
		tok, err := tw.tenant.Mint("agent", time.Hour, session, scopes, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	full, readOnly := mint(s0), mint(s0, auth.ScopeToolsRead)
	call := func(id, name, args string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `}}`
	}
	cases := []struct {
		name, path, token, body string
		hdr                     []string
		want                    string // a fragment of the body
	}{
		{"success (lean)", "/mcp", full, call("1", "readFile", `{"path":"f4k"}`), nil, `0123456789abcdef`},
		{"string id", "/mcp", full, call(`"req-7"`, "readFile", `{"path":"f4k"}`), nil, `"id":"req-7"`},
		{"negative id", "/mcp", full, call("-12", "readFile", `{"path":"f4k"}`), nil, `"id":-12`},
		{"html and unicode", "/mcp", full, call("2", "readFile", `{"path":"html"}`), nil, `\u003ca href`},
		{"protocol version", "/mcp", full, call("3", "readFile", `{"path":"f4k"}`), []string{"Mcp-Protocol-Version", "2025-06-18"}, `"result"`},
		{"tool error isError", "/mcp", full, call("4", "readFile", `{"path":"nope"}`), nil, `"isError":true`},
		{"listFiles", "/mcp", full, call("5", "listFiles", `{"path":"."}`), nil, `"result"`},
		{"traversal -32001", "/mcp", full, call("6", "readFile", `{"path":"../etc/passwd"}`), nil, `-32001`},
		{"policy -32002", "/mcp", full, call("7", "readFile", `{"path":".env"}`), nil, `-32002`},
		{"scope -32002", "/mcp", readOnly, call("8", "writeFile", `{"path":"x","contents":"y"}`), nil, `"scope"`},
		{"too large -32003", "/mcp", full, call("9", "readFile", `{"path":"big"}`), nil, `-32003`},
		{"command -32004", "/mcp", full, call("10", "runCommand", `{"command":"rm","args":["-rf","."]}`), nil, `-32004`},
		{"confirmation -32005", "/mcp", full, call("11", "deleteFile", `{"path":"gone.t"}`), nil, `-32005`},
		{"bad params -32602", "/mcp", full, call("12", "readFile", `{"path":3}`), nil, `-32602`},
		{"unknown argument", "/mcp", full, call("13", "readFile", `{"path":"f4k","maxBytes":1}`), nil, `-32602`},
		{"arguments not an object", "/mcp", full, call("14", "readFile", `[1]`), nil, `-32602`},
		{"no arguments", "/mcp", full, `{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"readFile"}}`, nil, `-32602`},
		{"unknown tool (SDK)", "/mcp", full, call("16", "nope", `{}`), nil, `unknown tool`},
		{"bound session mismatch", "/v1/sessions/" + s1 + "/mcp", full, call("17", "readFile", `{"path":"f4k"}`), nil, ""},
		{"bound session", "/v1/sessions/" + s1 + "/mcp", mint(""), call("18", "readFile", `{"path":"f4k"}`), nil, `isError`},
		{"default session (lean)", "/mcp", mint(""), call("34", "listFiles", `{"path":"."}`), nil, `"result"`},
		{"progress token (SDK)", "/mcp", full, `{"jsonrpc":"2.0","id":19,"method":"tools/call","params":{"name":"readFile","arguments":{"path":"f4k"},"_meta":{"progressToken":"p"}}}`, nil, `0123`},
		{"float id (SDK)", "/mcp", full, call("20.0", "readFile", `{"path":"f4k"}`), nil, `"id":20`},
		{"tools/list (SDK)", "/mcp", full, `{"jsonrpc":"2.0","id":21,"method":"tools/list"}`, nil, `readFile`},
		{"notification (SDK)", "/mcp", full, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil, ""},
		{"malformed (SDK)", "/mcp", full, `{"jsonrpc":"2.0","id":22,`, nil, ""},
		{"charset (lean)", "/mcp", full, call("24", "readFile", `{"path":"f4k"}`), []string{"Content-Type", "application/json; charset=utf-8"}, `"result"`},
		{"bad content type parameter (SDK)", "/mcp", full, call("25", "readFile", `{"path":"f4k"}`), []string{"Content-Type", "application/json; =x"}, ""},
		{"accept */* (SDK)", "/mcp", full, call("26", "readFile", `{"path":"f4k"}`), []string{"Accept", "*/*"}, `"result"`},
		{"session id header (lean)", "/mcp", full, call("27", "readFile", `{"path":"f4k"}`), []string{"Mcp-Session-Id", "abc"}, `"result"`},
		{"last event id (SDK)", "/mcp", full, call("28", "readFile", `{"path":"f4k"}`), []string{"Last-Event-ID", "x_1"}, ""},
		{"duplicate name (lean)", "/mcp", full, `{"jsonrpc":"2.0","id":29,"method":"tools/call","params":{"name":"listFiles","name":"readFile","arguments":{"path":"f4k"}}}`, nil, ""},
		{"duplicate id (lean)", "/mcp", full, `{"jsonrpc":"2.0","id":30,"id":31,"method":"tools/call","params":{"name":"readFile","arguments":{"path":"f4k"}}}`, nil, ""},
		{"null arguments (lean)", "/mcp", full, call("32", "readFile", `null`), nil, ""},
		{"spaced arguments (lean)", "/mcp", full, call("33", "readFile", "{ \"path\" :\n \"f\\u0034k\" }"), nil, `0123`},
		{"bad version (SDK)", "/mcp", full, call("23", "readFile", `{"path":"f4k"}`), []string{"Mcp-Protocol-Version", "1999-01-01"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := mcp.LeanServed(tw.leanMCP)
			lean := tw.post(t, tw.lean, tc.path, tc.token, tc.body, tc.hdr...)
			served := mcp.LeanServed(tw.leanMCP) > before
			if served != !strings.Contains(tc.name, "(SDK)") {
				t.Errorf("served on the lean path: %v", served)
			}
			ref := tw.post(t, tw.sdk, tc.path, tc.token, tc.body, tc.hdr...)
			if served {
				// The lean path's answer is whole when written: it goes with its length
				// where the SDK, which may stream more events, chunks. The rest is the same.
				if lean.header.Get("Content-Length") != fmt.Sprint(len(lean.body)) || lean.chunk != nil || !slices.Equal(ref.chunk, []string{"chunked"}) {
					t.Errorf("lean: Content-Length %q, transfer encoding %v for a %d-byte body; sdk: %v",
						lean.header.Get("Content-Length"), lean.chunk, len(lean.body), ref.chunk)
				}
				lean.header.Del("Content-Length")
				lean.chunk = ref.chunk
			}
			if lean.status != ref.status || !slices.Equal(lean.chunk, ref.chunk) || fmt.Sprint(lean.header) != fmt.Sprint(ref.header) {
				t.Errorf("lean: %d %v %v\nsdk:  %d %v %v", lean.status, lean.chunk, lean.header, ref.status, ref.chunk, ref.header)
			}
			if lean.body != ref.body {
				t.Errorf("bodies differ\nlean: %q\nsdk:  %q", lean.body, ref.body)
			}
			if !strings.Contains(ref.body, tc.want) {
				t.Errorf("the SDK's answer %q lacks %q", ref.body, tc.want)
			}
		})
	}
}

// TestLeanWithSDKClient runs the official go-sdk client against the lean path:
// initialize, tools/list, and calls that succeed and fail.
func TestLeanWithSDKClient(t *testing.T) {
	tw := newTwins(t)
	tok, err := tw.tenant.Mint("agent", time.Hour, tw.sessions[0], nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: tw.lean + "/mcp", DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearerRT{tok}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "readFile", Arguments: map[string]any{"path": "html"}})
	if err != nil || res.IsError {
		t.Fatalf("readFile: %v %+v", err, res)
	}
	if text := res.Content[0].(*sdk.TextContent).Text; !strings.Contains(text, `\u003ca href`) && !strings.Contains(text, `<a href`) {
		t.Errorf("readFile text = %q", text)
	}
	if res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "readFile", Arguments: map[string]any{"path": "nope"}}); err != nil || !res.IsError {
		t.Errorf("readFile of a missing file: %v %+v, want isError", err, res)
	}
	_, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "readFile", Arguments: map[string]any{"path": "../x"}})
	if err == nil || !strings.Contains(err.Error(), "traversal") {
		t.Errorf("readFile ../x: %v, want a path traversal error", err)
	}
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestAppendString holds the lean path's string encoder to json.Marshal's, byte for
// byte, over every ASCII byte, HTML, separators, invalid UTF-8 and random bytes.
func TestAppendString(t *testing.T) {
	cases := []string{"", "plain", `<a href="x">&amp;</a> "q" \ back`, "\u2028\u2029 é ✓ 𝄞", "\xff\xfe bad \xc3", "\xe2\x80", "tab\tnl\nnul\x00del\x7f"}
	var all []byte
	for c := range 256 {
		all = append(all, byte(c))
	}
	cases = append(cases, string(all))
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		cases = append(cases, string(b))
	}
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := mcp.AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
		if got := mcp.AppendString([]byte("x"), []byte(s)); string(got) != "x"+string(want) {
			t.Fatalf("AppendString(x, []byte(%q)) = %s, want x%s", s, got, want)
		}
	}
}
