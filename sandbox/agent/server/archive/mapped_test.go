package archive

import (
	"os"
	"path/filepath"
	"testing"
)

// The shared writable mappings of every process are found; a process whose mappings
// can't be read makes the answer unknown, never an empty list; one that is gone is
// not an error.
func TestWritableMappings(t *testing.T) {
	proc := t.TempDir()
	write := func(pid, maps string) {
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "maps"), []byte(maps), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("11", "7f00-7f01 rw-s 00000000 fd:01 4242 /workspace/db.mmap\n7f01-7f02 r--s 00000000 fd:01 17 /workspace/ro\n")
	write("12", "7f00-7f01 rw-p 00000000 fd:01 99 /workspace/private\n00400000-00401000 r-xp 00000000 00:00 0 [vdso]\n")
	got, ok := writableMappingsIn(proc)
	if !ok || len(got) != 1 || !got[4242] {
		t.Errorf("got %v, %v; want inode 4242 only", got, ok)
	}
	// A maps that can't be read (here a directory: reads fail).
	if err := os.MkdirAll(filepath.Join(proc, "13", "maps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, ok := writableMappingsIn(proc); ok {
		t.Errorf("with a process's mappings unreadable: %v, ok; want unknown", got)
	}
	// PID 1 (the sandbox's init, cws's) is not read.
	if err := os.MkdirAll(filepath.Join(proc, "1", "maps"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(proc, "13")); err != nil {
		t.Fatal(err)
	}
	if got, ok := writableMappingsIn(proc); !ok || !got[4242] {
		t.Errorf("with PID 1's mappings unreadable: %v, %v; want them skipped", got, ok)
	}
}
