// Package guard is cws's one path-rule matcher. The host-side policy
// (workspace/policy) builds a Guard from the tenant's and the workspace's
// .cws-policy.json; the in-container agent receives the same Guard and re-checks every
// path after resolving symlinks, so both sides agree on what a rule means.
//
// It imports only the standard library and doublestar, because it is compiled into the
// static agent.
package guard

import (
	"fmt"
	"path"
	"strings"
)

// Guard holds path rules over workspace-relative, slash-separated, cleaned paths ("."
// is the root). Pattern semantics are those of Match. The zero Guard allows everything.
type Guard struct {
	// Allow lists allow-sets. A path must match some pattern in EVERY set; this is how
	// the tenant's and the workspace's allowedPaths intersect. No sets means everything
	// is allowed; an empty set allows nothing. The root "." is always allowed by the
	// allow-sets (it is only a container; its entries are checked one by one).
	Allow [][]string `json:"allow,omitempty"`
	// Deny lists patterns a path must not match (deniedPaths, tenant ∪ workspace).
	Deny []string `json:"deny,omitempty"`
	// Protect lists patterns that may be read but never written (".cws-policy.json").
	Protect []string `json:"protect,omitempty"`
}

// Check reports whether rel may be read. It returns an error wrapping ErrBadPath if rel
// is not a clean workspace-relative path (see ValidPath), a *Denied naming the rule
// (errors.Is(err, ErrDenied)) if a rule refuses it, and nil otherwise. Deny wins over
// Allow.
func (g Guard) Check(rel string) error {
	if err := ValidPath(rel); err != nil {
		return err
	}
	for _, p := range g.Deny {
		if ok, err := match(p, rel); ok || err != nil {
			return denied(rel, RuleDenied, p)
		}
	}
	if rel == "." {
		return nil
	}
	for _, set := range g.Allow {
		if !matchAny(set, rel) {
			return denied(rel, RuleAllowed, "")
		}
	}
	return nil
}

// CheckWrite is Check, and also refuses rel if a Protect pattern matches it.
func (g Guard) CheckWrite(rel string) error {
	if err := g.Check(rel); err != nil {
		return err
	}
	for _, p := range g.Protect {
		if ok, err := match(p, rel); ok || err != nil {
			return denied(rel, RuleProtected, p)
		}
	}
	return nil
}

// MaxPathLen is the longest path Check accepts, in bytes (Linux's PATH_MAX).
const MaxPathLen = 4096

// ValidPath returns an error wrapping ErrBadPath unless rel is "." or a clean,
// relative, slash-separated path of at most MaxPathLen bytes that stays beneath the
// root and has no NUL byte.
// A backslash is an ordinary file-name character on Linux, so it is allowed.
func ValidPath(rel string) error {
	switch {
	case rel == "":
		return fmt.Errorf("%w: empty", ErrBadPath)
	case len(rel) > MaxPathLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrBadPath, MaxPathLen)
	case strings.IndexByte(rel, 0) >= 0:
		return fmt.Errorf("%w: %q contains a NUL byte", ErrBadPath, rel)
	case strings.HasPrefix(rel, "/"):
		return fmt.Errorf("%w: %q is absolute", ErrBadPath, rel)
	case rel == ".." || strings.HasPrefix(rel, "../"):
		return fmt.Errorf("%w: %q climbs out of the workspace", ErrBadPath, rel)
	case path.Clean(rel) != rel:
		return fmt.Errorf("%w: %q is not clean (%q)", ErrBadPath, rel, path.Clean(rel))
	}
	return nil
}

// matchAny reports whether any valid pattern in set matches rel.
func matchAny(set []string, rel string) bool {
	for _, p := range set {
		if Match(p, rel) {
			return true
		}
	}
	return false
}
