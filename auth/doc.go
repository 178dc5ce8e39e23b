// Package auth authenticates agents: it loads the tenants file (each tenant's
// issuer, audience, keys and policy file), verifies the JWTs that tenants'
// platforms issue, and turns a valid token into a [Principal].
//
// The same [Verifier] serves REST (gin middleware, [Verifier.Middleware]) and
// MCP (the go-sdk's bearer-token middleware, [Verifier.TokenVerifier]). Every
// rejected token carries a bounded [Error.Reason] for metrics.
//
// Verification pins the algorithm to the key that is chosen, so a token can
// never pick its own algorithm (no "alg: none", no HS256 signed with a public
// key). A token is accepted only when the key that verifies it belongs to the
// tenant named by its tenant claim and its iss claim is that tenant's issuer.
//
// The package depends on nothing else of cws.
package auth
