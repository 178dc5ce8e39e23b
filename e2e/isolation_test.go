package e2e_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// unknownID is a well-formed session id that nobody has.
func unknownID() string { return "s-" + strings.Repeat("q", 8) + randomHex(6) }

// probe is one request another tenant might make on a session id.
type probe struct {
	name, method, path string // path has {id}
	body               []byte
	hdr                map[string]string
}

var probes = []probe{
	{"get", http.MethodGet, "/v1/sessions/{id}", nil, nil},
	{"renew", http.MethodPost, "/v1/sessions/{id}/renew", nil, nil},
	{"tool", http.MethodPost, "/v1/sessions/{id}/tools/readFile", []byte(`{"path":"secret.txt"}`), nil},
	{"tool writes", http.MethodPost, "/v1/sessions/{id}/tools/writeFile", []byte(`{"path":"pwned.txt","contents":"x"}`), nil},
	{"download", http.MethodGet, "/v1/sessions/{id}/archive", nil, nil},
	{"upload", http.MethodPut, "/v1/sessions/{id}/archive", make([]byte, 1024), map[string]string{"Content-Type": "application/x-tar"}},
	{"diff", http.MethodGet, "/v1/sessions/{id}/diff", nil, nil},
	{"bound mcp", http.MethodPost, "/v1/sessions/{id}/mcp", []byte(initializeBody), mcpHeaders},
	{"delete", http.MethodDelete, "/v1/sessions/{id}", nil, nil},
}

// checkIsolation has tenant beta try every REST route and MCP on acme's session id,
// and on an unknown id: each answer must be the same bytes, a 404 (REST) or the same
// JSON-RPC error (MCP) but for the id the caller sent.
func checkIsolation(t *testing.T, fx *fixture, base, idA string) {
	t.Helper()
	idU := unknownID()
	beta := fx.token(t, tenantBeta, "mallory", "")
	for _, p := range probes {
		a := do(t, nil, base, p.method, strings.ReplaceAll(p.path, "{id}", idA), beta, p.body, p.hdr)
		u := do(t, nil, base, p.method, strings.ReplaceAll(p.path, "{id}", idU), beta, p.body, p.hdr)
		if a.status != http.StatusNotFound {
			t.Errorf("%s on another tenant's session: %d %s, want 404", p.name, a.status, a.body)
		}
		if a.status != u.status || !bytes.Equal(a.body, u.body) || a.header.Get("Content-Type") != u.header.Get("Content-Type") {
			t.Errorf("%s: another tenant's session answers %d %q %s; an unknown id %d %q %s",
				p.name, a.status, a.header.Get("Content-Type"), a.body, u.status, u.header.Get("Content-Type"), u.body)
		}
	}

	// MCP: beta tokens bound (session claim) to acme's id and to an unknown one.
	mcpURL := base + "/mcp"
	tokA, tokU := fx.token(t, tenantBeta, "mallory", idA), fx.token(t, tenantBeta, "mallory", idU)
	for _, tool := range []struct {
		name string
		args map[string]any
	}{
		{"readFile", map[string]any{"path": "secret.txt"}},
		{"writeFile", map[string]any{"path": "pwned.txt", "contents": "x"}},
		{"listFiles", map[string]any{}},
	} {
		wa, wu := rawToolCall(t, mcpURL, tokA, tool.name, tool.args), rawToolCall(t, mcpURL, tokU, tool.name, tool.args)
		if wa == nil || wu == nil {
			t.Fatalf("%s with a token bound to another tenant's session: %+v / unknown: %+v, want errors", tool.name, wa, wu)
		}
		if wa.Code != wu.Code || strings.ReplaceAll(wa.Message, idA, "ID") != strings.ReplaceAll(wu.Message, idU, "ID") ||
			!bytes.Equal(bytes.ReplaceAll(wa.Data, []byte(idA), []byte("ID")), bytes.ReplaceAll(wu.Data, []byte(idU), []byte("ID"))) {
			t.Errorf("MCP %s: another tenant's session answers %+v; an unknown id %+v", tool.name, wa, wu)
		}
	}
	// And through the go-sdk client.
	var codes [2]int64
	var msgs [2]string
	for i, tok := range []string{tokA, tokU} {
		c := connect(t, mcpURL, tok, "")
		_, err := c.callRaw("readFile", map[string]any{"path": "secret.txt"}, nil)
		var we *jsonrpc.Error
		if !errors.As(err, &we) {
			t.Fatalf("go-sdk readFile on a foreign/unknown bound session: %v, want a JSON-RPC error", err)
		}
		codes[i], msgs[i] = we.Code, strings.ReplaceAll(strings.ReplaceAll(we.Message, idA, "ID"), idU, "ID")
	}
	if codes[0] != codes[1] || msgs[0] != msgs[1] {
		t.Errorf("go-sdk: another tenant's session gives %d %q; an unknown id %d %q", codes[0], msgs[0], codes[1], msgs[1])
	}

	// beta got no session out of it, and acme's is intact.
	r := do(t, nil, base, http.MethodGet, "/v1/sessions", beta, nil, nil)
	if r.status != http.StatusOK || decode[struct{ Count int }](t, r).Count != 0 {
		t.Errorf("beta's sessions after the probes: %d %s, want none", r.status, r.body)
	}
}

// TestIsolationInProcess runs the probes through the real router over
// sandboxtest.Local, which counts sandbox calls: another tenant's id must not reach
// the sandbox layer at all.
func TestIsolationInProcess(t *testing.T) {
	fx := newFixture(t)
	p := newInproc(t, fx)
	acme := fx.token(t, tenantAcme, "alice", "")
	r := do(t, p.handler, "", http.MethodPost, "/v1/sessions", acme, nil, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	idA := decode[sessionView](t, r).ID
	if r := do(t, p.handler, "", http.MethodPost, "/v1/sessions/"+idA+"/tools/writeFile", acme, []byte(`{"path":"secret.txt","contents":"acme only"}`), nil); r.status != http.StatusOK {
		t.Fatalf("writeFile: %d %s", r.status, r.body)
	}
	creates, attaches := p.local.Creates, p.local.Attaches

	checkIsolation(t, fx, p.url, idA)

	if p.local.Creates != creates || p.local.Attaches != attaches {
		t.Errorf("sandbox calls during the probes: creates %d → %d, attaches %d → %d; want none",
			creates, p.local.Creates, attaches, p.local.Attaches)
	}
	r = do(t, p.handler, "", http.MethodPost, "/v1/sessions/"+idA+"/tools/readFile", acme, []byte(`{"path":"secret.txt"}`), nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "acme only") {
		t.Errorf("acme's session after the probes: %d %s", r.status, r.body)
	}
	boxes, _ := p.local.List(context.Background(), map[string]string{sandbox.LabelSession: idA})
	if len(boxes) != 1 {
		t.Fatalf("acme's sandbox: %+v", boxes)
	}
	if _, err := os.Stat(p.local.Path(boxes[0].ID, "pwned.txt")); err == nil {
		t.Errorf("a probe wrote into acme's workspace")
	}
}

// TestIsolationDocker runs the probes against the real `cws serve` on Docker and
// Redis.
func TestIsolationDocker(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantAcme, tenantBeta) })
	acme := fx.token(t, tenantAcme, "alice", "")
	r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions", acme, nil, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	idA := decode[sessionView](t, r).ID
	if r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions/"+idA+"/tools/writeFile", acme, []byte(`{"path":"secret.txt","contents":"acme only"}`), nil); r.status != http.StatusOK {
		t.Fatalf("writeFile: %d %s", r.status, r.body)
	}

	checkIsolation(t, fx, srv.url, idA)

	r = do(t, nil, srv.url, http.MethodPost, "/v1/sessions/"+idA+"/tools/listFiles", acme, []byte(`{}`), nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "secret.txt") || strings.Contains(string(r.body), "pwned") {
		t.Errorf("acme's session after the probes: %d %s", r.status, r.body)
	}
}
