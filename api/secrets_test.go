package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/api/mcp"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/secrets"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// specRecorder is sandboxtest.Local that keeps every Spec it was asked to create.
type specRecorder struct {
	*sandboxtest.Local
	mu    sync.Mutex
	specs []sandbox.Spec
}

func (r *specRecorder) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	r.mu.Lock()
	r.specs = append(r.specs, spec)
	r.mu.Unlock()
	return r.Local.Create(ctx, spec)
}

func (r *specRecorder) last() sandbox.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.specs[len(r.specs)-1]
}

type secretsServer struct {
	*scopeServer
	beta  *auth.Tenant
	specs *specRecorder
	store *memstore.Store
}

// newSecretsServer serves tenants acme (policy acmePolicy) and beta, with a secrets
// key and an egress CA when withKey.
func newSecretsServer(t *testing.T, withKey bool, acmePolicy string) *secretsServer {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.yaml")
	yaml := "tenants:\n" +
		"  - id: acme\n    issuer: acme-platform\n    keys:\n      - {kid: k1, alg: HS256, secret: \"" + scopesSecret + "\"}\n" +
		"  - id: beta\n    issuer: beta-platform\n    keys:\n      - {kid: k2, alg: HS256, secret: \"" + scopesSecret + "-beta\"}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	tenants, err := auth.LoadTenants(path)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := policy.Parse([]byte(acmePolicy))
	if err != nil {
		t.Fatal(err)
	}
	bp, _ := policy.Parse([]byte(`{"network": true}`))
	pols := policy.ByTenant{"acme": tp, "beta": bp}
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	specs := &specRecorder{Local: sandboxtest.New(t)}
	cfg := workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: store, Sandboxes: specs, Tenants: pols,
		DefaultImage: "test-image", PolicyTTL: time.Nanosecond, AdminTenant: "acme", Egress: &egress.Proxy{}}
	if withKey {
		cfg.SecretsKey, _ = secrets.ParseKey(strings.Repeat("42", 32))
		if cfg.Egress.CA, _, err = egress.NewCA(time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	svc := workspace.New(cfg)
	t.Cleanup(svc.Close)
	verifier := auth.NewVerifier(tenants, auth.VerifierOptions{})
	mh := mcp.New(mcp.Config{Service: svc, Verifier: verifier, Tenants: pols})
	hs := httptest.NewServer(api.New(api.Config{Service: svc, Verifier: verifier, MCP: mh, PublicURL: "http://cws.test"}))
	t.Cleanup(hs.Close)
	return &secretsServer{scopeServer: &scopeServer{url: hs.URL, tenant: tenants.Get("acme")}, beta: tenants.Get("beta"), specs: specs, store: store}
}

// the token scopes of the secrets tests: every default scope and secrets.
func withSecrets() []string { return append(auth.AllScopes(), auth.ScopeSecrets) }

func errorOf(t *testing.T, a answer) api.ErrorDetail {
	t.Helper()
	var b api.ErrorBody
	if err := json.Unmarshal(a.body, &b); err != nil {
		t.Fatalf("not an error body: %d %s", a.status, a.body)
	}
	return b.Error
}

// TestSecretsNoKey: without a key every secrets endpoint answers 501 saying how to set
// one, and a create that asks for a secret is refused the same way.
func TestSecretsNoKey(t *testing.T) {
	s := newSecretsServer(t, false, `{"network": true}`)
	tok := s.token(t, "ci", "", withSecrets()...)
	for _, r := range []struct{ method, path, body string }{
		{"PUT", "/v1/secrets/gh", `{"value": "v", "hosts": ["github.com"]}`},
		{"GET", "/v1/secrets", ""},
		{"DELETE", "/v1/secrets/gh", ""},
		{"POST", "/v1/sessions", `{"secrets": {"GITHUB_TOKEN": "gh"}}`},
	} {
		var body []byte
		if r.body != "" {
			body = []byte(r.body)
		}
		a := s.do(t, r.method, r.path, tok, body)
		e := errorOf(t, a)
		if a.status != http.StatusNotImplemented || e.Code != "not_configured" ||
			!strings.Contains(e.Message, "--secrets-key-file") || !strings.Contains(e.Message, "CWS_SECRETS_KEY") {
			t.Errorf("%s %s without a key: %d %s", r.method, r.path, a.status, a.body)
		}
	}
}

// TestSecretsAPI: written and listed, never shown; every bad input a 400 naming what
// is wrong; the scope is needed and is no default.
func TestSecretsAPI(t *testing.T) {
	s := newSecretsServer(t, true, `{"network": true}`)
	tok := s.token(t, "ci", "", withSecrets()...)
	const value = "ghp_THEVALUE_never_shown_1234"
	put := func(name, body string) answer {
		t.Helper()
		return s.do(t, "PUT", "/v1/secrets/"+name, tok, []byte(body))
	}

	if a := s.do(t, "GET", "/v1/secrets", s.token(t, "ci", "", auth.AllScopes()...), nil); a.status != 403 || errorOf(t, a).Scope != auth.ScopeSecrets {
		t.Errorf("a token with every default scope: %d %s, want 403 naming scope secrets", a.status, a.body)
	}
	if a := put("gh", `{"value": "`+value+`", "hosts": ["github.com", "*.github.com"]}`); a.status != 201 || strings.Contains(string(a.body), value) {
		t.Fatalf("first put: %d %s", a.status, a.body)
	}
	if a := put("gh", `{"value": "`+value+`-2", "hosts": ["github.com"]}`); a.status != 200 || strings.Contains(string(a.body), value) {
		t.Fatalf("second put: %d %s, want 200 without the value", a.status, a.body)
	}
	admin := s.token(t, "ops", "", append(withSecrets(), auth.ScopeAdmin)...)
	a := s.do(t, "GET", "/v1/secrets", admin, nil)
	var list struct {
		Secrets []workspace.SecretInfo
		Count   int
	}
	_ = json.Unmarshal(a.body, &list)
	if a.status != 200 || list.Count != 1 || list.Secrets[0].Name != "gh" || list.Secrets[0].Hosts[0] != "github.com" ||
		list.Secrets[0].CreatedAt.IsZero() || strings.Contains(string(a.body), "ghp_") || strings.Contains(string(a.body), "sealed") {
		t.Errorf("list (admin): %d %s", a.status, a.body)
	}
	betaTok, _ := s.beta.Mint("b", time.Hour, "", withSecrets(), time.Now())
	if a := s.do(t, "GET", "/v1/secrets", betaTok, nil); a.status != 200 || strings.Contains(string(a.body), `"gh"`) {
		t.Errorf("another tenant's list: %d %s", a.status, a.body)
	}
	if a := s.do(t, "DELETE", "/v1/secrets/gh", betaTok, nil); a.status != 404 {
		t.Errorf("another tenant's delete: %d %s", a.status, a.body)
	}

	big := strings.Repeat("x", secrets.MaxValueBytes+1)
	bad := []struct {
		name, path, body, want string
	}{
		{"name with a space", "a%20b", `{"value": "v", "hosts": ["a.test"]}`, `secret name "a b" must match`},
		{"name too long", strings.Repeat("n", 65), `{"value": "v", "hosts": ["a.test"]}`, "must match [A-Za-z0-9_.-]{1,64}"},
		{"name not ASCII", "%C3%BC", `{"value": "v", "hosts": ["a.test"]}`, "must match"},
		{"value too large", "big", `{"value": "` + big + `", "hosts": ["a.test"]}`, "more than 65536"},
		{"value empty", "e", `{"value": "", "hosts": ["a.test"]}`, "value is empty"},
		{"value with a newline", "nl", `{"value": "a\nb", "hosts": ["a.test"]}`, "CR, LF or NUL"},
		{"hosts missing", "h", `{"value": "v"}`, "hosts is empty"},
		{"hosts empty", "h", `{"value": "v", "hosts": []}`, "hosts is empty"},
		{"hosts star", "h", `{"value": "v", "hosts": ["*"]}`, `"*"`},
		{"hosts double star", "h", `{"value": "v", "hosts": ["**.com"]}`, "**.com"},
		{"hosts wildcard over a TLD", "h", `{"value": "v", "hosts": ["*.com"]}`, "at least two labels"},
		{"hosts wildcard over a TLD with a port", "h", `{"value": "v", "hosts": ["*.io:443"]}`, "at least two labels"},
		{"hosts preset", "h", `{"value": "v", "hosts": ["@github"]}`, "no preset, no CIDR"},
		{"hosts CIDR", "h", `{"value": "v", "hosts": ["10.0.0.0/8"]}`, "no preset, no CIDR"},
		{"hosts URL", "h", `{"value": "v", "hosts": ["https://github.com"]}`, "https://github.com"},
		{"not JSON", "h", `value=v`, "malformed JSON"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			a := put(tc.path, tc.body)
			if e := errorOf(t, a); a.status != 400 || !strings.Contains(e.Message, tc.want) {
				t.Errorf("%d %s, want 400 with %q", a.status, a.body, tc.want)
			}
			if strings.Contains(string(a.body), big[:100]) {
				t.Error("the error quotes the value")
			}
		})
	}
	if a := s.do(t, "DELETE", "/v1/secrets/gh", tok, nil); a.status != 204 {
		t.Errorf("delete: %d %s", a.status, a.body)
	}
	if a := s.do(t, "DELETE", "/v1/secrets/gh", tok, nil); a.status != 404 {
		t.Errorf("delete again: %d %s", a.status, a.body)
	}
}

// TestSecretsDefaultScopes: secrets is never a tenant's default.
func TestSecretsDefaultScopes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	yaml := "tenants:\n  - id: acme\n    issuer: i\n    keys:\n      - {kid: k1, alg: HS256, secret: \"" + scopesSecret + "\"}\n    defaultScopes: [sessions, secrets]\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadTenants(path); err == nil || !strings.Contains(err.Error(), `"secrets" is never a default`) {
		t.Errorf("LoadTenants = %v", err)
	}
}

// TestSessionSecrets: a session asks for secrets by name; its sandbox gets only
// placeholders (and the CA, and git's helper), never a value; unknown names, another
// tenant's, names the policy doesn't list and bad variables are refused naming them.
func TestSessionSecrets(t *testing.T) {
	s := newSecretsServer(t, true, `{"network": true, "secrets": ["gh", "npm"], "envAllowlist": ["GITHUB_TOKEN"]}`)
	tok := s.token(t, "ci", "", withSecrets()...)
	const value = "ghp_VALUE_in_no_sandbox_5678"
	for _, name := range []string{"gh", "npm", "unlisted"} {
		if a := s.do(t, "PUT", "/v1/secrets/"+name, tok, []byte(`{"value": "`+value+`", "hosts": ["github.com", "*.githubusercontent.com:443"]}`)); a.status != 201 {
			t.Fatalf("put %s: %d %s", name, a.status, a.body)
		}
	}
	create := func(tok, body string) answer {
		t.Helper()
		return s.do(t, "POST", "/v1/sessions", tok, []byte(body))
	}
	a := create(tok, `{"secrets": {"GITHUB_TOKEN": "gh", "NPM_TOKEN": "npm"}}`)
	if a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	var v api.SessionView
	_ = json.Unmarshal(a.body, &v)
	if v.Secrets["GITHUB_TOKEN"] != "gh" || v.Secrets["NPM_TOKEN"] != "npm" || strings.Contains(string(a.body), "cws-secret-") {
		t.Errorf("the session's view: %s", a.body)
	}
	spec := s.specs.last()
	all := fmt.Sprint(spec.Env)
	var vars map[string]string
	if err := json.Unmarshal([]byte(spec.Env[agent.EnvEgressVars]), &vars); err != nil {
		t.Fatalf("%s: %v", agent.EnvEgressVars, err)
	}
	if !strings.HasPrefix(vars["GITHUB_TOKEN"], "cws-secret-GITHUB_TOKEN-") || !strings.HasPrefix(vars["NPM_TOKEN"], "cws-secret-NPM_TOKEN-") ||
		vars["GIT_CONFIG_COUNT"] != "2" || vars["GIT_CONFIG_KEY_0"] != "credential.helper" ||
		!strings.Contains(vars["GIT_CONFIG_VALUE_0"]+vars["GIT_CONFIG_VALUE_1"], `github.com|*.githubusercontent.com) printf 'username=x-access-token\npassword=%s\n' "$GITHUB_TOKEN"`) ||
		!strings.Contains(spec.Env[agent.EnvEgressCA], "BEGIN CERTIFICATE") {
		t.Errorf("the sandbox's environment: %v", spec.Env)
	}
	if strings.Contains(all, value) || strings.Contains(all, "PRIVATE KEY") {
		t.Error("the sandbox's environment holds a value or the CA's key")
	}
	if a := s.do(t, "GET", "/v1/sessions/"+v.ID+"/audit", tok, nil); strings.Contains(string(a.body), value) {
		t.Error("the audit holds the value")
	}
	if a := create(tok, `{"secrets": {"GITHUB_TOKEN": "gh"}}`); a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	var vars2 map[string]string
	_ = json.Unmarshal([]byte(s.specs.last().Env[agent.EnvEgressVars]), &vars2)
	if vars2["GITHUB_TOKEN"] == vars["GITHUB_TOKEN"] {
		t.Error("two sessions got the same placeholder")
	}

	betaTok, _ := s.beta.Mint("b", time.Hour, "", withSecrets(), time.Now())
	refused := []struct {
		name, tok, body string
		status          int
		want            string
	}{
		{"unknown secret", tok, `{"secrets": {"X": "nope"}}`, 400, `unknown secret "nope"`},
		{"another tenant's secret", betaTok, `{"secrets": {"GITHUB_TOKEN": "gh"}}`, 400, `unknown secret "gh"`},
		{"not in the policy", tok, `{"secrets": {"X": "unlisted"}}`, 403, `secret "unlisted" is not in the policy's secrets`},
		{"bad variable", tok, `{"secrets": {"1X": "gh"}}`, 400, `variable "1X" must match`},
		{"variable in env too", tok, `{"env": {"GITHUB_TOKEN": "x"}, "secrets": {"GITHUB_TOKEN": "gh"}}`, 400, "in both env and secrets"},
		{"bad secret name", tok, `{"secrets": {"X": "a b"}}`, 400, `secret name "a b" must match`},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			a := create(tc.tok, tc.body)
			if e := errorOf(t, a); a.status != tc.status || !strings.Contains(e.Message, tc.want) {
				t.Errorf("%d %s, want %d with %q", a.status, a.body, tc.status, tc.want)
			}
		})
	}
}

// TestSessionSecretsDirect: a tenant whose sandboxes have a route of their own
// (network "direct") bypasses the proxy that puts secrets in: its sessions can't ask
// for any.
func TestSessionSecretsDirect(t *testing.T) {
	s := newSecretsServer(t, true, `{"network": "direct"}`)
	tok := s.token(t, "ci", "", withSecrets()...)
	if a := s.do(t, "PUT", "/v1/secrets/gh", tok, []byte(`{"value": "v", "hosts": ["github.com"]}`)); a.status != 201 {
		t.Fatalf("put: %d %s", a.status, a.body)
	}
	a := s.do(t, "POST", "/v1/sessions", tok, []byte(`{"secrets": {"GITHUB_TOKEN": "gh"}}`))
	if e := errorOf(t, a); a.status != 403 || e.Rule != "network" || !strings.Contains(e.Message, `"direct"`) {
		t.Errorf("%d %s, want 403 naming the direct network", a.status, a.body)
	}
}
