package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// testKeys are generated once per test binary: RSA generation is slow.
type testKeys struct {
	hs    []byte
	ed    ed25519.PrivateKey
	rsa   *rsa.PrivateKey
	ec    *ecdsa.PrivateKey
	ecBad *ecdsa.PrivateKey // a P-256 key no tenant has
}

var keysOnce = sync.OnceValue(func() testKeys {
	k := testKeys{hs: []byte("0123456789abcdef0123456789abcdef-acme")}
	var err error
	if _, k.ed, err = ed25519.GenerateKey(rand.Reader); err != nil {
		panic(err)
	}
	if k.rsa, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
		panic(err)
	}
	if k.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	if k.ecBad, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		panic(err)
	}
	return k
})

// testNow is the fixed clock of the tests.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const betaSecret = "beta-secret-beta-secret-beta-secret!!"

// fixtureYAML defines three tenants: acme (one key of each alg), beta (an
// HS256 secretFile) and pubonly (EdDSA and RS256 only).
const fixtureYAML = `tenants:
  - id: acme
    issuer: acme-platform
    policy: acme.cws-policy.json
    keys:
      - {kid: k-hs, alg: HS256, secret: "0123456789abcdef0123456789abcdef-acme"}
      - {kid: k-ed, alg: EdDSA, publicKeyFile: ed.pub}
      - {kid: k-rs, alg: RS256, publicKeyFile: keys/rsa.pub}
      - {kid: k-ec, alg: ES256, publicKeyFile: ec.pub}
  - id: beta
    issuer: beta-platform
    audience: cws-beta
    keys:
      - {kid: b-hs, alg: HS256, secretFile: beta.secret}
  - id: pubonly
    issuer: pub-platform
    keys:
      - {kid: p-ed, alg: EdDSA, publicKeyFile: ed.pub}
      - {kid: p-rs, alg: RS256, publicKeyFile: keys/rsa.pub}
`

// writeKeyFiles writes the public PEMs, beta's secret and acme's policy
// into dir, and returns dir.
func writeKeyFiles(t *testing.T, dir string) string {
	t.Helper()
	k := keysOnce()
	writeFile(t, filepath.Join(dir, "ed.pub"), pemPublic(t, k.ed.Public()))
	writeFile(t, filepath.Join(dir, "keys", "rsa.pub"), pemPublic(t, &k.rsa.PublicKey))
	writeFile(t, filepath.Join(dir, "ec.pub"), pemPublic(t, &k.ec.PublicKey))
	writeFile(t, filepath.Join(dir, "beta.secret"), []byte(betaSecret+"\n"))
	writeFile(t, filepath.Join(dir, "acme.cws-policy.json"), []byte("{}"))
	return dir
}

// loadFixture writes fixtureYAML with its key files and loads it.
func loadFixture(t *testing.T) *Tenants {
	t.Helper()
	dir := writeKeyFiles(t, t.TempDir())
	path := filepath.Join(dir, "tenants.yaml")
	writeFile(t, path, []byte(fixtureYAML))
	ts, err := LoadTenants(path)
	if err != nil {
		t.Fatalf("LoadTenants: %v", err)
	}
	return ts
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func pemPublic(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// claimsFor returns valid claims of tenant id with issuer iss, for testNow.
func claimsFor(id, iss string) jwt.MapClaims {
	return jwt.MapClaims{
		"iss":    iss,
		"aud":    "cws",
		"sub":    "agent-1",
		"tenant": id,
		"iat":    testNow.Unix(),
		"exp":    testNow.Add(time.Hour).Unix(),
	}
}

// acmeClaims returns valid claims of tenant acme changed by edit.
func acmeClaims(edit func(jwt.MapClaims)) jwt.MapClaims {
	c := claimsFor("acme", "acme-platform")
	if edit != nil {
		edit(c)
	}
	return c
}

// sign signs c with method and key, setting kid unless it is "".
func sign(t *testing.T, method jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	return s
}

func fixedClock() time.Time { return testNow }
