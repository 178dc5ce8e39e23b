package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/auth"
)

// TestTokenScopes: cws token --scope is repeatable, takes space- or comma-separated
// lists, refuses unknown names, and without it the token has no scope claim (the
// tenant's default applies).
func TestTokenScopes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.yaml")
	yaml := "tenants:\n  - id: acme\n    issuer: acme-platform\n    defaultScopes: [tools:read, sessions]\n    keys:\n      - {kid: k1, alg: HS256, secret: \"" + testSecret + "\"}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ts, err := auth.LoadTenants(path)
	if err != nil {
		t.Fatal(err)
	}
	v := auth.NewVerifier(ts, auth.VerifierOptions{})
	tests := []struct {
		name    string
		args    []string
		want    []string
		wantErr string
	}{
		{"none: the tenant's default", nil, []string{auth.ScopeToolsRead, auth.ScopeSessions}, ""},
		{"space-separated", []string{"--scope", "tools:read tools:write"}, []string{auth.ScopeToolsRead, auth.ScopeToolsWrite}, ""},
		{"repeated and comma-separated", []string{"--scope", "tools:exec,archive", "--scope", "sessions", "--scope", "archive"},
			[]string{auth.ScopeToolsExec, auth.ScopeArchive, auth.ScopeSessions}, ""},
		{"unknown", []string{"--scope", "tools:read tools:all"}, nil, `--scope: unknown scope "tools:all" (known: tools:read, tools:write, tools:exec, sessions, archive, ports, secrets, admin)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"token", "--tenants", path, "--tenant", "acme", "--sub", "agent-7"}, tt.args...)
			err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("cws token: %v (%s)", err, errOut.String())
			}
			p, err := v.Verify(context.Background(), strings.TrimSpace(out.String()))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Scopes, tt.want) {
				t.Errorf("scopes = %q, want %q", p.Scopes, tt.want)
			}
		})
	}
}
