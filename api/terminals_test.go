package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// newTerminalServer serves tenants acme and other (the same secret scheme as
// newScopeServer), both under policyJSON.
func newTerminalServer(t *testing.T, policyJSON string) (*scopeServer, *scopeServer) {
	t.Helper()
	s, other, _ := newTerminalRouter(t, policyJSON)
	return s, other
}

// newTerminalRouter is newTerminalServer with its router.
func newTerminalRouter(t *testing.T, policyJSON string) (*scopeServer, *scopeServer, *api.Server) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash on this host")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.yaml")
	yaml := "tenants:\n"
	for _, id := range []string{scopesTenant, "other"} {
		yaml += "  - id: " + id + "\n    issuer: " + id + "-platform\n    keys:\n      - {kid: k1, alg: HS256, secret: \"" + id + "-" + scopesSecret + "\"}\n"
	}
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
	pols := policy.ByTenant{scopesTenant: tp, "other": tp}
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: sandboxtest.New(t), Tenants: pols,
		DefaultImage: "test-image", PolicyTTL: time.Nanosecond})
	t.Cleanup(svc.Close)
	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{})
	mh := mcp.New(mcp.Config{Service: svc, Verifier: verifier, Tenants: pols})
	router := api.New(api.Config{Service: svc, Verifier: verifier, MCP: mh, PublicURL: "http://cws.test"})
	hs := httptest.NewServer(router)
	t.Cleanup(hs.Close)
	return &scopeServer{url: hs.URL, tenant: tenants.Get(scopesTenant)}, &scopeServer{url: hs.URL, tenant: tenants.Get("other")}, router
}

const terminalPolicy = `{"allowedCommands": ["bash", "sh", "stty", "sleep", "echo", "cat", "head", "tr"]}`

func jsonOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return v
}

// terminalErrorOf is an error body's code and rule.
func terminalErrorOf(t *testing.T, b []byte) (code, rule, message string) {
	t.Helper()
	var v struct {
		Error struct{ Code, Rule, Message string }
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not an error body: %s", b)
	}
	return v.Error.Code, v.Error.Rule, v.Error.Message
}

// viewer is one attached WebSocket.
type viewer struct {
	t    *testing.T
	conn *websocket.Conn
	out  strings.Builder
	ctl  []map[string]any
}

func attachWS(t *testing.T, s *scopeServer, token, session, tid, query string) (*viewer, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := "ws" + strings.TrimPrefix(s.url, "http") + "/v1/sessions/" + session + "/terminals/" + tid + "/attach" + query
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		return nil, resp, err
	}
	conn.SetReadLimit(4 << 20)
	t.Cleanup(func() { conn.CloseNow() })
	return &viewer{t: t, conn: conn}, resp, nil
}

// until reads frames until the output holds want (or a control frame of type want,
// when want is "ctl:<type>").
func (v *viewer) until(want string) map[string]any {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if !strings.HasPrefix(want, "ctl:") && strings.Contains(v.out.String(), want) {
			return nil
		}
		typ, data, err := v.conn.Read(ctx)
		if err != nil {
			out := v.out.String()
			v.t.Fatalf("waiting for %q: %v; output so far (its last 2000 bytes) %q, control %v", want, err, out[max(0, len(out)-2000):], v.ctl)
		}
		if typ == websocket.MessageBinary {
			v.out.Write(data)
			continue
		}
		m := jsonOf(v.t, data)
		v.ctl = append(v.ctl, m)
		if want == "ctl:"+m["type"].(string) {
			return m
		}
	}
}

func (v *viewer) send(typ websocket.MessageType, s string) {
	v.t.Helper()
	if err := v.conn.Write(context.Background(), typ, []byte(s)); err != nil {
		v.t.Fatal(err)
	}
}

func TestTerminalAttach(t *testing.T) {
	s, _ := newTerminalServer(t, terminalPolicy)
	id := s.session(t)
	tok := s.token(t, "dev", "", auth.AllScopes()...)
	a := s.do(t, http.MethodPost, "/v1/sessions/"+id+"/terminals", tok, []byte(`{"cols": 80, "rows": 24}`))
	if a.status != http.StatusCreated {
		t.Fatalf("open: %d %s", a.status, a.body)
	}
	term := jsonOf(t, a.body)
	tid, _ := term["id"].(string)
	if tid == "" || term["command"] != "bash" || term["cols"] != 80.0 || term["rows"] != 24.0 || term["pid"].(float64) <= 0 || term["startedAt"] == "" {
		t.Fatalf("opened: %s", a.body)
	}

	v, _, err := attachWS(t, s, tok, id, tid, "")
	if err != nil {
		t.Fatal(err)
	}
	if hello := v.until("ctl:attached"); hello["terminal"].(map[string]any)["id"] != tid {
		t.Fatalf("attached frame: %v", hello)
	}
	v.send(websocket.MessageBinary, "echo $((6*7)); stty size\r")
	v.until("24 80\r\n")
	if !strings.Contains(v.out.String(), "42\r\n24 80\r\n") {
		t.Fatalf("output: %q", v.out.String())
	}
	v.send(websocket.MessageText, `{"type":"resize","cols":100,"rows":30}`)
	v.send(websocket.MessageBinary, "stty size\r")
	v.until("30 100\r\n")

	// Bad control frames: an error frame each, and the terminal lives on.
	for _, tc := range []struct{ frame, code, rule string }{
		{`not json`, "invalid_params", ""},
		{`{"type":"dance"}`, "invalid_params", ""},
		{`{"type":"resize","cols":0,"rows":30}`, "invalid_params", "cols"},
		{`{"type":"resize","cols":80,"rows":1001}`, "invalid_params", "rows"},
		{`{"type":"signal","signal":"BOGUS"}`, "invalid_params", "signal"},
	} {
		v.send(websocket.MessageText, tc.frame)
		e := v.until("ctl:error")["error"].(map[string]any)
		if e["code"] != tc.code || (tc.rule != "" && e["rule"] != tc.rule) {
			t.Errorf("%s: error frame %v, want code %s rule %q", tc.frame, e, tc.code, tc.rule)
		}
	}

	// A read-only viewer: it sees the scrollback and the output, and can't type.
	ro, _, err := attachWS(t, s, tok, id, tid, "?readonly=1")
	if err != nil {
		t.Fatal(err)
	}
	if hello := ro.until("ctl:attached"); hello["readOnly"] != true {
		t.Fatalf("read-only attached frame: %v", hello)
	}
	ro.until("30 100\r\n") // replayed
	ro.send(websocket.MessageBinary, "echo from-readonly\r")
	if e := ro.until("ctl:error")["error"].(map[string]any); !strings.Contains(e["message"].(string), "read-only") {
		t.Fatalf("read-only input: %v", e)
	}
	v.send(websocket.MessageBinary, "echo alive-$((1+1))\r")
	v.until("alive-2\r\n")
	ro.until("alive-2\r\n")
	if strings.Contains(v.out.String(), "from-readonly") {
		t.Fatal("a read-only viewer typed")
	}

	// Detach, attach again: the scrollback comes back.
	v.conn.Close(websocket.StatusNormalClosure, "")
	again, _, err := attachWS(t, s, tok, id, tid, "")
	if err != nil {
		t.Fatal(err)
	}
	again.until("42\r\n24 80")
	again.until("alive-2\r\n")

	// Listed, got; the program's exit reaches every viewer with its code.
	if a := s.do(t, http.MethodGet, "/v1/sessions/"+id+"/terminals", tok, nil); a.status != 200 || !strings.Contains(string(a.body), tid) {
		t.Fatalf("list: %d %s", a.status, a.body)
	}
	again.send(websocket.MessageBinary, "exit 3\r")
	if ex := again.until("ctl:exit"); ex["code"] != 3.0 || ex["endReason"] != "exited" {
		t.Fatalf("exit frame: %v", ex)
	}
	if ex := ro.until("ctl:exit"); ex["code"] != 3.0 {
		t.Fatalf("read-only exit frame: %v", ex)
	}
	a = s.do(t, http.MethodGet, "/v1/sessions/"+id+"/terminals/"+tid, tok, nil)
	if got := jsonOf(t, a.body); a.status != 200 || got["running"] != false || got["exitCode"] != 3.0 || got["endReason"] != "exited" {
		t.Fatalf("get after exit: %d %s", a.status, a.body)
	}
}

func TestTerminalClose(t *testing.T) {
	s, _ := newTerminalServer(t, terminalPolicy)
	id := s.session(t)
	tok := s.token(t, "dev", "", auth.AllScopes()...)
	a := s.do(t, http.MethodPost, "/v1/sessions/"+id+"/terminals", tok, []byte(`{"command": "sleep", "args": ["100"]}`))
	if a.status != http.StatusCreated {
		t.Fatalf("open: %d %s", a.status, a.body)
	}
	tid := jsonOf(t, a.body)["id"].(string)
	a = s.do(t, http.MethodDelete, "/v1/sessions/"+id+"/terminals/"+tid, tok, nil)
	if got := jsonOf(t, a.body); a.status != 200 || got["running"] != false || got["endReason"] != "closed" {
		t.Fatalf("close: %d %s", a.status, a.body)
	}
}

func TestTerminalRefusals(t *testing.T) {
	s, other := newTerminalServer(t, terminalPolicy)
	id := s.session(t)
	tok := s.token(t, "dev", "", auth.AllScopes()...)
	open := func(body string) answer {
		return s.do(t, http.MethodPost, "/v1/sessions/"+id+"/terminals", tok, []byte(body))
	}
	for _, tc := range []struct {
		name, body string
		status     int
		code, rule string
	}{
		{"cols 0", `{"cols": 0}`, 400, "invalid_params", "cols"},
		{"rows 0", `{"rows": 0}`, 400, "invalid_params", "rows"},
		{"negative cols", `{"cols": -1}`, 400, "invalid_params", "cols"},
		{"negative rows", `{"rows": -24}`, 400, "invalid_params", "rows"},
		{"cols over 1000", `{"cols": 1001}`, 400, "invalid_params", "cols"},
		{"rows over 1000", `{"rows": 4000}`, 400, "invalid_params", "rows"},
		{"cols not a number", `{"cols": "wide"}`, 400, "invalid_params", ""},
		{"a command not allowed", `{"command": "python3"}`, 403, "command_not_allowed", "allowedCommands"},
		{"args without a command", `{"args": ["-c", "true"]}`, 400, "invalid_params", "args"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := open(tc.body)
			code, rule, msg := terminalErrorOf(t, a.body)
			if a.status != tc.status || code != tc.code || rule != tc.rule {
				t.Fatalf("%s: %d %s (rule %q: %s), want %d %s rule %q", tc.body, a.status, code, rule, msg, tc.status, tc.code, tc.rule)
			}
		})
	}

	// The default shell is refused where allowedCommands has none.
	noShell, _ := newTerminalServer(t, `{"allowedCommands": ["echo"]}`)
	nsID := noShell.session(t)
	a := noShell.do(t, http.MethodPost, "/v1/sessions/"+nsID+"/terminals", noShell.token(t, "dev", "", auth.AllScopes()...), nil)
	if code, rule, _ := terminalErrorOf(t, a.body); a.status != 403 || code != "command_not_allowed" || rule != "allowedCommands" {
		t.Fatalf("default shell not allowed: %d %s", a.status, a.body)
	}

	// Unknown terminals, and another tenant's: 404, the same bytes.
	first := open(`{"command": "sleep", "args": ["100"]}`)
	tid := jsonOf(t, first.body)["id"].(string)
	otherTok := other.token(t, "dev", "", auth.AllScopes()...)
	for _, tc := range []struct {
		name, path, token string
	}{
		{"unknown terminal", "/v1/sessions/" + id + "/terminals/tnope", tok},
		{"another tenant's session", "/v1/sessions/" + id + "/terminals/" + tid, otherTok},
		{"another tenant's session, list", "/v1/sessions/" + id + "/terminals", otherTok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range []string{http.MethodGet, http.MethodDelete} {
				if tc.path == "/v1/sessions/"+id+"/terminals" && m == http.MethodDelete {
					continue
				}
				a := s.do(t, m, tc.path, tc.token, nil)
				if code, _, msg := terminalErrorOf(t, a.body); a.status != 404 || code != "not_found" || msg != "not found" {
					t.Fatalf("%s %s: %d %s", m, tc.path, a.status, a.body)
				}
			}
		})
	}
	if _, resp, err := attachWS(t, s, otherTok, id, tid, ""); err == nil || resp == nil || resp.StatusCode != 404 {
		t.Fatalf("another tenant's attach: %v %v", resp, err)
	}
	if _, resp, err := attachWS(t, s, tok, id, "tnope", ""); err == nil || resp == nil || resp.StatusCode != 404 {
		t.Fatalf("unknown terminal's attach: %v %v", resp, err)
	}

	// Without tools:exec: 403 naming the scope, for the attach too.
	readTok := s.token(t, "dev", "", auth.ScopeSessions, auth.ScopeToolsRead, auth.ScopeToolsWrite)
	if a := s.do(t, http.MethodPost, "/v1/sessions/"+id+"/terminals", readTok, nil); a.status != 403 || !strings.Contains(string(a.body), auth.ScopeToolsExec) {
		t.Fatalf("open without tools:exec: %d %s", a.status, a.body)
	}
	if _, resp, err := attachWS(t, s, readTok, id, tid, ""); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("attach without tools:exec: %v %v", resp, err)
	}

	// The 9th running terminal: 429 naming maxTerminals (8 by default).
	for i := 2; i <= 8; i++ {
		if a := open(`{"command": "sleep", "args": ["100"]}`); a.status != 201 {
			t.Fatalf("terminal %d: %d %s", i, a.status, a.body)
		}
	}
	a = open(`{"command": "sleep", "args": ["100"]}`)
	if code, rule, msg := terminalErrorOf(t, a.body); a.status != 429 || code != "quota_exceeded" || rule != "maxTerminals" || !strings.Contains(msg, "maxTerminals 8") {
		t.Fatalf("9th terminal: %d %s", a.status, a.body)
	}
	// Closing one makes room.
	if a := s.do(t, http.MethodDelete, "/v1/sessions/"+id+"/terminals/"+tid, tok, nil); a.status != 200 {
		t.Fatalf("close: %d %s", a.status, a.body)
	}
	if a := open(`{"command": "sleep", "args": ["100"]}`); a.status != 201 {
		t.Fatalf("after a close: %d %s", a.status, a.body)
	}
}

// mcpCall posts one tools/call to session's MCP endpoint and returns the JSON-RPC
// answer (the body may be an SSE event).
func mcpCall(t *testing.T, s *scopeServer, token, session, name, args string) map[string]any {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `}}`
	a := s.do(t, http.MethodPost, "/v1/sessions/"+session+"/mcp?toolsets=terminal", token, []byte(body), "Accept", "application/json, text/event-stream")
	raw := string(a.body)
	if i := strings.Index(raw, "data: "); i >= 0 {
		raw = strings.TrimSpace(raw[i+len("data: "):])
	}
	return jsonOf(t, []byte(raw))
}

// toolResult is a successful call's structured content, and whether it was isError.
func toolResult(t *testing.T, m map[string]any) (map[string]any, bool) {
	t.Helper()
	r, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("no result: %v", m)
	}
	sc, _ := r["structuredContent"].(map[string]any)
	isErr, _ := r["isError"].(bool)
	return sc, isErr
}

func TestTerminalTools(t *testing.T) {
	s, _ := newTerminalServer(t, terminalPolicy)
	id := s.session(t)
	tok := s.token(t, "agent", "", auth.AllScopes()...)
	open, _ := toolResult(t, mcpCall(t, s, tok, id, "terminalOpen", `{"cols": 60, "rows": 10}`))
	tid, _ := open["id"].(string)
	if tid == "" || open["command"] != "bash" || open["cols"] != 60.0 {
		t.Fatalf("terminalOpen: %v", open)
	}
	// A prompt answered: read -p, then the answer typed with Enter.
	if r, isErr := toolResult(t, mcpCall(t, s, tok, id, "terminalSend", `{"id":"`+tid+`","text":"read -p 'Your name? ' n; echo \"hello $n\"","keys":["Enter"]}`)); isErr || r["bytes"].(float64) == 0 {
		t.Fatalf("terminalSend: %v", r)
	}
	scr, _ := toolResult(t, mcpCall(t, s, tok, id, "terminalScreen", `{"id":"`+tid+`","waitFor":"^Your name\\? $|^Your name\\?$","timeoutMs":15000}`))
	if scr["matched"] != true {
		t.Fatalf("the prompt never showed: %v", scr)
	}
	toolResult(t, mcpCall(t, s, tok, id, "terminalSend", `{"id":"`+tid+`","text":"Ada","keys":["Enter"]}`))
	scr, _ = toolResult(t, mcpCall(t, s, tok, id, "terminalScreen", `{"id":"`+tid+`","waitFor":"^hello Ada$","timeoutMs":15000}`))
	lines, _ := scr["lines"].([]any)
	if scr["matched"] != true || len(lines) != 10 || scr["running"] != true {
		t.Fatalf("after the answer: %v", scr)
	}
	if cur, _ := scr["cursor"].(map[string]any); cur == nil {
		t.Fatalf("no cursor: %v", scr)
	}

	// An unknown key name: invalid params on the wire, and the terminal lives on.
	m := mcpCall(t, s, tok, id, "terminalSend", `{"id":"`+tid+`","keys":["Enter","Hyper-Q"]}`)
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != -32602.0 || !strings.Contains(e["message"].(string), "Hyper-Q") {
		t.Fatalf("unknown key: %v", m)
	}
	toolResult(t, mcpCall(t, s, tok, id, "terminalSend", `{"id":"`+tid+`","text":"echo still-$((2*3))","keys":["Enter"]}`))
	if scr, _ = toolResult(t, mcpCall(t, s, tok, id, "terminalScreen", `{"id":"`+tid+`","waitFor":"^still-6$","timeoutMs":15000}`)); scr["matched"] != true {
		t.Fatalf("after the refused key: %v", scr)
	}
	// Bounds of the screen's wait.
	m = mcpCall(t, s, tok, id, "terminalScreen", `{"id":"`+tid+`","timeoutMs":600001}`)
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != -32602.0 {
		t.Fatalf("timeoutMs over 10 minutes: %v", m)
	}
	m = mcpCall(t, s, tok, id, "terminalScreen", `{"id":"`+tid+`","waitFor":"(unclosed"}`)
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != -32602.0 {
		t.Fatalf("a waitFor that is no regexp: %v", m)
	}
	// An unknown terminal: a tool error.
	if _, isErr := toolResult(t, mcpCall(t, s, tok, id, "terminalScreen", `{"id":"tnope"}`)); !isErr {
		t.Fatal("an unknown terminal's screen was no error")
	}

	list, _ := toolResult(t, mcpCall(t, s, tok, id, "terminalList", `{}`))
	if ts, _ := list["terminals"].([]any); len(ts) != 1 {
		t.Fatalf("terminalList: %v", list)
	}
	closed, _ := toolResult(t, mcpCall(t, s, tok, id, "terminalClose", `{"id":"`+tid+`"}`))
	if closed["running"] != false || closed["endReason"] != "closed" {
		t.Fatalf("terminalClose: %v", closed)
	}
}

// TestTerminalAttachBrowserToken: a browser's WebSocket, which can't set Authorization,
// offers its token as the subprotocol bearer.<token>; the answer selects the terminal
// protocol and never echoes the token. A bad token is 401 before any upgrade.
func TestTerminalAttachBrowserToken(t *testing.T) {
	s, _ := newTerminalServer(t, terminalPolicy)
	id := s.session(t)
	tok := s.token(t, "dev", "", auth.AllScopes()...)
	a := s.do(t, http.MethodPost, "/v1/sessions/"+id+"/terminals", tok, []byte(`{"command": "sleep", "args": ["100"]}`))
	tid := jsonOf(t, a.body)["id"].(string)
	u := "ws" + strings.TrimPrefix(s.url, "http") + "/v1/sessions/" + id + "/terminals/" + tid + "/attach"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{Subprotocols: []string{api.TerminalProtocol, "bearer." + tok}})
	if err != nil {
		t.Fatalf("attach with the token as a subprotocol: %v", err)
	}
	defer conn.CloseNow()
	if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != api.TerminalProtocol {
		t.Fatalf("selected subprotocol %q, want %q", got, api.TerminalProtocol)
	}
	v := &viewer{t: t, conn: conn}
	v.until("ctl:attached")
	_, resp, err = websocket.Dial(ctx, u, &websocket.DialOptions{Subprotocols: []string{api.TerminalProtocol, "bearer.not-a-token"}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a bad token: %v %v", resp, err)
	}
}

// TestTerminalSlowViewer: a viewer that reads nothing holds neither the program nor cws
// up: the program writes 50 MB and ends while the viewer's socket is not read; when it
// reads again it is told how much it skipped, and gets the end of the output and the
// exit.
func TestTerminalSlowViewer(t *testing.T) {
	s, _ := newTerminalServer(t, terminalPolicy)
	id := s.session(t)
	tok := s.token(t, "dev", "", auth.AllScopes()...)
	a := s.do(t, http.MethodPost, "/v1/sessions/"+id+"/terminals", tok,
		[]byte(`{"command": "sh", "args": ["-c", "sleep 0.3; head -c 50000000 /dev/zero | tr '\\0' x; echo; echo the-end"]}`))
	if a.status != http.StatusCreated {
		t.Fatalf("open: %d %s", a.status, a.body)
	}
	tid := jsonOf(t, a.body)["id"].(string)
	v, _, err := attachWS(t, s, tok, id, tid, "")
	if err != nil {
		t.Fatal(err)
	}
	// Not a byte read until the program has ended.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		a := s.do(t, http.MethodGet, "/v1/sessions/"+id+"/terminals/"+tid, tok, nil)
		if jsonOf(t, a.body)["running"] == false {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the program did not end while its only viewer read nothing")
		}
	}
	skipped := v.until("ctl:skipped")
	if skipped["bytes"].(float64) <= 0 {
		t.Fatalf("skipped frame: %v", skipped)
	}
	v.until("the-end")
	if ex := v.until("ctl:exit"); ex["code"] != 0.0 {
		t.Fatalf("exit frame: %v", ex)
	}
}

// TestTerminalDrainClosesViewers: a draining server closes its attached viewers with
// "going away", and refuses new attaches the same way; the terminal lives on.
func TestTerminalDrainClosesViewers(t *testing.T) {
	s, _, router := newTerminalRouter(t, terminalPolicy)
	id := s.session(t)
	tok := s.token(t, "dev", "", auth.AllScopes()...)
	a := s.do(t, http.MethodPost, "/v1/sessions/"+id+"/terminals", tok, []byte(`{"command": "sleep", "args": ["100"]}`))
	tid := jsonOf(t, a.body)["id"].(string)
	v, _, err := attachWS(t, s, tok, id, tid, "")
	if err != nil {
		t.Fatal(err)
	}
	v.until("ctl:attached")
	router.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := v.conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("a viewer of a draining server: %v, want going away", err)
	}
	w, _, err := attachWS(t, s, tok, id, tid, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.conn.Read(ctx); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("an attach to a draining server: %v, want going away", err)
	}
	a = s.do(t, http.MethodGet, "/v1/sessions/"+id+"/terminals/"+tid, tok, nil)
	if jsonOf(t, a.body)["running"] != true {
		t.Fatalf("the terminal after the drain: %s", a.body)
	}
}

// TestTerminalAudit: the audit has a terminal's open and close with its size, and the
// attach with its bytes, but never what was typed.
func TestTerminalAudit(t *testing.T) {
	s, _ := newTerminalServer(t, terminalPolicy)
	id := s.session(t)
	tok := s.token(t, "dev", "", auth.AllScopes()...)
	a := s.do(t, http.MethodPost, "/v1/sessions/"+id+"/terminals", tok, []byte(`{"cols": 90, "rows": 33}`))
	tid := jsonOf(t, a.body)["id"].(string)
	v, _, err := attachWS(t, s, tok, id, tid, "")
	if err != nil {
		t.Fatal(err)
	}
	v.until("ctl:attached")
	v.send(websocket.MessageBinary, "echo typed-secret-1\r")
	v.until("typed-secret-1\r\n")
	v.conn.Close(websocket.StatusNormalClosure, "")
	mcpCall(t, s, tok, id, "terminalSend", `{"id":"`+tid+`","text":"echo typed-secret-2","keys":["Enter","Ctrl-U"]}`)
	s.do(t, http.MethodDelete, "/v1/sessions/"+id+"/terminals/"+tid, tok, nil)
	var body string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		a = s.do(t, http.MethodGet, "/v1/sessions/"+id+"/audit", tok, nil)
		body = string(a.body)
		if strings.Contains(body, "terminal.close") && strings.Contains(body, "terminal.attach") && strings.Contains(body, "terminalSend") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit: %d %s", a.status, body)
		}
	}
	for _, want := range []string{`"terminal.open"`, `\"cols\":90`, `\"rows\":33`, `"terminal.close"`, `"terminal.attach"`, `"target":"` + tid + `"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the audit lacks %s: %s", want, body)
		}
	}
	for _, secret := range []string{"typed-secret", "Ctrl-U"} {
		if strings.Contains(body, secret) {
			t.Errorf("the audit keeps what was typed (%s): %s", secret, body)
		}
	}
}
