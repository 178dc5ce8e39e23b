package fs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOpenRealRefusesLinks: the resolved path is opened without following any link.
func TestOpenRealRefusesLinks(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "real"), 0o755)
	os.WriteFile(filepath.Join(root, "real", "f"), []byte("x"), 0o644)
	os.Symlink("real", filepath.Join(root, "link"))
	os.Symlink("real/f", filepath.Join(root, "flink"))
	ws, err := OpenWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, fallback := range []bool{false, true} {
		NoOpenat2.Store(fallback)
		for _, p := range []string{"link/f", "flink", "link"} {
			if f, err := ws.OpenReal(p, os.O_RDONLY, 0); err == nil || !swapped(err) {
				if f != nil {
					f.Close()
				}
				t.Errorf("fallback=%v: OpenReal(%q) = %v, want ELOOP", fallback, p, err)
			}
		}
		f, err := ws.OpenReal("real/f", os.O_RDONLY, 0)
		if err != nil {
			t.Errorf("fallback=%v: OpenReal(real/f) = %v", fallback, err)
		} else {
			f.Close()
		}
	}
	NoOpenat2.Store(false)
}

// TestResolve: a path without links resolves to itself in one openat2 (linkFree); any
// link, a missing part or no openat2 takes the component walk, with the same answers.
func TestResolve(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(root, "a", "b", "f"), []byte("x"), 0o644)
	os.Symlink("a/b", filepath.Join(root, "dirlink"))
	os.Symlink("b/f", filepath.Join(root, "a", "flink"))
	os.Symlink("/etc", filepath.Join(root, "out"))
	ws, err := OpenWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	defer NoOpenat2.Store(false)
	for _, tc := range []struct {
		rel, want string
		linkFree  bool
	}{
		{".", ".", true},
		{"a", "a", true},
		{"a/b/f", "a/b/f", true},
		{"dirlink/f", "a/b/f", false},
		{"a/flink", "a/b/f", false},
		{"dirlink", "a/b", false},
		{"a/new/deeper", "a/new/deeper", false},
		{"dirlink/new", "a/b/new", false},
		{"a/../a/b/f", "a/b/f", false},
		{"out/passwd", "", false},
	} {
		for _, fallback := range []bool{false, true} {
			NoOpenat2.Store(fallback)
			if got := ws.linkFree(tc.rel); got != (tc.linkFree && (!fallback || tc.rel == ".")) {
				t.Errorf("fallback=%v: linkFree(%q) = %v", fallback, tc.rel, got)
			}
			got, err := ws.Resolve(tc.rel)
			if tc.want == "" {
				if err == nil {
					t.Errorf("fallback=%v: Resolve(%q) = %q, want a traversal error", fallback, tc.rel, got)
				}
				continue
			}
			if err != nil || got != tc.want {
				t.Errorf("fallback=%v: Resolve(%q) = %q, %v; want %q", fallback, tc.rel, got, err, tc.want)
			}
		}
	}
}
