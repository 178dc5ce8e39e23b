package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestTokenCache shows when a verified token is answered from the cache, and that
// every change that would make it fail verification ends its entry.
func TestTokenCache(t *testing.T) {
	ts := loadFixture(t)
	k := keysOnce()
	newV := func(clk *clock, maxAge time.Duration) *Verifier {
		return NewVerifier(ts, VerifierOptions{Now: clk.Now, TokenCacheMaxAge: maxAge})
	}
	hs := func(edit func(jwt.MapClaims)) string {
		return sign(t, jwt.SigningMethodHS256, k.hs, "k-hs", acmeClaims(edit))
	}

	t.Run("a verified token is remembered, and its principal is the caller's own copy", func(t *testing.T) {
		v := newV(&clock{now: testNow}, 0)
		raw := hs(nil)
		p1, err := v.Verify(t.Context(), raw)
		if err != nil {
			t.Fatal(err)
		}
		p1.Subject = "changed by the caller"
		if _, ok := v.lookup(t.Context(), sha256.Sum256([]byte(raw))); !ok {
			t.Fatal("the token is not cached")
		}
		p2, err := v.Verify(t.Context(), raw)
		if err != nil || p2.Subject != "agent-1" || p2.Tenant != "acme" {
			t.Fatalf("cached verify = %+v, %v", p2, err)
		}
	})

	t.Run("refused from exactly exp plus the leeway", func(t *testing.T) {
		clk := &clock{now: testNow}
		v := newV(clk, 24*time.Hour)
		raw := hs(nil) // exp: testNow + 1h; leeway 30 s
		if _, err := v.Verify(t.Context(), raw); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour + 30*time.Second - time.Nanosecond)
		if _, err := v.Verify(t.Context(), raw); err != nil {
			t.Fatalf("a nanosecond before expiry: %v", err)
		}
		clk.Advance(time.Nanosecond)
		if _, err := v.Verify(t.Context(), raw); ReasonOf(err) != ReasonExpired {
			t.Fatalf("at expiry: %v, want %s", err, ReasonExpired)
		}
	})

	t.Run("never before nbf minus the leeway", func(t *testing.T) {
		clk := &clock{now: testNow.Add(10 * time.Minute)}
		v := newV(clk, 24*time.Hour)
		raw := hs(func(c jwt.MapClaims) { c["nbf"] = testNow.Add(10 * time.Minute).Unix() })
		if _, err := v.Verify(t.Context(), raw); err != nil {
			t.Fatal(err)
		}
		clk.Advance(-10 * time.Minute) // the clock stepped back
		if _, err := v.Verify(t.Context(), raw); ReasonOf(err) != ReasonNotYetValid {
			t.Fatalf("before nbf: %v, want %s", err, ReasonNotYetValid)
		}
	})

	t.Run("forgotten after the max age", func(t *testing.T) {
		clk := &clock{now: testNow}
		v := newV(clk, time.Minute)
		raw := hs(nil)
		if _, err := v.Verify(t.Context(), raw); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
		if _, ok := v.lookup(t.Context(), sha256.Sum256([]byte(raw))); ok {
			t.Fatal("still cached after the max age")
		}
	})

	t.Run("off when the size is negative", func(t *testing.T) {
		v := NewVerifier(ts, VerifierOptions{Now: fixedClock, TokenCacheSize: -1})
		if v.cache != nil {
			t.Fatal("cache is on")
		}
		if _, err := v.Verify(t.Context(), hs(nil)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestTokenCacheKeyRotation: a token verified by a JWKS key stops verifying from the
// cache once a refetched JWKS drops the key or gives its kid other material.
func TestTokenCacheKeyRotation(t *testing.T) {
	k := keysOnce()
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := newJWKSServer(t)
	path := filepath.Join(t.TempDir(), "tenants.yaml")
	writeFile(t, path, []byte("tenants:\n  - id: jw\n    issuer: jw-platform\n    jwksURL: "+srv.URL+"/jwks.json\n"))
	ts, err := LoadTenants(path)
	if err != nil {
		t.Fatal(err)
	}
	claims := func() jwt.MapClaims {
		c := claimsFor("jw", "jw-platform")
		c["exp"] = testNow.Add(48 * time.Hour).Unix()
		return c
	}
	cases := []struct {
		name    string
		kid     string
		rotated []map[string]string
		reason  string
	}{
		{"kid removed", "j1", []map[string]string{jwkOf("j2", &k.ec.PublicKey)}, ReasonUnknownKey},
		{"kid given new material", "j1", []map[string]string{jwkOf("j1", other.Public())}, ReasonSignature},
		{"no kid, key removed", "", []map[string]string{jwkOf("j2", other.Public())}, ReasonSignature},
		{"kid kept", "j1", []map[string]string{jwkOf("j1", k.ed.Public()), jwkOf("j2", &k.ec.PublicKey)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: testNow}
			v := NewVerifier(ts, VerifierOptions{Now: clk.Now, HTTPClient: srv.Client(), TokenCacheMaxAge: 24 * time.Hour})
			srv.publish(t, http.StatusOK, jwkOf("j1", k.ed.Public()))
			raw := sign(t, jwt.SigningMethodEdDSA, k.ed, tc.kid, claims())
			if _, err := v.Verify(context.Background(), raw); err != nil {
				t.Fatal(err)
			}
			srv.publish(t, http.StatusOK, tc.rotated...)
			clk.Advance(2 * time.Hour) // the JWKS (max age 1 h) is fetched again on next use
			_, err := v.Verify(context.Background(), raw)
			if got := ReasonOf(err); got != tc.reason {
				t.Fatalf("after rotation: reason %q (%v), want %q", got, err, tc.reason)
			}
		})
	}
}
