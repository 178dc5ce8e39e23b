package search

import (
	"strings"
	"testing"

	ignore "github.com/sabhiram/go-gitignore"
)

// ignoreLines are .gitignore lines of every shape: plain names, wildcards, brackets,
// anchors, negations, escapes, and characters go-gitignore hands to the regexp as is.
var ignoreLines = []string{
	"node_modules/", "*.log", "/dist", "build/Release", "**/tmp", "a/**/b", "docs/**",
	"report.[0-9]*.json", "[Bb]in", "*.[oa]", "*~", "!keep.log", "!!bang", "#comment",
	`\#hash`, "  spaced  ", ".env.*.local", "x[]a]yz", "[!x]abc", "a+b", "(paren)",
	"foo?bar", "*", "deep/nested/path/", "trailing\r", "ok{1,2}", "gen.go", "x/*.go",
}

var ignorePaths = []string{
	"node_modules", "node_modules/x.js", "a.log", "keep.log", "dist", "src/dist",
	"build/Release/x", "tmp", "a/tmp", "a/b", "a/x/y/b", "docs/x", "report.1.2.json",
	"bin", "Bin", "x.o", "x.a", "file~", "!bang", "bang", "#hash", "spaced", ".env.dev.local",
	"xayz", "x]yz", "yabc", "aabc", "ab", "aab", "paren", "(paren)", "foobar", "foo?bar",
	"deep/nested/path", "trailing", "okk", "ok", "gen.go", "src/gen.go", "x/a.go", "y/x/a.go",
	"plain.txt", "src/main.go",
}

// TestIgnoreHints: skipping go-gitignore where a path holds no hint never changes
// whether the path is ignored.
func TestIgnoreHints(t *testing.T) {
	var rules ignoreRules
	rules = addIgnore(rules, ".", []byte(strings.Join(ignoreLines, "\n")))
	whole := ignore.CompileIgnoreLines(ignoreLines...)
	for _, p := range ignorePaths {
		for _, dir := range []bool{false, true} {
			q := p
			if dir {
				q += "/"
			}
			if got, want := rules.ignored(p, dir), whole.MatchesPath(q); got != want {
				t.Errorf("ignored(%q, dir %v) = %v, go-gitignore says %v", p, dir, got, want)
			}
		}
	}
	// Line by line, so that "*" does not make every line's hint moot.
	for _, l := range ignoreLines {
		hint, _ := ignoreHint(l)
		gi := ignore.CompileIgnoreLines(strings.TrimPrefix(l, "!"))
		for _, p := range ignorePaths {
			if hint != "" && gi.MatchesPath(p) && !strings.Contains(p, hint) {
				t.Errorf("line %q matches %q, which lacks its hint %q", l, p, hint)
			}
		}
	}
}

// FuzzIgnoreHint: a path a line matches always holds the line's hint.
func FuzzIgnoreHint(f *testing.F) {
	for i, l := range ignoreLines {
		f.Add(l, ignorePaths[i%len(ignorePaths)])
	}
	f.Fuzz(func(t *testing.T, line, p string) {
		if strings.ContainsAny(line, "\n") {
			return
		}
		hint, _ := ignoreHint(line)
		if hint == "" {
			return
		}
		whole := ignore.CompileIgnoreLines(line)
		if whole.MatchesPath(p) && !strings.Contains(p, hint) {
			t.Errorf("line %q matches %q, which lacks its hint %q", line, p, hint)
		}
	})
}
