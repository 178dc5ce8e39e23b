package auth

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestVerify(t *testing.T) {
	k := keysOnce()
	ts := loadFixture(t)
	v := NewVerifier(ts, VerifierOptions{Now: fixedClock})
	edPEM := pemPublic(t, k.ed.Public())
	rsaPEM := pemPublic(t, &k.rsa.PublicKey)
	otherSecret := []byte("another-secret-another-secret-another")

	tests := []struct {
		name   string
		token  func() string
		reason string // "" means valid
	}{
		{"HS256 valid", func() string { return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(nil)) }, ""},
		{"EdDSA valid", func() string { return sign(t, jwt.SigningMethodEdDSA, k.ed, "k-ed", acmeClaims(nil)) }, ""},
		{"RS256 valid", func() string { return sign(t, jwt.SigningMethodRS256, k.rsa, "k-rs", acmeClaims(nil)) }, ""},
		{"ES256 valid", func() string { return sign(t, jwt.SigningMethodES256, k.ec, "k-ec", acmeClaims(nil)) }, ""},
		{"no kid tries the keys of the alg", func() string { return sign(t, jwt.SigningMethodES256, k.ec, "", acmeClaims(nil)) }, ""},
		{"HS256 secretFile of beta", func() string {
			c := claimsFor("beta", "beta-platform")
			c["aud"] = []string{"other", "cws-beta"}
			return sign(t, jwt.SigningMethodHS256, []byte(betaSecret), "b-hs", c)
		}, ""},
		{"expired within leeway", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-10 * time.Second).Unix() }))
		}, ""},
		{"iat in the future within leeway", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["iat"] = testNow.Add(10 * time.Second).Unix() }))
		}, ""},

		{"empty", func() string { return "" }, ReasonMissingToken},
		{"1 MiB is refused before parsing", func() string { return strings.Repeat("a", 1<<20) }, ReasonTooLarge},
		{"not a JWT", func() string { return "abc" }, ReasonMalformed},
		{"bad base64", func() string { return "a.b.c" }, ReasonMalformed},
		{"kid is not a string", func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodHS256, acmeClaims(nil))
			tok.Header["kid"] = 7
			s, _ := tok.SignedString(k.hs)
			return s
		}, ReasonMalformed},
		{"alg none", func() string {
			return sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "k-hs", acmeClaims(nil))
		}, ReasonAlg},
		{"alg none without kid", func() string {
			return sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", acmeClaims(nil))
		}, ReasonAlg},
		{"HS512 is not accepted", func() string { return sign(t, jwt.SigningMethodHS512, k.hs, "k-hs", acmeClaims(nil)) }, ReasonAlg},
		{"HS256 keyed with the RS256 key's PEM", func() string { return sign(t, jwt.SigningMethodHS256, rsaPEM, "k-rs", acmeClaims(nil)) }, ReasonAlg},
		{"HS256 keyed with the EdDSA key's PEM", func() string { return sign(t, jwt.SigningMethodHS256, edPEM, "k-ed", acmeClaims(nil)) }, ReasonAlg},
		{"HS256 keyed with a PEM, no kid, tenant without HS256 keys", func() string {
			return sign(t, jwt.SigningMethodHS256, edPEM, "", claimsFor("pubonly", "pub-platform"))
		}, ReasonAlg},
		{"HS256 keyed with a PEM, kid of the RS256 key of a public-key tenant", func() string {
			return sign(t, jwt.SigningMethodHS256, rsaPEM, "p-rs", claimsFor("pubonly", "pub-platform"))
		}, ReasonAlg},
		{"wrong secret", func() string { return sign(t, jwt.SigningMethodHS256, otherSecret, "k-hs", acmeClaims(nil)) }, ReasonSignature},
		{"wrong ES256 key", func() string { return sign(t, jwt.SigningMethodES256, k.ecBad, "k-ec", acmeClaims(nil)) }, ReasonSignature},
		{"wrong key without kid", func() string { return sign(t, jwt.SigningMethodES256, k.ecBad, "", acmeClaims(nil)) }, ReasonSignature},
		{"expired", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-time.Hour).Unix() }))
		}, ReasonExpired},
		// The signature is checked first: a forged token never learns whether its claims would pass.
		{"expired and forged", func() string {
			return sign(t, jwt.SigningMethodHS256, otherSecret, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-time.Hour).Unix() }))
		}, ReasonSignature},
		{"missing exp", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { delete(c, "exp") }))
		}, ReasonMissingClaim},
		{"missing exp and aud wrong", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { delete(c, "exp"); c["aud"] = "x" }))
		}, ReasonMissingClaim},
		{"missing aud", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { delete(c, "aud") }))
		}, ReasonMissingClaim},
		{"missing sub", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { delete(c, "sub") }))
		}, ReasonMissingClaim},
		{"missing tenant", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { delete(c, "tenant") }))
		}, ReasonMissingClaim},
		{"missing iss", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { delete(c, "iss") }))
		}, ReasonMissingClaim},
		{"exp of the wrong type", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["exp"] = "tomorrow" }))
		}, ReasonMalformed},
		{"unknown issuer", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["iss"] = "evil" }))
		}, ReasonIssuer},
		{"wrong audience", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["aud"] = "other" }))
		}, ReasonAudience},
		{"unknown tenant", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["tenant"] = "nobody" }))
		}, ReasonTenant},
		{"tenant A's key signs tenant B", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", claimsFor("beta", "beta-platform"))
		}, ReasonTenant},
		{"tenant A's issuer with tenant B", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["tenant"] = "beta" }))
		}, ReasonTenant},
		{"tenant A's key signs tenant B without kid", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "", claimsFor("beta", "beta-platform"))
		}, ReasonSignature},
		{"nbf in the future", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["nbf"] = testNow.Add(time.Hour).Unix() }))
		}, ReasonNotYetValid},
		{"iat in the future beyond leeway", func() string {
			return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["iat"] = testNow.Add(5 * time.Minute).Unix() }))
		}, ReasonNotYetValid},
		{"unknown kid", func() string { return sign(t, jwt.SigningMethodHS256, k.hs, "k-nope", acmeClaims(nil)) }, ReasonUnknownKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := v.Verify(context.Background(), tt.token())
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Verify: %v (reason %s)", err, ReasonOf(err))
				}
				if p.Subject != "agent-1" || p.Tenant == "" || p.ExpiresAt.IsZero() {
					t.Fatalf("principal = %+v", p)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify accepted the token: %+v", p)
			}
			if got := ReasonOf(err); got != tt.reason {
				t.Fatalf("reason = %q, want %q (err: %v)", got, tt.reason, err)
			}
			if !errors.Is(err, ErrInvalidToken) {
				t.Errorf("errors.Is(err, ErrInvalidToken) = false")
			}
			if msg := err.Error(); strings.Contains(msg, string(k.hs)) || strings.Contains(msg, "BEGIN") || len(msg) > 200 {
				t.Errorf("message leaks or is unbounded: %q", msg)
			}
		})
	}
}

func TestVerifyPrincipal(t *testing.T) {
	k := keysOnce()
	v := NewVerifier(loadFixture(t), VerifierOptions{Now: fixedClock})
	raw := sign(t, jwt.SigningMethodEdDSA, k.ed, "k-ed", acmeClaims(func(c jwt.MapClaims) {
		c["session"] = "s-42"
		c["scope"] = "files:read  git:write"
	}))
	p, err := v.Verify(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	want := Principal{Tenant: "acme", Subject: "agent-1", Session: "s-42", Scopes: []string{"files:read", "git:write"}, ExpiresAt: testNow.Add(time.Hour)}
	if p.Tenant != want.Tenant || p.Subject != want.Subject || p.Session != want.Session ||
		!slices.Equal(p.Scopes, want.Scopes) || !p.ExpiresAt.Equal(want.ExpiresAt) {
		t.Fatalf("principal = %+v, want %+v", p, want)
	}
	if !p.HasScope("git:write") || p.HasScope("git") {
		t.Errorf("HasScope wrong for %v", p.Scopes)
	}
}

func TestVerifierOptions(t *testing.T) {
	k := keysOnce()
	ts := loadFixture(t)
	expiredBy := func(d time.Duration) string {
		return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(func(c jwt.MapClaims) { c["exp"] = testNow.Add(-d).Unix() }))
	}
	tests := []struct {
		name   string
		opts   VerifierOptions
		token  string
		reason string
	}{
		{"default leeway accepts 20s", VerifierOptions{Now: fixedClock}, expiredBy(20 * time.Second), ""},
		{"leeway 5s refuses 20s", VerifierOptions{Now: fixedClock, Leeway: 5 * time.Second}, expiredBy(20 * time.Second), ReasonExpired},
		{"small size cap", VerifierOptions{Now: fixedClock, MaxTokenSize: 64}, expiredBy(0), ReasonTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewVerifier(ts, tt.opts).Verify(context.Background(), tt.token)
			if got := ReasonOf(err); got != tt.reason {
				t.Fatalf("reason = %q, want %q (err: %v)", got, tt.reason, err)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"foreign", errors.New("boom"), ReasonOther},
		{"wrapped", errorsJoin(reject(ReasonExpired, "token expired", nil)), ReasonExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ReasonOf(tt.err); got != tt.want {
				t.Fatalf("ReasonOf = %q, want %q", got, tt.want)
			}
		})
	}
	for _, r := range []string{ReasonMissingToken, ReasonTooLarge, ReasonMalformed, ReasonAlg, ReasonSignature,
		ReasonExpired, ReasonNotYetValid, ReasonIssuer, ReasonAudience, ReasonTenant, ReasonUnknownKey,
		ReasonMissingClaim, ReasonKeysUnavailable, ReasonOther} {
		if !slices.Contains(Reasons, r) {
			t.Errorf("Reasons lacks %q", r)
		}
	}
}

func errorsJoin(err error) error { return errors.Join(errors.New("context"), err) }
