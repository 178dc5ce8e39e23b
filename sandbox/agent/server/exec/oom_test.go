package exec

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// oomKills finds the first events file that exists, keeps it open, and reads it again
// on every call: a count that moves between two commands is seen, as is a missing
// counter (-1).
func TestOOMKillsRereads(t *testing.T) {
	dir := t.TempDir()
	events := filepath.Join(dir, "memory.events")
	write := func(s string) {
		t.Helper()
		// In place, as the kernel's file changes: the open descriptor must see it.
		f, err := os.OpenFile(events, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	write("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n")
	saved := oomEventFiles
	oomEventFiles = []string{filepath.Join(dir, "missing"), events}
	oomFile.once, oomFile.f = sync.Once{}, nil
	t.Cleanup(func() {
		if oomFile.f != nil {
			oomFile.f.Close()
		}
		oomEventFiles = saved
		oomFile.once, oomFile.f = sync.Once{}, nil
	})
	if n := oomKills(); n != 2 {
		t.Fatalf("oomKills = %d, want 2", n)
	}
	write("oom_kill_disable 0\nunder_oom 0\noom_kill 17\n") // the v1 file's shape
	if n := oomKills(); n != 17 {
		t.Fatalf("after the count moved: oomKills = %d, want 17", n)
	}
	write("low 0\nhigh 0\n")
	if n := oomKills(); n != -1 {
		t.Fatalf("with no oom_kill line: oomKills = %d, want -1", n)
	}
}
