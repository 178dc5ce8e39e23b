package workspace

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cwsdev/cws/auth"
)

// What each scope allows (DESIGN "Auth"). A tool's scope is part of its catalogue entry
// (Tool.Scope); the operations outside the catalogue need these:
//   - sessions: CreateSession, ListSessions, GetSession, RenewSession, DeleteSession.
//     The /mcp default session is created implicitly by a tool call and needs only the
//     tool's scope.
//   - archive: Upload and Download, which move the whole tree (deniedPaths guard the
//     agent's tools, not the platform's archive).
//   - tools:read: Diff, the same read as the gitDiff tool.

// ScopeError refuses an operation for want of a token scope: over MCP -32002 with
// data.scope, over REST 403 with error.scope. errors.Is(err, ErrForbidden) holds.
type ScopeError struct {
	Scope string // the scope that is missing
	What  string // what needed it: "runCommand", "create a session"
}

func (e *ScopeError) Error() string {
	return fmt.Sprintf("%s needs scope %s, which the token does not grant", e.What, e.Scope)
}

// Unwrap returns ErrForbidden.
func (e *ScopeError) Unwrap() error { return ErrForbidden }

// AsScopeError returns the *ScopeError in err's chain, or nil.
func AsScopeError(err error) *ScopeError {
	var se *ScopeError
	if errors.As(err, &se) {
		return se
	}
	return nil
}

// Has reports whether the caller's token grants scope.
func (c Caller) Has(scope string) bool { return slices.Contains(c.Scopes, scope) }

// May reports whether the caller may call t (listings hide the tools it may not).
func (c Caller) May(t *Tool) bool { return c.Has(t.Scope) }

// need refuses the caller unless it has scope; what names the operation.
func (c Caller) need(scope, what string) error {
	if c.Has(scope) {
		return nil
	}
	return &ScopeError{Scope: scope, What: what}
}

// CallerOf is the caller a verified token names, with its scopes. A nil principal is
// the zero Caller, which may do nothing.
func CallerOf(p *auth.Principal) Caller {
	if p == nil {
		return Caller{}
	}
	return Caller{Tenant: p.Tenant, Subject: p.Subject, Scopes: slices.Clone(p.Scopes)}
}
