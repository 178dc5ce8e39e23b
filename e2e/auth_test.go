package e2e_test

import (
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/golang-jwt/jwt/v5"
)

// claimsFor are a valid token's claims for sub of tenant, to be spoiled per case.
func claimsFor(tenant, iss string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": iss, "aud": "cws", "sub": "alice", "tenant": tenant,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
}

func sign(t testing.TB, m jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// badTokens are the tokens cws must refuse, each with the reason it must count.
func badTokens(t testing.TB, fx *fixture) []struct{ name, token, reason string } {
	acme := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := claimsFor(tenantAcme, "acme-platform")
		if edit != nil {
			edit(c)
		}
		return c
	}
	hs := func(key []byte, kid string, c jwt.MapClaims) string {
		return sign(t, jwt.SigningMethodHS256, key, kid, c)
	}
	wrongKey := make([]byte, 32)
	_, _ = rand.Read(wrongKey)
	expired := func(c jwt.MapClaims) {
		c["iat"], c["nbf"], c["exp"] = time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-2*time.Hour).Unix(), time.Now().Add(-time.Hour).Unix()
	}
	secret, kid := fx.secrets[tenantAcme], fx.kids[tenantAcme]
	edgeClaims := claimsFor(tenantEdge, "edge-platform")
	betaClaims := claimsFor(tenantBeta, "beta-platform")
	return []struct{ name, token, reason string }{
		{"alg none", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, kid, acme(nil)), auth.ReasonAlg},
		{"HS256 signed with an EdDSA public key", hs(fx.edgePub, fx.kids[tenantEdge], edgeClaims), auth.ReasonAlg},
		{"HS256 signed with an EdDSA public key, no kid", hs(fx.edgePub, "", edgeClaims), auth.ReasonAlg},
		{"wrong key", hs(wrongKey, kid, acme(nil)), auth.ReasonSignature},
		{"expired", hs(secret, kid, acme(expired)), auth.ReasonExpired},
		{"expired and wrong key", hs(wrongKey, kid, acme(expired)), auth.ReasonSignature},
		{"wrong iss", hs(secret, kid, acme(func(c jwt.MapClaims) { c["iss"] = "evil-platform" })), auth.ReasonIssuer},
		{"another tenant's iss", hs(secret, kid, acme(func(c jwt.MapClaims) { c["iss"] = "beta-platform" })), auth.ReasonTenant},
		{"wrong aud", hs(secret, kid, acme(func(c jwt.MapClaims) { c["aud"] = "not-cws" })), auth.ReasonAudience},
		{"missing exp", hs(secret, kid, acme(func(c jwt.MapClaims) { delete(c, "exp") })), auth.ReasonMissingClaim},
		{"tenant A's key signs tenant: B", hs(secret, kid, betaClaims), auth.ReasonTenant},
		{"tenant A's key signs tenant: B, no kid", hs(secret, "", betaClaims), auth.ReasonSignature},
		{"1 MiB token", strings.Repeat("a", 1<<20), auth.ReasonTooLarge},
		{"no token", "", auth.ReasonMissingToken},
	}
}

// TestAuthRejections sends each bad token to REST and to /mcp through the real router:
// each is a 401 whose WWW-Authenticate points at the RFC 9728 metadata, and counts
// exactly once in cws_auth_failures_total under its reason.
func TestAuthRejections(t *testing.T) {
	fx := newFixture(t)
	p := newInproc(t, fx)
	endpoints := []struct {
		name, method, path string
		body               []byte
		hdr                map[string]string
	}{
		{"REST", http.MethodGet, "/v1/sessions", nil, nil},
		{"MCP", http.MethodPost, "/mcp", []byte(initializeBody), mcpHeaders},
	}
	for _, ep := range endpoints {
		for _, tc := range badTokens(t, fx) {
			t.Run(ep.name+"/"+tc.name, func(t *testing.T) {
				before := p.counter(t, "cws_auth_failures_total", map[string]string{"reason": tc.reason})
				all := p.authFailures(t)
				r := do(t, p.handler, "", ep.method, ep.path, tc.token, ep.body, ep.hdr)
				if r.status != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401; body %.300s", r.status, r.body)
				}
				if ch := r.header.Get("WWW-Authenticate"); !strings.Contains(ch, "resource_metadata=") || !strings.HasPrefix(ch, "Bearer") {
					t.Errorf("WWW-Authenticate = %q, want a Bearer challenge with resource_metadata", ch)
				}
				if got := p.counter(t, "cws_auth_failures_total", map[string]string{"reason": tc.reason}); got != before+1 {
					t.Errorf("cws_auth_failures_total{reason=%q} went %v → %v, want +1", tc.reason, before, got)
				}
				if got := p.authFailures(t); got != all+1 {
					t.Errorf("cws_auth_failures_total over all reasons went %v → %v, want +1 (counted once)", all, got)
				}
			})
		}
	}

	// The control: the same router accepts a good token on both.
	good := fx.token(t, tenantAcme, "alice", "")
	if r := do(t, p.handler, "", http.MethodGet, "/v1/sessions", good, nil, nil); r.status != http.StatusOK {
		t.Fatalf("a valid token on REST: %d %s", r.status, r.body)
	}
	c := connect(t, p.url+"/mcp", good, "2025-11-25")
	if v := c.InitializeResult().ProtocolVersion; v != "2025-11-25" {
		t.Fatalf("a valid token on /mcp negotiated %q", v)
	}
}

// authFailures sums cws_auth_failures_total over every reason.
func (p *inproc) authFailures(t testing.TB) float64 {
	t.Helper()
	var sum float64
	for _, r := range auth.Reasons {
		sum += p.counter(t, "cws_auth_failures_total", map[string]string{"reason": r})
	}
	return sum
}
