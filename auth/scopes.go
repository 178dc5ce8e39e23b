package auth

import (
	"fmt"
	"slices"
	"strings"
)

// The scopes a token's scope claim may grant. The workspace decides what each one
// allows; a tool's required scope is part of its catalogue entry.
const (
	ScopeToolsRead  = "tools:read"  // tools annotated read-only
	ScopeToolsWrite = "tools:write" // tools that change files or the repository
	ScopeToolsExec  = "tools:exec"  // commands, background processes and terminals
	ScopeSessions   = "sessions"    // create, list, get, renew and delete sessions
	ScopeArchive    = "archive"     // upload and download the whole workspace tree
	ScopePorts      = "ports"       // reach a workspace's ports (preview URLs, port-forward)
	// ScopeSecrets writes, lists and deletes the tenant's secrets (/v1/secrets). Like
	// admin it is never a default: a token must carry it in its scope claim.
	ScopeSecrets = "secrets"
	// ScopeAdmin is the operator's view across tenants (/v1/admin, the console). It is
	// never a default: only a token that carries it, of the tenant named by
	// cws serve --admin-tenant, has it.
	ScopeAdmin = "admin"
)

// AllScopes returns every scope, in a fixed order. It is a tenant's default unless its
// tenants-file entry sets defaultScopes.
func AllScopes() []string {
	return []string{ScopeToolsRead, ScopeToolsWrite, ScopeToolsExec, ScopeSessions, ScopeArchive, ScopePorts}
}

// ToolScopes returns the scopes that call tools: an agent's token needs only these.
func ToolScopes() []string { return []string{ScopeToolsRead, ScopeToolsWrite, ScopeToolsExec} }

// KnownScopes is AllScopes, ScopeSecrets and ScopeAdmin.
func KnownScopes() []string { return append(AllScopes(), ScopeSecrets, ScopeAdmin) }

// KnownScope reports whether s is one of [KnownScopes].
func KnownScope(s string) bool { return slices.Contains(KnownScopes(), s) }

// ParseScopes splits scope lists as people write them ("tools:read tools:write",
// "tools:read,tools:exec"; each argument may hold several) and checks every name. The
// result has no duplicates and keeps the first occurrence's order.
func ParseScopes(lists ...string) ([]string, error) {
	var out []string
	for _, l := range lists {
		for _, s := range strings.FieldsFunc(l, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
			if !KnownScope(s) {
				return nil, fmt.Errorf("unknown scope %q (known: %s)", s, strings.Join(KnownScopes(), ", "))
			}
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, nil
}
