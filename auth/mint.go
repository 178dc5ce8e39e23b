package auth

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Mint signs a token for sub with the tenant's first HS256 key, valid from
// now for ttl, optionally bound to session and granting scopes. It is for
// dev and tests (`cws token`): tenants with only public keys mint with their
// platform's private key.
func (t *Tenant) Mint(sub string, ttl time.Duration, session string, scopes []string, now time.Time) (string, error) {
	var key Key
	for _, k := range t.Keys {
		if k.Alg == AlgHS256 {
			key = k
			break
		}
	}
	if key.Alg == "" {
		return "", fmt.Errorf("tenant %q has no HS256 key: mint tokens with your platform's key", t.ID)
	}
	if sub == "" {
		return "", errors.New("mint: subject is required")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("mint: ttl must be positive, got %s", ttl)
	}
	for _, s := range scopes {
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			return "", fmt.Errorf("mint: scope %q must be a non-empty word without spaces", s)
		}
	}
	c := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    t.Issuer,
			Subject:   sub,
			Audience:  jwt.ClaimStrings{t.Audience},
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now),
			ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
		},
		Tenant:  t.ID,
		Session: session,
		Scope:   strings.Join(scopes, " "),
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = key.ID
	signed, err := tok.SignedString(key.material)
	if err != nil {
		return "", fmt.Errorf("mint token for tenant %q: %w", t.ID, err)
	}
	return signed, nil
}
