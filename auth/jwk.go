package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// jwk is one RFC 7517 JSON Web Key: the fields cws reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// parseJWKSet reads an RFC 7517 key set. Keys cws cannot use (other key
// types, curves or algs, encryption keys, symmetric keys) are skipped and
// reported in skipped; a set with no usable key is an error.
func parseJWKSet(tenant, source string, data []byte) (keys []Key, skipped []string, err error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, nil, fmt.Errorf("decode key set: %w", err)
	}
	for i, raw := range set.Keys {
		var j jwk
		if err := json.Unmarshal(raw, &j); err != nil {
			skipped = append(skipped, fmt.Sprintf("key #%d: %v", i+1, err))
			continue
		}
		alg, material, err := j.publicKey()
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("key #%d (kid %q): %v", i+1, j.Kid, err))
			continue
		}
		keys = append(keys, Key{ID: j.Kid, Alg: alg, Tenant: tenant, Source: source, material: material})
	}
	if len(keys) == 0 {
		return nil, skipped, fmt.Errorf("key set has no usable key (skipped: %s)", strings.Join(skipped, "; "))
	}
	return keys, skipped, nil
}

// publicKey returns the key and the one alg it is pinned to: the JWK's alg
// when present, else the alg its type implies.
func (j jwk) publicKey() (alg string, material any, err error) {
	if j.Use != "" && j.Use != "sig" {
		return "", nil, fmt.Errorf("use %q is not sig", j.Use)
	}
	switch j.Kty {
	case "OKP":
		if j.Crv != "Ed25519" {
			return "", nil, fmt.Errorf("OKP curve %q is not supported", j.Crv)
		}
		alg, err = pinAlg(j.Alg, AlgEdDSA, "Ed25519")
		if err != nil {
			return "", nil, err
		}
		x, err := b64(j.X, "x")
		if err != nil {
			return "", nil, err
		}
		if len(x) != ed25519.PublicKeySize {
			return "", nil, fmt.Errorf("x is %d bytes, want %d", len(x), ed25519.PublicKeySize)
		}
		material = ed25519.PublicKey(x)
	case "RSA":
		alg, err = pinAlg(j.Alg, AlgRS256)
		if err != nil {
			return "", nil, err
		}
		material, err = j.rsaKey()
	case "EC":
		if j.Crv != "P-256" {
			return "", nil, fmt.Errorf("EC curve %q is not supported", j.Crv)
		}
		alg, err = pinAlg(j.Alg, AlgES256)
		if err != nil {
			return "", nil, err
		}
		material, err = j.p256Key()
	case "oct":
		return "", nil, errors.New("symmetric keys are not accepted from a JWKS")
	default:
		return "", nil, fmt.Errorf("kty %q is not supported", j.Kty)
	}
	if err != nil {
		return "", nil, err
	}
	if err := checkMaterial(alg, material); err != nil {
		return "", nil, err
	}
	return alg, material, nil
}

// pinAlg returns want when the JWK's alg is empty or one of want's names.
func pinAlg(alg, want string, aliases ...string) (string, error) {
	if alg == "" || alg == want {
		return want, nil
	}
	for _, a := range aliases {
		if alg == a {
			return want, nil
		}
	}
	return "", fmt.Errorf("alg %q is not supported for this key type (want %s)", alg, want)
}

func (j jwk) rsaKey() (*rsa.PublicKey, error) {
	n, err := b64(j.N, "n")
	if err != nil {
		return nil, err
	}
	e, err := b64(j.E, "e")
	if err != nil {
		return nil, err
	}
	eInt := new(big.Int).SetBytes(e)
	if !eInt.IsInt64() || eInt.Int64() < 3 || eInt.Int64() > 1<<31-1 || eInt.Bit(0) == 0 {
		return nil, errors.New("e is not a valid RSA exponent")
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(eInt.Int64())}, nil
}

func (j jwk) p256Key() (*ecdsa.PublicKey, error) {
	x, err := b64(j.X, "x")
	if err != nil {
		return nil, err
	}
	y, err := b64(j.Y, "y")
	if err != nil {
		return nil, err
	}
	if len(x) != 32 || len(y) != 32 {
		return nil, errors.New("x and y must be 32 bytes each for P-256")
	}
	point := append(append([]byte{4}, x...), y...)
	k, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), point)
	if err != nil {
		return nil, fmt.Errorf("P-256 point: %w", err)
	}
	return k, nil
}

// b64 decodes a base64url member, tolerating padding.
func b64(s, member string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("%s is missing", member)
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", member, err)
	}
	return b, nil
}
