package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// VerifierOptions tune a [Verifier]. The zero value is ready to use.
type VerifierOptions struct {
	// Leeway is the clock skew allowed on exp, nbf and iat. Zero means 30 s.
	Leeway time.Duration
	// MaxTokenSize is the longest token accepted, in bytes; longer ones are
	// refused before parsing. Zero means 8 KiB.
	MaxTokenSize int
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// HTTPClient fetches JWKS documents. Nil means http.DefaultClient (each
	// fetch is bounded by JWKSFetchTimeout anyway).
	HTTPClient *http.Client
	// JWKSFetchTimeout bounds one JWKS fetch. Zero means 10 s.
	JWKSFetchTimeout time.Duration
	// JWKSMinInterval is the least time between two fetches of one tenant's
	// JWKS, however many unknown kids arrive. Zero means 30 s.
	JWKSMinInterval time.Duration
	// JWKSMaxAge is how long a fetched JWKS is used before it is fetched
	// again (so removed keys stop working). Zero means 1 h.
	JWKSMaxAge time.Duration
	// Logger receives JWKS fetch failures. Nil discards them.
	Logger *slog.Logger
	// TokenCacheSize is how many verified tokens are remembered (see tokenCache):
	// zero means DefaultTokenCacheSize, negative turns the cache off.
	TokenCacheSize int
	// TokenCacheMaxAge is the longest a verified token is remembered, however far its
	// exp. Zero means DefaultTokenCacheMaxAge.
	TokenCacheMaxAge time.Duration
}

// Verifier checks tenants' JWTs. It is safe for concurrent use.
type Verifier struct {
	tenants *Tenants
	leeway  time.Duration
	maxSize int
	now     func() time.Time
	jwks    map[string]*jwksCache // by tenant id
	cache   *tokenCache           // nil: every token is verified in full
}

// NewVerifier returns a Verifier of the tokens of ts. It does no I/O: JWKS
// are fetched on first use.
func NewVerifier(ts *Tenants, opts VerifierOptions) *Verifier {
	v := &Verifier{
		tenants: ts,
		leeway:  orDefault(opts.Leeway, 30*time.Second),
		maxSize: opts.MaxTokenSize,
		now:     opts.Now,
		jwks:    map[string]*jwksCache{},
		cache:   newTokenCache(opts.TokenCacheSize, opts.TokenCacheMaxAge),
	}
	if v.maxSize <= 0 {
		v.maxSize = 8 << 10
	}
	if v.now == nil {
		v.now = time.Now
	}
	client := opts.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "auth")
	for _, t := range ts.list {
		if t.JWKSURL == "" {
			continue
		}
		v.jwks[t.ID] = &jwksCache{
			tenant:      t.ID,
			url:         t.JWKSURL,
			client:      client,
			timeout:     orDefault(opts.JWKSFetchTimeout, 10*time.Second),
			minInterval: orDefault(opts.JWKSMinInterval, 30*time.Second),
			maxAge:      orDefault(opts.JWKSMaxAge, time.Hour),
			now:         v.now,
			log:         log,
		}
	}
	return v
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// claims are the claims cws reads.
type claims struct {
	jwt.RegisteredClaims
	Tenant  string `json:"tenant,omitempty"`
	Session string `json:"session,omitempty"`
	Scope   string `json:"scope,omitempty"`
}

// Verify checks raw and returns who it names. Every error is an *[Error].
//
// The unverified claims only choose the tenant (tenant claim, cross-checked
// against iss) and its candidate keys (by kid; without a kid, every key of
// the token's alg). Each key then verifies the token with its own alg pinned.
// The signature is checked before the claims, so a forged token reports
// "signature" even when it is also expired.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Principal, error) {
	if raw == "" {
		return nil, reject(ReasonMissingToken, "no bearer token", nil)
	}
	if len(raw) > v.maxSize {
		return nil, reject(ReasonTooLarge, fmt.Sprintf("token is longer than %d bytes", v.maxSize), nil)
	}
	var sum [sha256.Size]byte
	if v.cache != nil {
		sum = sha256.Sum256([]byte(raw))
		if p, ok := v.lookup(ctx, sum); ok {
			return p, nil
		}
	}
	var unverified claims
	tok, _, err := jwt.NewParser().ParseUnverified(raw, &unverified)
	if err != nil {
		if errors.Is(err, jwt.ErrTokenUnverifiable) { // alg missing or unknown
			return nil, reject(ReasonAlg, algHint, err)
		}
		return nil, reject(ReasonMalformed, "token is malformed", err)
	}
	alg, _ := tok.Header["alg"].(string)
	if !supportedAlg(alg) {
		return nil, reject(ReasonAlg, algHint, nil)
	}
	kid, ok := tok.Header["kid"].(string)
	if !ok && tok.Header["kid"] != nil {
		return nil, reject(ReasonMalformed, "token header kid is not a string", nil)
	}
	t, err := v.tenantOf(&unverified)
	if err != nil {
		return nil, err
	}
	keys, err := v.candidates(ctx, t, kid, alg)
	if err != nil {
		return nil, err
	}
	var sigErr error
	for _, k := range keys {
		p, c, err := v.verifyWith(raw, t, k)
		if err == nil {
			if v.cache != nil {
				v.remember(sum, p, kid, alg, k, timeOf(c.NotBefore), timeOf(c.IssuedAt))
			}
			p := *p
			return &p, nil
		}
		if ReasonOf(err) != ReasonSignature {
			return nil, err // the key verified the signature; the claims are wrong
		}
		sigErr = err
	}
	return nil, sigErr
}

const algHint = "token alg is not accepted (use HS256, EdDSA, RS256 or ES256)"

// tenantOf finds the tenant the unverified claims name and checks that iss is
// its issuer.
func (v *Verifier) tenantOf(c *claims) (*Tenant, error) {
	if c.Tenant == "" {
		return nil, reject(ReasonMissingClaim, "token has no tenant claim", nil)
	}
	t := v.tenants.Get(c.Tenant)
	if t == nil {
		return nil, reject(ReasonTenant, "unknown tenant", nil)
	}
	switch {
	case c.Issuer == t.Issuer:
		return t, nil
	case c.Issuer == "":
		return nil, reject(ReasonMissingClaim, "token has no iss claim", nil)
	case v.tenants.byIss(c.Issuer) != nil:
		return nil, reject(ReasonTenant, "token's issuer is another tenant's", nil)
	default:
		return nil, reject(ReasonIssuer, "unknown issuer", nil)
	}
}

// candidates returns the keys that may have signed a token of t with kid and
// alg: the one key named kid (refreshing the JWKS once if needed), or with no
// kid every key of alg.
func (v *Verifier) candidates(ctx context.Context, t *Tenant, kid, alg string) ([]Key, error) {
	cache := v.jwks[t.ID]
	if kid != "" {
		k, ok := t.key(kid)
		if !ok && cache != nil {
			var err error
			k, ok, err = cache.key(ctx, kid)
			if !ok && err != nil {
				return nil, reject(ReasonKeysUnavailable, errKeysUnavailable.Error(), err)
			}
		}
		switch {
		case ok && k.Alg != alg:
			return nil, reject(ReasonAlg, fmt.Sprintf("token alg %s does not match its key's alg %s", alg, k.Alg), nil)
		case ok:
			return []Key{k}, nil
		case v.ownerOfKID(kid, t.ID):
			return nil, reject(ReasonTenant, "token's key belongs to another tenant", nil)
		default:
			return nil, reject(ReasonUnknownKey, "unknown key id", nil)
		}
	}
	var keys []Key
	for _, k := range t.Keys {
		if k.Alg == alg {
			keys = append(keys, k)
		}
	}
	if cache != nil {
		fetched, err := cache.all(ctx)
		if err != nil && len(keys) == 0 && len(fetched) == 0 {
			return nil, reject(ReasonKeysUnavailable, errKeysUnavailable.Error(), err)
		}
		for _, k := range fetched {
			if k.Alg == alg {
				keys = append(keys, k)
			}
		}
	}
	if len(keys) == 0 {
		return nil, reject(ReasonAlg, fmt.Sprintf("tenant has no %s key", alg), nil)
	}
	return keys, nil
}

// ownerOfKID reports whether a tenant other than except has a key kid,
// static or already fetched.
func (v *Verifier) ownerOfKID(kid, except string) bool {
	if v.tenants.ownerOfKID(kid, except) != nil {
		return true
	}
	for id, c := range v.jwks {
		if id == except {
			continue
		}
		if _, ok := findKey(c.cached(), kid); ok {
			return true
		}
	}
	return false
}

// verifyWith checks raw with k alone: its alg, signature, then the claims.
func (v *Verifier) verifyWith(raw string, t *Tenant, k Key) (*Principal, *claims, error) {
	p := jwt.NewParser(
		jwt.WithValidMethods([]string{k.Alg}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(t.Issuer),
		jwt.WithAudience(t.Audience),
		jwt.WithIssuedAt(),
		jwt.WithLeeway(v.leeway),
		jwt.WithTimeFunc(v.now),
	)
	var c claims
	if _, err := p.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return k.material, nil }); err != nil {
		return nil, nil, classify(err, t)
	}
	if c.Tenant != k.Tenant {
		return nil, nil, reject(ReasonTenant, "token's key belongs to another tenant", nil)
	}
	if c.Subject == "" {
		return nil, nil, reject(ReasonMissingClaim, "token has no sub claim", nil)
	}
	scopes := strings.Fields(c.Scope)
	if len(scopes) == 0 { // no scope claim: the tenant's default
		scopes = slices.Clone(t.DefaultScopes)
	}
	return &Principal{
		Tenant:    k.Tenant,
		Subject:   c.Subject,
		Session:   c.Session,
		Scopes:    scopes,
		ExpiresAt: c.ExpiresAt.Time,
	}, &c, nil
}

func timeOf(d *jwt.NumericDate) time.Time {
	if d == nil {
		return time.Time{}
	}
	return d.Time
}

// classify maps a jwt error to a reason. A missing claim wins over the
// others, then expiry, then the rest.
func classify(err error, t *Tenant) *Error {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return reject(ReasonMalformed, "token is malformed", err)
	case errors.Is(err, jwt.ErrTokenSignatureInvalid):
		return reject(ReasonSignature, "token signature is invalid", err)
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return reject(ReasonMissingClaim, "token is missing a required claim (exp, aud and iss are required)", err)
	case errors.Is(err, jwt.ErrTokenExpired):
		return reject(ReasonExpired, "token expired", err)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return reject(ReasonNotYetValid, "token is not valid yet (nbf is in the future)", err)
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return reject(ReasonNotYetValid, "token is not valid yet (iat is in the future)", err)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return reject(ReasonIssuer, "unknown issuer", err)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return reject(ReasonAudience, fmt.Sprintf("token audience does not include %q", t.Audience), err)
	default:
		return reject(ReasonMalformed, "token claims are invalid", err)
	}
}
