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
