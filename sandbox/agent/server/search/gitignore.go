package search

import (
	"strings"

	ignore "github.com/sabhiram/go-gitignore"
)

// go-gitignore turns each .gitignore line into a regexp and runs every one of them on
// every path: with a common 40-line .gitignore, that was most of a search's time. Most
// paths match no line, and most lines hold a literal piece every path they match must
// contain ("node_modules", ".log"), so a path holding none of a file's pieces skips the
// regexps. Whether a path is ignored is still decided by go-gitignore alone.

// ignoreRules are the .gitignore files in force in one directory: its own and its
// ancestors', each matching paths relative to the directory it sits in.
type ignoreRules []ignoreFile

type ignoreFile struct {
	base  string // workspace-relative directory of the .gitignore ("" for the root)
	gi    *ignore.GitIgnore
	hints []string // a path no hint is in matches no line; nil with always
	// always: some line has no hint, so every path goes to gi.
	always bool
}

func (r ignoreRules) ignored(rel string, isDir bool) bool {
	ig := false
	for _, f := range r {
		p := rel
		if f.base != "" {
			p = strings.TrimPrefix(rel, f.base+"/")
		}
		if !f.always && !containsAny(p, f.hints) {
			continue
		}
		if isDir {
			p += "/"
		}
		if f.gi.MatchesPath(p) {
			ig = true
		}
	}
	return ig
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func addIgnore(rules ignoreRules, realDir string, data []byte) ignoreRules {
	base := realDir
	if base == "." {
		base = ""
	}
	lines := strings.Split(string(data), "\n")
	f := ignoreFile{base: base, gi: ignore.CompileIgnoreLines(lines...)}
	for _, l := range lines {
		hint, isPattern := ignoreHint(l)
		switch {
		case !isPattern:
		case hint == "":
			f.always, f.hints = true, nil
		case !f.always:
			f.hints = append(f.hints, hint)
		}
	}
	return append(rules[:len(rules):len(rules)], f)
}

// ignoreHint returns the longest literal piece of a .gitignore line, as go-gitignore
// reads the line: every path the line's regexp matches contains it. hint is "" where
// the line has none, or uses characters go-gitignore passes to the regexp unescaped
// (a backslash, ( ) { } + ^ $ |), which could make a piece optional. isPattern is
// false for blank lines and comments, which match nothing.
func ignoreHint(line string) (hint string, isPattern bool) {
	// The same steps as go-gitignore's getPatternFromLine.
	line = strings.TrimRight(line, "\r")
	if strings.HasPrefix(line, "#") {
		return "", false
	}
	line = strings.Trim(line, " ")
	if line == "" {
		return "", false
	}
	if line[0] == '!' {
		line = line[1:]
	}
	if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") {
		line = line[1:]
	}
	if strings.ContainsAny(line, `\(){}+^$|`) {
		return "", true
	}
	// Pieces end at wildcards and slashes; a bracket expression is no piece.
	start := 0
	for i := 0; i <= len(line); i++ {
		if i < len(line) && !strings.ContainsRune("*?/[]", rune(line[i])) {
			continue
		}
		if i-start > len(hint) {
			hint = line[start:i]
		}
		if i < len(line) && line[i] == '[' {
			j := strings.IndexByte(line[i:], ']')
			if j < 0 || j == 1 || (j == 2 && line[i+1] == '!') {
				return "", true // unclosed, or "[]…]" whose first ] is a member
			}
			i += j
		}
		start = i + 1
	}
	return hint, true
}
