package auth

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// TestDefaultScopes: a tenant's defaultScopes (all when absent) is what a token without
// a scope claim gets; a token with one gets exactly its own.
func TestDefaultScopes(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef"
	tenant := func(extra string) string {
		return "tenants:\n  - id: acme\n    issuer: acme-platform\n    keys:\n      - {kid: k1, alg: HS256, secret: \"" + secret + "\"}\n" + extra
	}
	tests := []struct {
		name    string
		yaml    string
		claim   any // the scope claim; nil for none
		want    []string
		wantErr string // a load error
	}{
		{"absent: all scopes", tenant(""), nil, AllScopes(), ""},
		{"empty claim: the default", tenant(""), "", AllScopes(), ""},
		{"blank claim: the default", tenant(""), "  ", AllScopes(), ""},
		{"configured", tenant("    defaultScopes: [tools:read, tools:exec, tools:read]\n"), nil, []string{ScopeToolsRead, ScopeToolsExec}, ""},
		{"configured none", tenant("    defaultScopes: []\n"), nil, []string{}, ""},
		{"the claim wins", tenant("    defaultScopes: [tools:read]\n"), "sessions archive", []string{ScopeSessions, ScopeArchive}, ""},
		{"unknown names in the claim are kept, never matched", tenant(""), "openid tools:write", []string{"openid", ScopeToolsWrite}, ""},
		{"unknown default scope", tenant("    defaultScopes: [tools:read, tools:admin]\n"), nil, nil,
			`tenant "acme": defaultScopes: unknown scope "tools:admin" (known: tools:read, tools:write, tools:exec, sessions, archive, ports)`},
		{"admin is never a default", tenant("    defaultScopes: [sessions, admin]\n"), nil, nil,
			`tenant "acme": defaultScopes: "admin" is never a default`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "tenants.yaml")
			writeFile(t, path, []byte(tt.yaml))
			ts, err := LoadTenants(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadTenants error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := acmeClaims(func(c jwt.MapClaims) {
				if tt.claim != nil {
					c["scope"] = tt.claim
				}
			})
			p, err := NewVerifier(ts, VerifierOptions{Now: fixedClock}).Verify(context.Background(), sign(t, jwt.SigningMethodHS256, []byte(secret), "k1", c))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Scopes, tt.want) || (p.Scopes == nil) != (tt.want == nil) {
				t.Errorf("scopes = %q, want %q", p.Scopes, tt.want)
			}
		})
	}
}

func TestDevTenantsDefaultScopes(t *testing.T) {
	ts, _ := NewDevTenants()
	if got := ts.Get(DevTenantID).DefaultScopes; !slices.Equal(got, AllScopes()) {
		t.Errorf("dev tenant's default scopes = %q, want all", got)
	}
}

func TestParseScopes(t *testing.T) {
	tests := []struct {
		in      []string
		want    []string
		wantErr string
	}{
		{nil, nil, ""},
		{[]string{"tools:read tools:write"}, []string{ScopeToolsRead, ScopeToolsWrite}, ""},
		{[]string{"tools:read,tools:exec", "sessions", " archive ,tools:read"}, []string{ScopeToolsRead, ScopeToolsExec, ScopeSessions, ScopeArchive}, ""},
		{[]string{"tools:read", "tools:rwx"}, nil, `unknown scope "tools:rwx"`},
	}
	for _, tt := range tests {
		got, err := ParseScopes(tt.in...)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseScopes(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseScopes(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
