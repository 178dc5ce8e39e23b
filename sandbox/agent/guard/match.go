package guard

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// Match reports whether pattern matches the workspace-relative path rel.
//
// Both are slash-separated and relative to the workspace root; rel must be clean (see
// Check), and "." is the root. The rules:
//
//   - Glob syntax is doublestar's: "*" and "?" never cross a "/", "**" as a whole
//     segment matches zero or more directories, and "[a-z]", "{a,b}" and "\" escapes
//     work as usual. A leading "." is an ordinary character: "*" matches ".env".
//     Matching is case-sensitive, like Linux file names.
//   - A pattern matches a path if it matches the path itself OR any parent directory
//     of it. So ".git", ".git/**" and ".git/*" all cover ".git/config" and
//     ".git/refs/heads/main", and "node_modules/**" covers "node_modules/a/b". A rule
//     about a directory is a rule about everything in it.
//   - Patterns are anchored at the workspace root. "*.env" therefore matches only
//     top-level names ("prod.env", and everything under a directory called "x.env");
//     write "**/*.env" to match at any depth. Likewise ".env" is only the top-level
//     file, "**/.env" is every ".env".
//   - "dir/**" matches "dir" itself as well as everything under it.
//   - The root "." is matched only by the pattern "." and by patterns made of "**"
//     segments alone ("**", "**/**"). "*", "**/*" and ".*" match every top-level
//     name but not the root, so deniedPaths [".*"] denies dot-files, not the
//     workspace. Because the root is every path's parent, the pattern "." (like "**")
//     matches every path.
//
// An invalid pattern (see ValidPattern, which also bounds complexity) matches nothing;
// Check treats an invalid deny or protect pattern as matching, so a bad rule fails
// closed.
func Match(pattern, rel string) bool {
	ok, _ := match(pattern, rel)
	return ok
}

// match is Match that also reports an invalid pattern.
func match(pattern, rel string) (bool, error) {
	if err := ValidPattern(pattern); err != nil {
		return false, err
	}
	if matchesRoot(pattern) {
		return true, nil
	}
	if rel == "." {
		return false, nil
	}
	// "dir/**" is "dir and everything under it", which the parent rule already gives
	// "dir". Stripping it also sidesteps doublestar matching "a/**" but not "a*/**"
	// against "a".
	base := pattern
	for strings.HasSuffix(base, "/**") {
		base = strings.TrimSuffix(base, "/**")
	}
	if !doublestar.ValidatePattern(base) { // "a\/**": the "/" was escaped
		base = pattern
	}
	// A pattern without "**", "{", "[" or a backslash has a fixed number of segments, so
	// only the parent with that many can match: one match instead of one per parent.
	if !strings.Contains(base, "**") && !strings.ContainsAny(base, "{[\\") {
		n := strings.Count(base, "/") + 1
		p := rel
		for i := 0; i < len(rel); i++ {
			if rel[i] == '/' {
				if n--; n == 0 {
					p = rel[:i]
					break
				}
			}
		}
		if n > 1 {
			return false, nil // rel has fewer segments
		}
		return doublestar.MatchUnvalidated(base, p), nil
	}
	for p := rel; ; {
		if doublestar.MatchUnvalidated(base, p) {
			return true, nil
		}
		i := strings.LastIndexByte(p, '/')
		if i < 0 {
			return false, nil
		}
		p = p[:i]
	}
}

// matchesRoot reports whether pattern matches the root ".", and hence every path.
func matchesRoot(pattern string) bool {
	if pattern == "." {
		return true
	}
	for seg := range strings.SplitSeq(pattern, "/") {
		if seg != "**" {
			return false
		}
	}
	return pattern != ""
}

// errPattern is wrapped by every ValidPattern error.
var errPattern = errors.New("invalid path pattern")

// Pattern complexity bounds. doublestar's alternation is backtracking and can be
// exponential in the number of "{...}" groups, and a workspace's .cws-policy.json is
// written by whoever controls the workspace, so patterns are bounded.
const (
	MaxPatternLen   = 256 // bytes
	MaxAlternatives = 4   // "{" groups per pattern
	MaxCommas       = 16  // "," (alternatives beyond the first) per pattern
)

// ValidPattern reports why p cannot be used as a path rule, or nil. A valid pattern is
// non-empty, at most MaxPatternLen bytes with at most MaxAlternatives "{" groups and
// MaxCommas commas,
// relative, free of NUL bytes, clean (no "./", "//", "/./" or trailing "/": write
// "node_modules" or "node_modules/**", not "node_modules/"), never climbs with "..",
// and is valid doublestar syntax (balanced "[" and "{", no dangling "\").
func ValidPattern(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty pattern", errPattern)
	case len(p) > MaxPatternLen:
		return fmt.Errorf("%w: longer than %d bytes", errPattern, MaxPatternLen)
	case strings.Count(p, "{") > MaxAlternatives:
		return fmt.Errorf("%w %q: more than %d {…} groups", errPattern, p, MaxAlternatives)
	case strings.Count(p, ",") > MaxCommas:
		return fmt.Errorf("%w %q: more than %d commas", errPattern, p, MaxCommas)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w %q: contains a NUL byte", errPattern, p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w %q: must be relative to the workspace root", errPattern, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w %q: not clean; write %q", errPattern, p, path.Clean(p))
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("%w %q: must not climb out with \"..\"", errPattern, p)
	case !doublestar.ValidatePattern(p):
		return fmt.Errorf("%w %q: bad glob syntax", errPattern, p)
	}
	return nil
}
