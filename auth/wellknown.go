package auth

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// WellKnownPath is where the RFC 9728 protected resource metadata is served.
const WellKnownPath = "/.well-known/oauth-protected-resource"

// ProtectedResourceMetadata serves the RFC 9728 metadata of resource (the
// absolute URL clients use, e.g. "https://cws.example/mcp"): the issuers in
// authServers, bearer tokens in the header only, and the name "cws". It uses
// the go-sdk's handler, which also answers CORS preflights, so register it
// for GET and OPTIONS.
func ProtectedResourceMetadata(resource string, authServers []string) gin.HandlerFunc {
	h := mcpauth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   authServers,
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "cws",
	})
	return gin.WrapH(h)
}

// MetadataURL returns a [MiddlewareOptions.ResourceMetadataURL] pointing at
// WellKnownPath under base, cws's public URL (e.g. "https://cws.example").
// The URL is fixed, never taken from request headers a client controls.
func MetadataURL(base string) func(*http.Request) string {
	u := strings.TrimSuffix(base, "/") + WellKnownPath
	return func(*http.Request) string { return u }
}
