package auth

import (
	"context"
	"slices"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
)

// Principal is who a verified token names: a subject (an agent, a user, a
// CI job) of a tenant.
type Principal struct {
	Tenant  string // tenant id
	Subject string // sub claim; never empty
	Session string // session claim; "" when the token is not bound to a session
	// Scopes is the scope claim split on spaces; a token without one (or with an empty
	// one) gets its tenant's DefaultScopes. Names cws does not know are kept and never
	// match: the token may carry scopes for other services.
	Scopes    []string
	ExpiresAt time.Time // exp claim
}

// HasScope reports whether the token granted scope s.
func (p *Principal) HasScope(s string) bool { return slices.Contains(p.Scopes, s) }

type principalKey struct{}

// WithPrincipal returns a copy of ctx that carries p.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the Principal in ctx, or nil. It finds one put there
// by [WithPrincipal] (the gin middleware) or, failing that, by the go-sdk's
// RequireBearerToken with [Verifier.TokenVerifier].
func PrincipalFrom(ctx context.Context) *Principal {
	if p, ok := ctx.Value(principalKey{}).(*Principal); ok {
		return p
	}
	return PrincipalFromTokenInfo(mcpauth.TokenInfoFromContext(ctx))
}
