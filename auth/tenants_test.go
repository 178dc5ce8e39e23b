package auth

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadTenants(t *testing.T) {
	k := keysOnce()
	const okKey = `{kid: k1, alg: HS256, secret: "0123456789abcdef0123456789abcdef"}`
	one := func(fields string) string {
		return "tenants:\n  - id: acme\n    issuer: acme-platform\n" + fields
	}
	tests := []struct {
		name    string
		yaml    string
		files   map[string][]byte // extra files beside the tenants file
		wantErr []string          // substrings; none means success
	}{
		{"fixture", fixtureYAML, nil, nil},
		{"unknown field", one("    keys:\n      - {kid: k1, alg: HS256, secrt: x}\n"), nil,
			[]string{`tenants.yaml: unknown field "secrt"`}},
		{"unknown top-level field", "tenant:\n  - id: a\n", nil, []string{`unknown field "tenant"`}},
		{"missing public key file", one("    keys:\n      - {kid: k2, alg: EdDSA, publicKeyFile: acme.pub}\n"), nil,
			[]string{`tenants.yaml: tenant "acme": key "k2": publicKeyFile acme.pub: no such file (paths are relative to the tenants file)`}},
		{"missing secret file", one("    keys:\n      - {kid: k1, alg: HS256, secretFile: s.txt}\n"), nil,
			[]string{`tenant "acme": key "k1": secretFile s.txt: no such file`}},
		{"missing policy file", one("    policy: policies/acme.json\n    keys:\n      - " + okKey + "\n"), nil,
			[]string{`tenant "acme": policy policies/acme.json: no such file`}},
		{"short secret", one("    keys:\n      - {kid: k1, alg: HS256, secret: short}\n"), nil,
			[]string{`tenant "acme": key "k1": secret is 5 bytes; HS256 needs at least 32`}},
		{"short secret file", one("    keys:\n      - {kid: k1, alg: HS256, secretFile: s.txt}\n"), map[string][]byte{"s.txt": []byte("short\n")},
			[]string{`secret is 5 bytes`}},
		{"duplicate id", "tenants:\n  - {id: acme, issuer: a, keys: [" + okKey + "]}\n  - {id: acme, issuer: b, jwksURL: \"https://b.example/jwks\"}\n", nil,
			[]string{`tenant "acme": duplicate id`}},
		{"duplicate issuer", "tenants:\n  - {id: a, issuer: same, jwksURL: \"https://a.example/jwks\"}\n  - {id: b, issuer: same, jwksURL: \"https://b.example/jwks\"}\n", nil,
			[]string{`tenant "b": issuer "same" is also the issuer of tenant "a"`}},
		{"shared secret", "tenants:\n  - {id: a, issuer: a, keys: [" + okKey + "]}\n  - {id: b, issuer: b, keys: [" + okKey + "]}\n", nil,
			[]string{`tenant "b": key "k1": same secret as tenant "a" key "k1"`}},
		{"unsupported alg", one("    keys:\n      - {kid: k1, alg: HS512, secret: x}\n"), nil,
			[]string{`key "k1": alg "HS512" is not supported (use one of HS256, EdDSA, RS256, ES256)`}},
		{"alg none", one("    keys:\n      - {kid: k1, alg: none, secret: x}\n"), nil, []string{`alg "none" is not supported`}},
		{"missing alg", one("    keys:\n      - {kid: k1, secret: x}\n"), nil, []string{`key "k1": alg is required`}},
		{"alg does not match the key", one("    keys:\n      - {kid: k1, alg: EdDSA, publicKeyFile: rsa.pub}\n"),
			map[string][]byte{"rsa.pub": pemPublic(t, &k.rsa.PublicKey)},
			[]string{`key "k1": alg EdDSA needs an Ed25519 public key, not an RSA public key`}},
		{"ES256 with an Ed25519 key", one("    keys:\n      - {kid: k1, alg: ES256, publicKeyFile: ed.pub}\n"),
			map[string][]byte{"ed.pub": pemPublic(t, k.ed.Public())},
			[]string{`alg ES256 needs an ECDSA P-256 public key, not an Ed25519 public key`}},
		{"private key given", one("    keys:\n      - {kid: k1, alg: EdDSA, publicKeyFile: ed.key}\n"),
			map[string][]byte{"ed.key": []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
			[]string{`publicKeyFile ed.key: is a PRIVATE KEY; give cws the public key only`}},
		{"not PEM", one("    keys:\n      - {kid: k1, alg: EdDSA, publicKeyFile: ed.pub}\n"), map[string][]byte{"ed.pub": []byte("hello")},
			[]string{`publicKeyFile ed.pub: no PEM block found`}},
		{"HS256 with a public key file", one("    keys:\n      - {kid: k1, alg: HS256, publicKeyFile: x.pub}\n"), nil,
			[]string{`HS256 keys take secret or secretFile, not publicKeyFile`}},
		{"secret and secretFile", one("    keys:\n      - {kid: k1, alg: HS256, secret: x, secretFile: y}\n"), nil,
			[]string{`HS256 keys need exactly one of secret and secretFile`}},
		{"EdDSA with a secret", one("    keys:\n      - {kid: k1, alg: EdDSA, secret: x}\n"), nil,
			[]string{`EdDSA keys take publicKeyFile, not a secret`}},
		{"duplicate kid", one("    keys:\n      - " + okKey + "\n      - " + okKey + "\n"), nil, []string{`key "k1": duplicate kid`}},
		{"missing kid", one("    keys:\n      - {alg: HS256, secret: \"0123456789abcdef0123456789abcdef\"}\n"), nil,
			[]string{`tenant "acme": key #1: kid is required`}},
		{"no keys", one(""), nil, []string{`tenant "acme": no keys: add keys: or jwksURL:`}},
		{"no tenants", "tenants: []\n", nil, []string{`no tenants`}},
		{"missing id and issuer", "tenants:\n  - {keys: [" + okKey + "]}\n", nil,
			[]string{`tenant #1: id is required`, `tenant #1: issuer is required`}},
		{"bad id", "tenants:\n  - {id: \"Acme:1\", issuer: a, keys: [" + okKey + "]}\n", nil, []string{`tenant "Acme:1": id must be`}},
		{"http jwks", one("    jwksURL: http://keys.example/jwks\n"), nil, []string{`jwksURL: http://keys.example/jwks: must be https`}},
		{"http jwks on localhost", one("    jwksURL: http://127.0.0.1:8080/jwks\n"), nil, nil},
		{"several errors at once", "tenants:\n  - {id: a, issuer: a, keys: [{kid: k1, alg: HS256, secret: s}]}\n  - {id: b, issuer: b}\n", nil,
			[]string{`tenant "a": key "k1": secret is 1 bytes`, `tenant "b": no keys`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeKeyFiles(t, t.TempDir())
			for name, data := range tt.files {
				writeFile(t, filepath.Join(dir, name), data)
			}
			writeFile(t, filepath.Join(dir, "tenants.yaml"), []byte(tt.yaml))
			t.Chdir(dir) // so the error prefix is the path as given: "tenants.yaml"
			ts, err := LoadTenants("tenants.yaml")
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("LoadTenants: %v", err)
				}
				if len(ts.List()) == 0 {
					t.Fatal("no tenants")
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadTenants accepted:\n%s", tt.yaml)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q\n does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "0123456789abcdef") {
				t.Errorf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestTenantsFixture(t *testing.T) {
	dir := writeKeyFiles(t, t.TempDir())
	path := filepath.Join(dir, "tenants.yaml")
	writeFile(t, path, []byte(fixtureYAML))
	ts, err := LoadTenants(path)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"list order", len(ts.List()), 3},
		{"first id", ts.List()[0].ID, "acme"},
		{"unknown id", ts.Get("nobody") == nil, true},
		{"default audience", ts.Get("acme").Audience, DefaultAudience},
		{"set audience", ts.Get("beta").Audience, "cws-beta"},
		{"policy resolved", ts.Get("acme").PolicyFile, filepath.Join(dir, "acme.cws-policy.json")},
		{"no policy", ts.Get("beta").PolicyFile, ""},
		{"keys", len(ts.Get("acme").Keys), 4},
		{"key tenant", ts.Get("beta").Keys[0].Tenant, "beta"},
		{"secretFile newline trimmed", string(ts.Get("beta").Keys[0].material.([]byte)), betaSecret},
		{"issuers", strings.Join(ts.Issuers(), ","), "acme-platform,beta-platform,pub-platform"},
		{"key string has no material", strings.Contains(ts.Get("acme").Keys[0].String(), "0123"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
	if _, err := LoadTenants(filepath.Join(dir, "missing.yaml")); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing tenants file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func TestDevTenants(t *testing.T) {
	ts, secret := NewDevTenants()
	dev := ts.Get(DevTenantID)
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"issuer", dev.Issuer, DevIssuer},
		{"audience", dev.Audience, "cws"},
		{"kid", dev.Keys[0].ID, DevKeyID},
		{"alg", dev.Keys[0].Alg, AlgHS256},
		{"secret size", len(secret), 32},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
	if _, err := DevTenants([]byte("short")); err == nil {
		t.Error("DevTenants accepted a short secret")
	}
}
