package auth

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// GinKey is the gin context key under which the middleware stores the
// *Principal (c.MustGet(auth.GinKey).(*auth.Principal)).
const GinKey = "cws.principal"

// MiddlewareOptions configure [Verifier.Middleware].
type MiddlewareOptions struct {
	// ResourceMetadataURL returns the absolute URL of the RFC 9728 metadata
	// for r (e.g. "https://cws.example/.well-known/oauth-protected-resource"),
	// sent in WWW-Authenticate. Nil omits it.
	ResourceMetadataURL func(r *http.Request) string
	// OnFailure is called with the reason of every rejected request (one of
	// Reasons), e.g. to count cws_auth_failures_total. Nil ignores them.
	OnFailure func(reason string)
}

// Middleware authenticates each request by its "Authorization: Bearer"
// token. On success it stores the *Principal in the request's context
// ([PrincipalFrom]) and under [GinKey]. On failure it aborts with 401, a
// {"error":{"code":"unauthorized","message":…}} body, and an RFC 6750
// WWW-Authenticate challenge that points at the resource metadata (RFC 9728
// §5.1).
func (v *Verifier) Middleware(opts MiddlewareOptions) gin.HandlerFunc {
	return func(c *gin.Context) {
		p, err := v.verifyRequest(c.Request)
		if err != nil {
			reason := ReasonOf(err)
			if opts.OnFailure != nil {
				opts.OnFailure(reason)
			}
			metadata := ""
			if opts.ResourceMetadataURL != nil {
				metadata = opts.ResourceMetadataURL(c.Request)
			}
			c.Header("WWW-Authenticate", challenge(metadata, reason, err.Error()))
			c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{
				"error": gin.H{"code": "unauthorized", "message": err.Error()},
			})
			return
		}
		c.Request = c.Request.WithContext(WithPrincipal(c.Request.Context(), p))
		c.Set(GinKey, p)
		c.Next()
	}
}

func (v *Verifier) verifyRequest(r *http.Request) (*Principal, error) {
	token, ok := BearerToken(r)
	if !ok {
		return nil, reject(ReasonMissingToken, `no bearer token: send "Authorization: Bearer <JWT>"`, nil)
	}
	return v.Verify(r.Context(), token)
}

// BearerToken returns the token of an "Authorization: Bearer <token>" header
// (the scheme is case-insensitive), and whether there was one.
func BearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// challenge builds the WWW-Authenticate value. A request without a token
// gets no error attribute (RFC 6750 §3.1).
func challenge(metadataURL, reason, description string) string {
	var params []string
	if metadataURL != "" {
		params = append(params, fmt.Sprintf(`resource_metadata="%s"`, quotable(metadataURL)))
	}
	if reason != ReasonMissingToken {
		params = append(params, `error="invalid_token"`, fmt.Sprintf(`error_description="%s"`, quotable(description)))
	}
	if len(params) == 0 {
		return "Bearer"
	}
	return "Bearer " + strings.Join(params, ", ")
}

// quotable keeps the characters RFC 6750 §3 allows in a quoted value
// (printable ASCII but '"' and '\'), and replaces the others with '?'.
func quotable(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '?'
		}
		return r
	}, s)
}
