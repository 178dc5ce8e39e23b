package auth

import (
	"context"
	"fmt"
	"net/http"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
)

// TokenInfoKey is the TokenInfo.Extra key that holds the *Principal.
const TokenInfoKey = "principal"

// TokenVerifier adapts v to the go-sdk's bearer-token middleware:
//
//	mcpauth.RequireBearerToken(v.TokenVerifier(), &mcpauth.RequireBearerTokenOptions{
//		ResourceMetadataURL: base + auth.WellKnownPath,
//		ClockSkew:           30 * time.Second, // match VerifierOptions.Leeway
//	})
//
// Rejections wrap both mcpauth.ErrInvalidToken (so the SDK answers 401) and
// the *[Error] with its reason. UserID is "tenant:sub", which the SDK uses to
// bind MCP sessions to their user.
func (v *Verifier) TokenVerifier() mcpauth.TokenVerifier {
	return func(ctx context.Context, token string, _ *http.Request) (*mcpauth.TokenInfo, error) {
		p, err := v.Verify(ctx, token)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", mcpauth.ErrInvalidToken, err)
		}
		return &mcpauth.TokenInfo{
			Scopes:     p.Scopes,
			Expiration: p.ExpiresAt,
			UserID:     p.Tenant + ":" + p.Subject,
			Extra:      map[string]any{TokenInfoKey: p},
		}, nil
	}
}

// PrincipalFromTokenInfo returns the *Principal that [Verifier.TokenVerifier]
// put in ti, or nil (also for a nil ti).
func PrincipalFromTokenInfo(ti *mcpauth.TokenInfo) *Principal {
	if ti == nil {
		return nil
	}
	p, _ := ti.Extra[TokenInfoKey].(*Principal)
	return p
}
