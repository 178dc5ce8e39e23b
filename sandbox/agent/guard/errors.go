package guard

import (
	"errors"
	"fmt"
)

// ErrDenied is wrapped by every *Denied: the path is well formed but a rule refuses it.
var ErrDenied = errors.New("path not allowed by policy")

// ErrBadPath is returned by Check and CheckWrite for input that is not a clean,
// workspace-relative, slash-separated path: empty, absolute, containing a NUL byte, not
// path.Clean-stable ("a//b", "./a", "a/"), or climbing out with "..". It is deliberately
// not ErrDenied: such a path never reached the rules, and the caller should have
// normalized it first (a lexical escape is a traversal attempt, not a policy decision).
var ErrBadPath = errors.New("path is not a clean workspace-relative path")

// Denied reports which rule refused a path. errors.Is(err, ErrDenied) holds for it.
type Denied struct {
	// Path is the workspace-relative path that was refused.
	Path string
	// Rule names the refusing rule: `deniedPaths ".git/**"`, `allowedPaths`
	// (no pattern of some allow-set matched), or `protected ".cws-policy.json"`.
	Rule string
}

// Error reads e.g. `path ".env" denied by rule deniedPaths ".env"`.
func (d *Denied) Error() string {
	return fmt.Sprintf("path %q denied by rule %s", d.Path, d.Rule)
}

// Unwrap returns ErrDenied.
func (d *Denied) Unwrap() error { return ErrDenied }

// Rule names used in Denied.Rule. A pattern, when there is one, follows quoted.
const (
	RuleAllowed   = "allowedPaths"
	RuleDenied    = "deniedPaths"
	RuleProtected = "protected"
)

func denied(rel, rule, pattern string) *Denied {
	if pattern != "" {
		rule = fmt.Sprintf("%s %q", rule, pattern)
	}
	return &Denied{Path: rel, Rule: rule}
}
