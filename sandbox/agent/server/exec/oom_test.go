package exec

import (
	"os"
	"path/filepath"
	"testing"
)

// oomKills finds the first events file that exists, keeps it open, and reads it again
// on every call: a count that moves between two commands is seen, as is a missing
// counter (-1); a file missing at first is looked for again.
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
	oomFile.f = nil
	t.Cleanup(func() {
		if oomFile.f != nil {
			oomFile.f.Close()
		}
		oomEventFiles = saved
		oomFile.f = nil
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

	// No file at first (a cgroup not mounted yet): -1, and found once it is there.
	oomFile.f.Close()
	oomFile.f = nil
	later := filepath.Join(dir, "later.events")
	oomEventFiles = []string{later}
	if n := oomKills(); n != -1 {
		t.Fatalf("with no events file: oomKills = %d, want -1", n)
	}
	if err := os.WriteFile(later, []byte("oom_kill 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := oomKills(); n != 4 {
		t.Fatalf("once the file is there: oomKills = %d, want 4", n)
	}
}
