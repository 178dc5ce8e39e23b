package guard

import (
	"errors"
	"testing"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, rel string
		want         bool
	}{
		// A rule about a directory covers everything in it.
		{".git/**", ".git", true},
		{".git/**", ".git/config", true},
		{".git/**", ".git/refs/heads/main", true},
		{".git", ".git/config", true},
		{".git/*", ".git/refs/heads/main", true},
		{".git/**", ".github/workflows/ci.yml", false},
		{".git", ".gitignore", false},
		{"node_modules/**", "node_modules/a/b", true},
		{"node_modules/**", "src/node_modules/a", false},
		{"**/node_modules/**", "src/node_modules/a", true},
		// Anchored at the root.
		{"*.env", "prod.env", true},
		{"*.env", "config/prod.env", false},
		{"**/*.env", "config/prod.env", true},
		{"**/*.env", "prod.env", true},
		{".env", ".env", true},
		{".env", "app/.env", false},
		{"**/.env", "app/.env", true},
		{"**/.env", ".env", true},
		// Dot-files are ordinary names.
		{"*", ".env", true},
		{".*", ".env", true},
		{".*", "src/main.go", false},
		// "**/*" and "**" match everything below the root.
		{"**/*", "a", true},
		{"**/*", "a/b/c", true},
		{"**", "a/b/c", true},
		// The root.
		{"**", ".", true},
		{"**/**", ".", true},
		{".", ".", true},
		{".", "a/b", true},
		{"**/*", ".", false},
		{"*", ".", false},
		{".*", ".", false},
		// Other doublestar syntax.
		{"src/**/*.go", "src/a/b/main.go", true},
		{"src/**/*.go", "src/main.go", true},
		{"{src,test}/**", "test/x", true},
		{"[ab].txt", "b.txt", true},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"Secret", "secret", false},
		// Invalid patterns match nothing.
		{"[a", "a", false},
		{"", "a", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+"~"+tt.rel, func(t *testing.T) {
			if got := Match(tt.pattern, tt.rel); got != tt.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.rel, got, tt.want)
			}
		})
	}
}

func TestValidPattern(t *testing.T) {
	tests := []struct {
		pattern string
		ok      bool
	}{
		{"**", true},
		{"**/*", true},
		{".git/**", true},
		{".", true},
		{"src/{a,b}/*.go", true},
		{"", false},
		{"/etc/**", false},
		{"../x", false},
		{"..", false},
		{"./x", false},
		{"node_modules/", false},
		{"a//b", false},
		{"a/./b", false},
		{"a/../b", false},
		{"[a", false},
		{"{a,b", false},
		{"a\x00b", false},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			err := ValidPattern(tt.pattern)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidPattern(%q) = %v, want ok=%v", tt.pattern, err, tt.ok)
			}
			if err != nil && !errors.Is(err, errPattern) {
				t.Errorf("error %v does not wrap errPattern", err)
			}
		})
	}
}
