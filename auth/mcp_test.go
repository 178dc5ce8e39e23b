package auth

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
)

func TestTokenVerifier(t *testing.T) {
	k := keysOnce()
	v := NewVerifier(loadFixture(t), VerifierOptions{Now: fixedClock})
	verify := v.TokenVerifier()
	tests := []struct {
		name   string
		token  string
		reason string
	}{
		{"valid", sign(t, jwt.SigningMethodRS256, k.rsa, "k-rs", acmeClaims(func(c jwt.MapClaims) { c["scope"] = "a b" })), ""},
		{"expired", sign(t, jwt.SigningMethodRS256, k.rsa, "k-rs", acmeClaims(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-time.Hour).Unix() })), ReasonExpired},
		{"garbage", "nope", ReasonMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ti, err := verify(context.Background(), tt.token, nil)
			if tt.reason != "" {
				if !errors.Is(err, mcpauth.ErrInvalidToken) {
					t.Fatalf("err = %v, want one that is mcpauth.ErrInvalidToken", err)
				}
				if got := ReasonOf(err); got != tt.reason {
					t.Fatalf("reason = %q, want %q", got, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p := PrincipalFromTokenInfo(ti)
			if p == nil || p.Tenant != "acme" || ti.UserID != "acme:agent-1" || !slices.Equal(ti.Scopes, []string{"a", "b"}) ||
				!ti.Expiration.Equal(testNow.Add(time.Hour)) {
				t.Fatalf("TokenInfo = %+v, principal %+v", ti, p)
			}
		})
	}
	if PrincipalFromTokenInfo(nil) != nil || PrincipalFromTokenInfo(&mcpauth.TokenInfo{}) != nil {
		t.Error("PrincipalFromTokenInfo invented a principal")
	}
}

// TestRequireBearerToken runs the adapter under the go-sdk's own middleware.
func TestRequireBearerToken(t *testing.T) {
	ts, _ := NewDevTenants()
	v := NewVerifier(ts, VerifierOptions{}) // real clock: the SDK checks expiry with time.Now
	h := mcpauth.RequireBearerToken(v.TokenVerifier(), &mcpauth.RequireBearerTokenOptions{
		ResourceMetadataURL: "https://cws.test" + WellKnownPath,
		ClockSkew:           30 * time.Second,
	})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := PrincipalFrom(r.Context()) // found through the SDK's TokenInfo
		if p == nil {
			http.Error(w, "no principal", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(p.Subject))
	}))
	good, err := ts.Get(DevTenantID).Mint("agent-7", time.Hour, "", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		header string
		status int
		body   string
	}{
		{"valid", "Bearer " + good, http.StatusOK, "agent-7"},
		{"invalid", "Bearer " + good + "x", http.StatusUnauthorized, "invalid token: token signature is invalid\n"},
		{"missing", "", http.StatusUnauthorized, "no bearer token\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status || rec.Body.String() != tt.body {
				t.Fatalf("got %d %q, want %d %q", rec.Code, rec.Body, tt.status, tt.body)
			}
			if tt.status == http.StatusUnauthorized && !strings.Contains(rec.Header().Get("WWW-Authenticate"), "resource_metadata=") {
				t.Errorf("WWW-Authenticate = %q", rec.Header().Get("WWW-Authenticate"))
			}
		})
	}
}

func TestProtectedResourceMetadata(t *testing.T) {
	gin.SetMode(gin.TestMode)
	r := gin.New()
	h := ProtectedResourceMetadata("https://cws.test/mcp", []string{"acme-platform"})
	r.GET(WellKnownPath, h)
	r.OPTIONS(WellKnownPath, h)
	tests := []struct {
		method string
		status int
	}{
		{http.MethodGet, http.StatusOK},
		{http.MethodOptions, http.StatusNoContent},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, httptest.NewRequest(tt.method, WellKnownPath, nil))
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d", rec.Code, tt.status)
			}
			if tt.method != http.MethodGet {
				return
			}
			var got map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			want := `{"authorization_servers":["acme-platform"],"bearer_methods_supported":["header"],"resource":"https://cws.test/mcp","resource_name":"cws"}`
			if b, _ := json.Marshal(got); string(b) != want {
				t.Fatalf("metadata = %s\nwant %s", b, want)
			}
		})
	}
}
