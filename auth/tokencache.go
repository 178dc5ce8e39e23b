package auth

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Defaults of the verified-token cache.
const (
	DefaultTokenCacheSize   = 10_000
	DefaultTokenCacheMaxAge = 5 * time.Minute
)

// tokenCache remembers tokens that verified, keyed by the SHA-256 of the raw token, so
// that an agent's hundreds of calls with one token verify its signature once. An entry
// is used only while it would still verify:
//   - until exp (plus the leeway, as the parser allows), and never before nbf and iat
//     (minus the leeway);
//   - for at most maxAge after it was verified;
//   - while its tenant exists and the key that verified it is still one of the
//     token's candidate keys, found as Verify finds them: a key dropped from the
//     tenant's JWKS (a rotation seen by a refresh, or the JWKS growing stale and
//     fetched again) ends every entry it verified.
//
// Otherwise the token is verified in full again, which also reports why it fails.
type tokenCache struct {
	lru    *lru.Cache[[sha256.Size]byte, *tokenEntry]
	maxAge time.Duration
}

type tokenEntry struct {
	p         *Principal
	tenant    string
	kid, alg  string // of the token's header
	key       Key    // the key that verified it
	notBefore time.Time
	until     time.Time // the earlier of exp+leeway and verified+maxAge
}

// newTokenCache returns a cache of size entries (0 means DefaultTokenCacheSize), or
// nil when size is negative (no caching).
func newTokenCache(size int, maxAge time.Duration) *tokenCache {
	if size < 0 {
		return nil
	}
	if size == 0 {
		size = DefaultTokenCacheSize
	}
	c, err := lru.New[[sha256.Size]byte, *tokenEntry](size)
	if err != nil {
		panic(err) // unreachable: size > 0
	}
	return &tokenCache{lru: c, maxAge: orDefault(maxAge, DefaultTokenCacheMaxAge)}
}

// lookup returns the Principal of a cached token that would still verify at now.
func (v *Verifier) lookup(ctx context.Context, sum [sha256.Size]byte) (*Principal, bool) {
	e, ok := v.cache.lru.Get(sum)
	if !ok {
		return nil, false
	}
	now := v.now()
	if now.Before(e.notBefore) || !now.Before(e.until) || !v.stillTrusted(ctx, e) {
		v.cache.lru.Remove(sum)
		return nil, false
	}
	p := *e.p
	return &p, true
}

// stillTrusted reports whether e's tenant still exists and the key that verified e is
// still among the token's candidate keys.
func (v *Verifier) stillTrusted(ctx context.Context, e *tokenEntry) bool {
	t := v.tenants.Get(e.tenant)
	if t == nil {
		return false
	}
	keys, err := v.candidates(ctx, t, e.kid, e.alg)
	if err != nil {
		return false
	}
	for _, k := range keys {
		if sameKey(k, e.key) {
			return true
		}
	}
	return false
}

// remember caches p, verified by key from a token with header kid and alg.
func (v *Verifier) remember(sum [sha256.Size]byte, p *Principal, kid, alg string, key Key, nbf, iat time.Time) {
	now := v.now()
	e := &tokenEntry{p: p, tenant: p.Tenant, kid: kid, alg: alg, key: key, until: p.ExpiresAt.Add(v.leeway)}
	if limit := now.Add(v.cache.maxAge); limit.Before(e.until) {
		e.until = limit
	}
	for _, t := range []time.Time{nbf, iat} {
		if !t.IsZero() && t.Add(-v.leeway).After(e.notBefore) {
			e.notBefore = t.Add(-v.leeway)
		}
	}
	v.cache.lru.Add(sum, e)
}

// sameKey reports whether a and b are the same key: id, alg, tenant, source and
// material.
func sameKey(a, b Key) bool {
	if a.ID != b.ID || a.Alg != b.Alg || a.Tenant != b.Tenant || a.Source != b.Source {
		return false
	}
	switch m := a.material.(type) {
	case []byte:
		o, ok := b.material.([]byte)
		return ok && bytes.Equal(m, o)
	case interface{ Equal(crypto.PublicKey) bool }:
		return m.Equal(b.material)
	}
	return false
}
