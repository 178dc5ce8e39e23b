package policy

import (
	"errors"
	"testing"

	"github.com/cwsdev/cws/sandbox"
)

func TestNormalize(t *testing.T) {
	tests := []struct {
		root, path string
		want       string // normalized path when err is nil
		err        error
	}{
		{".", "README.md", "README.md", nil},
		{"", "src/main.go", "src/main.go", nil},
		{"/workspace", "src/main.go", "src/main.go", nil},
		{"/workspace/", "src", "src", nil},
		{"./", ".", ".", nil},
		{".", "./", ".", nil},
		{".", "/workspace", ".", nil},
		{".", "/workspace/", ".", nil},
		{".", "/workspace/src/a.go", "src/a.go", nil},
		{".", "/workspace/../workspace/x", "x", nil},
		{".", "./.env", ".env", nil},
		{".", "x/../.env", ".env", nil},
		{".", "dir//.env", "dir/.env", nil},
		{".", "dir/", "dir", nil},
		{".", "a/./b/", "a/b", nil},
		{".", `..\x`, `..\x`, nil},   // a backslash is a file-name character
		{".", "..foo", "..foo", nil}, // so is a leading ".."
		{".", "a/b/../..", ".", nil}, // back at the root is still inside
		{".", "../x", "", ErrTraversal},
		{".", "..", "", ErrTraversal},
		{".", "../", "", ErrTraversal},
		{".", "a/../../x", "", ErrTraversal},
		{".", "a/../..", "", ErrTraversal},
		{".", "/etc/passwd", "", ErrTraversal},
		{".", "/", "", ErrTraversal},
		{".", "/workspace/../etc/passwd", "", ErrTraversal},
		{".", "/workspace/../etc", "", ErrTraversal},
		{".", "/workspacefoo/x", "", ErrTraversal},
		{".", "/workspace/../../workspace/x", "x", nil}, // "/.." is "/": lexically inside
		{"/workspace", "../workspace/x", "", ErrTraversal},
		{".", "a\x00b", "", ErrTraversal},
		{".", ".env\x00.txt", "", ErrTraversal},
		{".", "", "", ErrInvalid},
		{"/tmp", "x", "", ErrInvalid},
		{"..", "x", "", ErrInvalid},
		{"/workspace/sub", "x", "", ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.root+"|"+tt.path, func(t *testing.T) {
			got, err := Normalize(tt.root, tt.path)
			if tt.err != nil {
				var v *Violation
				if !errors.Is(err, tt.err) || !errors.As(err, &v) {
					t.Fatalf("Normalize(%q, %q) = %q, %v; want %v", tt.root, tt.path, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Normalize(%q, %q) = %q, %v; want %q", tt.root, tt.path, got, err, tt.want)
			}
		})
	}
}

func TestNormalizeNamesWorkspaceRoot(t *testing.T) {
	_, err := Normalize("/home/x", "a")
	var v *Violation
	if !errors.As(err, &v) || v.Rule != "workspaceRoot" {
		t.Errorf("Normalize with a bad root = %v, want a violation naming workspaceRoot", err)
	}
}

func TestWorkspaceDir(t *testing.T) {
	if WorkspaceDir != sandbox.WorkspaceDir {
		t.Errorf("WorkspaceDir = %q, sandbox.WorkspaceDir = %q", WorkspaceDir, sandbox.WorkspaceDir)
	}
}
