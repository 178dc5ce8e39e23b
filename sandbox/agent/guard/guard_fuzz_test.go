package guard

import (
	"path"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
)

// FuzzMatch checks the invariants of Match and Check on arbitrary patterns and paths:
// no panic; a match on a path is a match on everything under it; a pattern without
// glob syntax matches itself; and Check never allows what a Deny pattern matches.
func FuzzMatch(f *testing.F) {
	seeds := [][2]string{
		{".git/**", ".git/config"},
		{"**/*.env", "a/b.env"},
		{"*", ".env"},
		{"**", "."},
		{".", "x"},
		{"{a,b}/**", "b/c"},
		{"[a-z]*", "q"},
		{`a\*`, "a*"},
		{"**/**/x", "x/y"},
		{"a/**/b/**/c", "a/b/b/c/c"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, rel string) {
		m := Match(pattern, rel) // must not panic, whatever the input
		if ValidPath(rel) != nil {
			return
		}
		g := Guard{Allow: [][]string{{pattern}}, Deny: []string{pattern}, Protect: []string{pattern}}
		_ = g.Check(rel)
		if ValidPattern(pattern) == nil && m != matchSlow(pattern, rel) {
			t.Errorf("Match(%q, %q) = %v, but matching the path and each parent says %v", pattern, rel, m, !m)
		}
		if m {
			child := path.Join(rel, "child")
			if !Match(pattern, child) {
				t.Errorf("Match(%q, %q) but not Match(%q, %q)", pattern, rel, pattern, child)
			}
			if (Guard{Deny: []string{pattern}}).Check(rel) == nil {
				t.Errorf("Check(%q) allowed a path matched by Deny %q", rel, pattern)
			}
			if g.CheckWrite(rel) == nil {
				t.Errorf("CheckWrite(%q) allowed a path matched by Deny/Protect %q", rel, pattern)
			}
		}
		if ValidPattern(pattern) == nil && !strings.ContainsAny(pattern, `*?[]{}\`) {
			if !Match(pattern, pattern) {
				t.Errorf("literal pattern %q does not match itself", pattern)
			}
		}
	})
}

// matchSlow is the definition Match implements, spelled out without its shortcuts:
// pattern matches rel or one of its parent directories, "dir/**" (and "dir/**/**")
// also matches "dir" (doublestar alone says "a/**" matches "a" but "a*/**" does not
// match "a"), and the root is matched only by "." and all-"**" patterns.
func matchSlow(pattern, rel string) bool {
	if matchesRoot(pattern) {
		return true
	}
	base := pattern
	for strings.HasSuffix(base, "/**") {
		base = strings.TrimSuffix(base, "/**")
	}
	for p := rel; p != "."; p = path.Dir(p) {
		if ok, _ := doublestar.Match(pattern, p); ok {
			return true
		}
		if ok, _ := doublestar.Match(base, p); ok && base != pattern {
			return true
		}
	}
	return false
}
