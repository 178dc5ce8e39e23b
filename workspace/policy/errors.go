package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// Error classes. Compare with errors.Is. Each maps to one JSON-RPC code of the seed
// (seeds/coding-environment-tools.md); the mapping itself lives with the protocol
// (api/mcp), not here.
var (
	ErrInvalid   = errors.New("invalid params")          // -32602 invalid params
	ErrTraversal = errors.New("path traversal detected") // -32001 path traversal
	ErrPolicy    = errors.New("policy violation")        // -32002 policy violation
	ErrTooLarge  = errors.New("too large")               // -32003 file too large
	ErrCommand   = errors.New("command not allowed")     // -32004 operation denied
	ErrConfirm   = errors.New("confirmation required")   // -32005 confirmation required
	// ErrQuota: a count the tenant's policy bounds (maxTerminals, maxSessions …) is
	// reached; the protocols map it with the service's quotas (workspace.ErrQuota).
	ErrQuota = errors.New("quota exceeded")
)

// Violation is the error every check in this package returns: one of the sentinels
// above plus what a caller needs for the JSON-RPC error's data.
type Violation struct {
	Err    error  // one of ErrInvalid … ErrConfirm
	Rule   string // the refusing rule, e.g. `deniedPaths ".env"`, "maxFileSize", "envAllowlist"
	Path   string // the offending path as given or normalized; empty when no path is involved
	Detail string // a human sentence, e.g. "11 bytes exceeds maxFileSize 10"
	// Data is structured detail for the client, e.g. a position's valid range; nil: none.
	Data json.RawMessage
}

// Error reads e.g. `policy violation: ".env": denied by rule deniedPaths ".env"`.
func (v *Violation) Error() string {
	var b strings.Builder
	b.WriteString(v.Err.Error())
	if v.Path != "" {
		fmt.Fprintf(&b, ": %q", v.Path)
	}
	switch {
	case v.Detail != "":
		b.WriteString(": " + v.Detail)
	case v.Rule != "":
		b.WriteString(": rule " + v.Rule)
	}
	return b.String()
}

// Unwrap returns the error class.
func (v *Violation) Unwrap() error { return v.Err }

// fromGuard turns a guard error into a *Violation: ErrPolicy for a rule (naming it),
// ErrTraversal for a path that was not normalized first.
func fromGuard(rel string, err error) error {
	var d *guard.Denied
	switch {
	case err == nil:
		return nil
	case errors.As(err, &d):
		return &Violation{Err: ErrPolicy, Rule: d.Rule, Path: d.Path, Detail: "denied by rule " + d.Rule}
	default: // guard.ErrBadPath: the caller skipped Normalize, so treat it as an escape.
		return &Violation{Err: ErrTraversal, Path: rel, Detail: err.Error()}
	}
}
