package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// The signing algorithms cws accepts. Each key is pinned to exactly one.
const (
	AlgHS256 = "HS256"
	AlgEdDSA = "EdDSA"
	AlgRS256 = "RS256"
	AlgES256 = "ES256"
)

// Algs lists the accepted algorithms.
var Algs = []string{AlgHS256, AlgEdDSA, AlgRS256, AlgES256}

const (
	// MinSecretSize is the shortest HS256 secret accepted, in bytes.
	MinSecretSize = 32
	// minRSABits is the smallest RSA modulus accepted.
	minRSABits = 2048
)

// Key is one verification key of a tenant. The key material is unexported so
// that it never ends up in logs, JSON or error messages.
type Key struct {
	ID     string // kid
	Alg    string // one of Algs; the only alg this key verifies
	Tenant string // the tenant the key belongs to
	Source string // where it came from, for operators: "secret", a file path or a JWKS URL

	material any // []byte, ed25519.PublicKey, *rsa.PublicKey or *ecdsa.PublicKey
}

// String names the key without its material.
func (k Key) String() string {
	return fmt.Sprintf("tenant %q key %q (%s, %s)", k.Tenant, k.ID, k.Alg, k.Source)
}

func supportedAlg(alg string) bool {
	for _, a := range Algs {
		if a == alg {
			return true
		}
	}
	return false
}

// checkMaterial reports whether material is a usable key for alg.
func checkMaterial(alg string, material any) error {
	switch alg {
	case AlgHS256:
		b, ok := material.([]byte)
		if !ok {
			return fmt.Errorf("alg HS256 needs a secret, not %s", describeKey(material))
		}
		if len(b) < MinSecretSize {
			return fmt.Errorf("secret is %d bytes; HS256 needs at least %d random bytes", len(b), MinSecretSize)
		}
	case AlgEdDSA:
		k, ok := material.(ed25519.PublicKey)
		if !ok || len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("alg EdDSA needs an Ed25519 public key, not %s", describeKey(material))
		}
	case AlgRS256:
		k, ok := material.(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("alg RS256 needs an RSA public key, not %s", describeKey(material))
		}
		if k.N.BitLen() < minRSABits {
			return fmt.Errorf("RSA key has %d bits; at least %d are needed", k.N.BitLen(), minRSABits)
		}
	case AlgES256:
		k, ok := material.(*ecdsa.PublicKey)
		if !ok || k.Curve != elliptic.P256() {
			return fmt.Errorf("alg ES256 needs an ECDSA P-256 public key, not %s", describeKey(material))
		}
	default:
		return fmt.Errorf("alg %q is not supported (use one of %s)", alg, strings.Join(Algs, ", "))
	}
	return nil
}

// describeKey names a key's type for error messages.
func describeKey(material any) string {
	switch k := material.(type) {
	case []byte:
		return "a secret"
	case ed25519.PublicKey:
		return "an Ed25519 public key"
	case *rsa.PublicKey:
		return "an RSA public key"
	case *ecdsa.PublicKey:
		return "an ECDSA " + k.Curve.Params().Name + " public key"
	default:
		return fmt.Sprintf("a %T", material)
	}
}

// parsePublicKeyPEM reads the first PEM block of data: a PKIX "PUBLIC KEY",
// a PKCS #1 "RSA PUBLIC KEY", or a "CERTIFICATE" whose public key is used.
func parsePublicKeyPEM(data []byte) (any, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block found (expected -----BEGIN PUBLIC KEY-----)")
	}
	switch block.Type {
	case "PUBLIC KEY":
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse public key: %w", err)
		}
		return k, nil
	case "RSA PUBLIC KEY":
		k, err := x509.ParsePKCS1PublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse RSA public key: %w", err)
		}
		return k, nil
	case "CERTIFICATE":
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate: %w", err)
		}
		return c.PublicKey, nil
	default:
		if strings.Contains(block.Type, "PRIVATE KEY") {
			return nil, fmt.Errorf("is a %s; give cws the public key only", block.Type)
		}
		return nil, fmt.Errorf("PEM block %q is not a public key", block.Type)
	}
}
