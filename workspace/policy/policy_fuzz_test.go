package policy

import (
	"errors"
	"path"
	"strings"
	"testing"
)

// FuzzNormalize checks that Normalize never panics, and that whatever it accepts is
// clean, relative, inside the workspace, NUL-free, and a fixed point.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"README.md", "./.env", "x/../.env", "dir//.env", "dir/", "../x", "a/../../x",
		"/etc/passwd", "/workspace", "/workspace/../etc", "/workspace/a/../../b", "a\x00b",
		`..\x`, "..foo", ".", "", "/", "//workspace//x",
	} {
		f.Add(".", s)
		f.Add("/workspace", s)
	}
	f.Fuzz(func(t *testing.T, root, p string) {
		got, err := Normalize(root, p)
		if err != nil {
			if !errors.Is(err, ErrTraversal) && !errors.Is(err, ErrInvalid) {
				t.Fatalf("Normalize(%q, %q) = %v: neither ErrTraversal nor ErrInvalid", root, p, err)
			}
			return
		}
		switch {
		case got == ".." || strings.HasPrefix(got, "../"):
			t.Fatalf("Normalize(%q, %q) = %q climbs out", root, p, got)
		case strings.HasPrefix(got, "/"):
			t.Fatalf("Normalize(%q, %q) = %q is absolute", root, p, got)
		case strings.IndexByte(got, 0) >= 0:
			t.Fatalf("Normalize(%q, %q) = %q contains NUL", root, p, got)
		case path.Clean(got) != got:
			t.Fatalf("Normalize(%q, %q) = %q is not clean", root, p, got)
		}
		again, err := Normalize(root, got)
		if err != nil || again != got {
			t.Fatalf("Normalize(%q, %q) = %q, %v; want identity", root, got, again, err)
		}
		// What Normalize accepts, the guard accepts as a path.
		if err := (*Policy)(nil).Narrow(nil).CheckRead(got); err != nil {
			t.Fatalf("CheckRead(%q) = %v after Normalize", got, err)
		}
	})
}
