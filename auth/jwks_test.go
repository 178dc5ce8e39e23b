package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// jwksServer serves a key set the test can change, and counts fetches.
type jwksServer struct {
	*httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	body    []byte
	status  int
}

func newJWKSServer(t *testing.T) *jwksServer {
	s := &jwksServer{status: http.StatusOK}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(s.status)
		_, _ = w.Write(s.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) publish(t *testing.T, status int, keys ...map[string]string) {
	body, err := json.Marshal(map[string]any{"keys": keys})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.body = status, body
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// jwkOf returns the public JWK of a test key.
func jwkOf(kid string, pub any) map[string]string {
	switch k := pub.(type) {
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64u(k), "use": "sig"}
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": kid, "alg": "RS256", "n": b64u(k.N.Bytes()), "e": b64u(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		x, y := k.X.FillBytes(make([]byte, 32)), k.Y.FillBytes(make([]byte, 32))
		return map[string]string{"kty": "EC", "crv": "P-256", "kid": kid, "x": b64u(x), "y": b64u(y)}
	}
	panic("unsupported key")
}

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

func TestJWKS(t *testing.T) {
	k := keysOnce()
	srv := newJWKSServer(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.yaml")
	writeFile(t, path, []byte("tenants:\n  - id: jw\n    issuer: jw-platform\n    jwksURL: "+srv.URL+"/jwks.json\n"))
	ts, err := LoadTenants(path)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: testNow}
	v := NewVerifier(ts, VerifierOptions{Now: clk.Now, HTTPClient: srv.Client()})

	claims := func() jwt.MapClaims {
		c := claimsFor("jw", "jw-platform")
		c["exp"] = testNow.Add(24 * time.Hour).Unix()
		return c
	}
	ed := func(kid string) string { return sign(t, jwt.SigningMethodEdDSA, k.ed, kid, claims()) }
	ec := func(kid string) string { return sign(t, jwt.SigningMethodES256, k.ec, kid, claims()) }
	rs := func(kid string) string { return sign(t, jwt.SigningMethodRS256, k.rsa, kid, claims()) }
	oct := map[string]string{"kty": "oct", "kid": "j-oct", "k": b64u(k.hs)}

	// The steps run in order against one verifier; fetches is the total
	// number of fetches the server has seen after the step.
	steps := []struct {
		name    string
		publish []map[string]string // nil keeps the set
		status  int                 // with publish; 0 means 200
		advance time.Duration
		tokens  []string
		reason  string
		fetches int64
	}{
		{name: "first use fetches", publish: []map[string]string{jwkOf("j1", k.ed.Public()), oct}, tokens: []string{ed("j1")}, fetches: 1},
		{name: "known kid is cached", tokens: []string{ed("j1"), ed("j1")}, fetches: 1},
		{name: "no kid uses the cached keys of the alg", tokens: []string{ed("")}, fetches: 1},
		{name: "JWK alg is pinned", tokens: []string{sign(t, jwt.SigningMethodHS256, k.hs, "j1", claims())}, reason: ReasonAlg, fetches: 1},
		{name: "symmetric JWKs are skipped", tokens: []string{sign(t, jwt.SigningMethodHS256, k.hs, "j-oct", claims())}, reason: ReasonUnknownKey, fetches: 1},
		{name: "new kid right after a fetch waits for the window",
			publish: []map[string]string{jwkOf("j1", k.ed.Public()), jwkOf("j2", &k.ec.PublicKey), jwkOf("j3", &k.rsa.PublicKey)},
			tokens:  []string{ec("j2")}, reason: ReasonUnknownKey, fetches: 1},
		{name: "rotation: new kid after the window refreshes once", advance: 31 * time.Second, tokens: []string{ec("j2"), rs("j3"), ec("j2")}, fetches: 2},
		{name: "many unknown kids cost at most one fetch per window", advance: 31 * time.Second,
			tokens: []string{ec("x1"), ec("x2"), ec("x3"), ec("x4"), ec("x5"), ec("x6")}, reason: ReasonUnknownKey, fetches: 3},
		{name: "still within the window", advance: 10 * time.Second, tokens: []string{ec("x7"), ec("x8")}, reason: ReasonUnknownKey, fetches: 3},
		{name: "fetch failure keeps cached keys", publish: []map[string]string{}, status: http.StatusInternalServerError,
			advance: 31 * time.Second, tokens: []string{ec("j2")}, fetches: 3},
		{name: "fetch failure for an unknown kid", tokens: []string{ec("x9")}, reason: ReasonKeysUnavailable, fetches: 4},
		{name: "stale set is refetched, and kept when that fails", advance: 2 * time.Hour, tokens: []string{ec("j2"), ec("j2")}, fetches: 5},
		{name: "removed keys stop working once refetched",
			publish: []map[string]string{jwkOf("j2", &k.ec.PublicKey)}, advance: 2 * time.Hour,
			tokens: []string{ed("j1")}, reason: ReasonUnknownKey, fetches: 6},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.publish != nil {
				status := st.status
				if status == 0 {
					status = http.StatusOK
				}
				srv.publish(t, status, st.publish...)
			}
			clk.Advance(st.advance)
			for i, raw := range st.tokens {
				_, err := v.Verify(context.Background(), raw)
				if got := ReasonOf(err); got != st.reason {
					t.Fatalf("token %d: reason = %q, want %q (err: %v)", i, got, st.reason, err)
				}
			}
			if got := srv.fetches.Load(); got != st.fetches {
				t.Fatalf("fetches = %d, want %d", got, st.fetches)
			}
		})
	}

	t.Run("concurrent unknown kids share one fetch", func(t *testing.T) {
		srv.publish(t, http.StatusOK, jwkOf("j2", &k.ec.PublicKey))
		clk.Advance(31 * time.Second)
		before := srv.fetches.Load()
		var wg sync.WaitGroup
		for range 32 {
			wg.Go(func() { _, _ = v.Verify(context.Background(), ec("nope")) })
		}
		wg.Wait()
		if got := srv.fetches.Load() - before; got != 1 {
			t.Fatalf("fetches = %d, want 1", got)
		}
	})
}

func TestParseJWKSet(t *testing.T) {
	k := keysOnce()
	edJWK := jwkOf("e", k.ed.Public())
	ecJWK := jwkOf("c", &k.ec.PublicKey)
	with := func(m map[string]string, key, val string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		out[key] = val
		return out
	}
	tests := []struct {
		name    string
		keys    []map[string]string
		wantAlg []string // of the usable keys; nil means the set is an error
	}{
		{"ed25519", []map[string]string{edJWK}, []string{AlgEdDSA}},
		{"ed25519 alg name", []map[string]string{with(edJWK, "alg", "Ed25519")}, []string{AlgEdDSA}},
		{"rsa", []map[string]string{jwkOf("r", &k.rsa.PublicKey)}, []string{AlgRS256}},
		{"p-256", []map[string]string{ecJWK}, []string{AlgES256}},
		{"unusable keys are skipped", []map[string]string{with(edJWK, "use", "enc"), ecJWK}, []string{AlgES256}},
		{"RS384 is not supported", []map[string]string{with(jwkOf("r", &k.rsa.PublicKey), "alg", "RS384")}, nil},
		{"P-384 is not supported", []map[string]string{with(ecJWK, "crv", "P-384")}, nil},
		{"point not on the curve", []map[string]string{with(ecJWK, "y", b64u(make([]byte, 32)))}, nil},
		{"short ed25519 x", []map[string]string{with(edJWK, "x", b64u([]byte("short")))}, nil},
		{"short rsa", []map[string]string{{"kty": "RSA", "n": b64u(big.NewInt(1<<62 - 57).Bytes()), "e": "AQAB"}}, nil},
		{"oct", []map[string]string{{"kty": "oct", "k": b64u(k.hs)}}, nil},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, _ := json.Marshal(map[string]any{"keys": tt.keys})
			keys, _, err := parseJWKSet("t", "test", data)
			if tt.wantAlg == nil {
				if err == nil {
					t.Fatalf("parseJWKSet accepted %s", data)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var algs []string
			for _, k := range keys {
				algs = append(algs, k.Alg)
				if k.Tenant != "t" {
					t.Errorf("key tenant = %q", k.Tenant)
				}
			}
			if len(algs) != len(tt.wantAlg) || algs[0] != tt.wantAlg[0] {
				t.Fatalf("algs = %v, want %v", algs, tt.wantAlg)
			}
		})
	}
}
