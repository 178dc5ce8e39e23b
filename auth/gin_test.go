package auth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
)

func TestMiddleware(t *testing.T) {
	gin.SetMode(gin.TestMode)
	k := keysOnce()
	v := NewVerifier(loadFixture(t), VerifierOptions{Now: fixedClock})
	var failures []string
	r := gin.New()
	r.Use(v.Middleware(MiddlewareOptions{
		ResourceMetadataURL: MetadataURL("https://cws.test/"),
		OnFailure:           func(reason string) { failures = append(failures, reason) },
	}))
	r.GET("/v1/whoami", func(c *gin.Context) {
		p := PrincipalFrom(c.Request.Context())
		if p == nil || c.MustGet(GinKey).(*Principal) != p {
			c.Status(http.StatusInternalServerError)
			return
		}
		c.JSON(http.StatusOK, gin.H{"tenant": p.Tenant, "sub": p.Subject})
	})

	valid := sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(nil))
	expired := sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-time.Hour).Unix() }))
	const metadata = `resource_metadata="https://cws.test/.well-known/oauth-protected-resource"`
	tests := []struct {
		name      string
		header    string // Authorization
		status    int
		challenge string // WWW-Authenticate
		reason    string // passed to OnFailure
		message   string
	}{
		{"valid", "Bearer " + valid, http.StatusOK, "", "", ""},
		{"scheme is case-insensitive", "bearer " + valid, http.StatusOK, "", "", ""},
		{"no header", "", http.StatusUnauthorized, "Bearer " + metadata, ReasonMissingToken,
			`no bearer token: send "Authorization: Bearer <JWT>"`},
		{"basic auth", "Basic dXNlcjpwYXNz", http.StatusUnauthorized, "Bearer " + metadata, ReasonMissingToken, ""},
		{"expired", "Bearer " + expired, http.StatusUnauthorized,
			"Bearer " + metadata + `, error="invalid_token", error_description="token expired"`, ReasonExpired, "token expired"},
		{"garbage", "Bearer x.y.z", http.StatusUnauthorized,
			"Bearer " + metadata + `, error="invalid_token", error_description="token is malformed"`, ReasonMalformed, "token is malformed"},
		{"audience message is quoted safely", "Bearer " + sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["aud"] = "x" })),
			http.StatusUnauthorized,
			"Bearer " + metadata + `, error="invalid_token", error_description="token audience does not include ?cws?"`, ReasonAudience,
			`token audience does not include "cws"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			failures = nil
			req := httptest.NewRequest(http.MethodGet, "/v1/whoami", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := httptest.NewRecorder()
			r.ServeHTTP(rec, req)
			if rec.Code != tt.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, tt.status, rec.Body)
			}
			if got := rec.Header().Get("WWW-Authenticate"); got != tt.challenge {
				t.Errorf("WWW-Authenticate = %s\n                  want %s", got, tt.challenge)
			}
			if tt.status == http.StatusOK {
				if rec.Body.String() != `{"sub":"agent-1","tenant":"acme"}` {
					t.Errorf("body = %s", rec.Body)
				}
				if len(failures) != 0 {
					t.Errorf("OnFailure called: %v", failures)
				}
				return
			}
			if !slices.Equal(failures, []string{tt.reason}) {
				t.Errorf("OnFailure got %v, want [%s]", failures, tt.reason)
			}
			var body struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %s: %v", rec.Body, err)
			}
			if body.Error.Code != "unauthorized" || (tt.message != "" && body.Error.Message != tt.message) {
				t.Errorf("error = %+v, want unauthorized %q", body.Error, tt.message)
			}
		})
	}
}

func TestChallengeWithoutMetadata(t *testing.T) {
	tests := []struct {
		name, reason, desc, want string
	}{
		{"missing token", ReasonMissingToken, "x", "Bearer"},
		{"invalid", ReasonExpired, "token\nexpired\\", `Bearer error="invalid_token", error_description="token?expired?"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := challenge("", tt.reason, tt.desc); got != tt.want {
				t.Fatalf("challenge = %s, want %s", got, tt.want)
			}
		})
	}
}
