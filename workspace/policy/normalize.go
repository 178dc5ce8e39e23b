package policy

import (
	"fmt"
	"path"
	"strings"

	"github.com/cwsdev/cws/sandbox/agent/guard"
)

// Normalize turns a tool's path argument into the clean, slash-separated,
// workspace-relative path the rules are matched on ("." for the root).
//
// workspaceRoot is the seed's optional parameter: "", "." or "./" (the default) or
// WorkspaceDir ("/workspace", with or without a trailing slash); anything else is
// ErrInvalid naming workspaceRoot. p may be relative to the root or absolute under
// WorkspaceDir. It is cleaned lexically, so "./.env", "x/../.env", "dir//.env" and
// "dir/" become ".env", ".env", "dir/.env" and "dir", and a deny rule sees the same
// path however it is spelled.
//
// ErrTraversal (a *Violation) refuses a path that leaves the root once cleaned ("../x",
// "a/../../x", "/etc/passwd", "/workspace/../etc/passwd") or contains a NUL byte.
// ErrInvalid refuses an empty path and one longer than guard.MaxPathLen. A backslash
// is an ordinary file-name character on Linux, so "..\\x" is a file in the root.
//
// Normalize is lexical: it does not follow symlinks. The agent resolves them and
// re-checks the resolved path with the same guard.
func Normalize(workspaceRoot, p string) (string, error) {
	switch workspaceRoot {
	case "", ".", "./", WorkspaceDir, WorkspaceDir + "/":
	default:
		return "", &Violation{Err: ErrInvalid, Rule: "workspaceRoot",
			Detail: fmt.Sprintf("workspaceRoot %q must be %q or %q", workspaceRoot, ".", WorkspaceDir)}
	}
	switch {
	case p == "":
		return "", &Violation{Err: ErrInvalid, Detail: "path is required"}
	case len(p) > guard.MaxPathLen:
		return "", &Violation{Err: ErrInvalid, Detail: fmt.Sprintf("path longer than %d bytes", guard.MaxPathLen)}
	case strings.IndexByte(p, 0) >= 0:
		return "", &Violation{Err: ErrTraversal, Path: p, Detail: "path contains a NUL byte"}
	}
	rel := path.Clean(p)
	if path.IsAbs(rel) {
		after, ok := strings.CutPrefix(rel, WorkspaceDir)
		switch {
		case ok && after == "":
			return ".", nil
		case ok && after[0] == '/':
			return after[1:], nil
		}
		return "", &Violation{Err: ErrTraversal, Path: p, Detail: "absolute path outside " + WorkspaceDir}
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", &Violation{Err: ErrTraversal, Path: p, Detail: "path leaves the workspace"}
	}
	return rel, nil
}
