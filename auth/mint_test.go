package auth

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMint(t *testing.T) {
	ts := loadFixture(t)
	devs, _ := NewDevTenants()
	tests := []struct {
		name    string
		tenant  *Tenant
		sub     string
		ttl     time.Duration
		session string
		scopes  []string
		wantErr string
	}{
		{"dev", devs.Get(DevTenantID), "agent-1", time.Hour, "", nil, ""},
		{"session and scopes", ts.Get("acme"), "ci-job", time.Minute, "s-1", []string{"files:read", "git:write"}, ""},
		{"secretFile tenant with its audience", ts.Get("beta"), "agent-2", time.Hour, "", nil, ""},
		{"public keys only", ts.Get("pubonly"), "agent", time.Hour, "", nil,
			`tenant "pubonly" has no HS256 key: mint tokens with your platform's key`},
		{"no subject", ts.Get("acme"), "", time.Hour, "", nil, "subject is required"},
		{"no ttl", ts.Get("acme"), "a", 0, "", nil, "ttl must be positive"},
		{"scope with a space", ts.Get("acme"), "a", time.Hour, "", []string{"a b"}, "must be a non-empty word"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := tt.tenant.Mint(tt.sub, tt.ttl, tt.session, tt.scopes, testNow)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			all := ts
			if tt.tenant.ID == DevTenantID {
				all = devs
			}
			at := func(d time.Duration) func() time.Time { return func() time.Time { return testNow.Add(d) } }
			p, err := NewVerifier(all, VerifierOptions{Now: at(0)}).Verify(context.Background(), raw)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			want := tt.scopes
			if want == nil { // no scope claim: the tenant's default
				want = tt.tenant.DefaultScopes
			}
			if p.Tenant != tt.tenant.ID || p.Subject != tt.sub || p.Session != tt.session ||
				!slices.Equal(p.Scopes, want) || !p.ExpiresAt.Equal(testNow.Add(tt.ttl)) {
				t.Fatalf("principal = %+v", p)
			}
			_, err = NewVerifier(all, VerifierOptions{Now: at(tt.ttl + time.Minute)}).Verify(context.Background(), raw)
			if ReasonOf(err) != ReasonExpired {
				t.Fatalf("after ttl: %v, want expired", err)
			}
		})
	}
}
