package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestSweepWeedDirs: the data directories of weed servers that are gone are removed;
// a running weed's, and a new one's without its pid yet, stay.
func TestSweepWeedDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	// A live "weed": sleep under that name.
	bin := filepath.Join(t.TempDir(), "weed")
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	if err := os.Symlink(sleep, bin); err != nil {
		t.Fatal(err)
	}
	live := exec.Command(bin, "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	// A dead one's pid: a process that has exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, pid int, age time.Duration) string {
		dir := filepath.Join(tmp, weedDirPrefix+name)
		if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
			t.Fatal(err)
		}
		if pid > 0 {
			if err := os.WriteFile(filepath.Join(dir, weedPIDFile), []byte(strconv.Itoa(pid)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		then := time.Now().Add(-age)
		if err := os.Chtimes(dir, then, then); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cases := []struct {
		dir  string
		stay bool
	}{
		{mk("live", live.Process.Pid, time.Hour), true},
		{mk("dead", dead.Process.Pid, time.Hour), false},
		{mk("notweed", os.Getpid(), time.Hour), false}, // a live process, not a weed: its pid was reused
		{mk("starting", 0, 0), true},
		{mk("abandoned", 0, time.Hour), false},
	}
	other := filepath.Join(tmp, "cws-other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	sweepWeedDirs()
	for _, c := range cases {
		if _, err := os.Stat(c.dir); (err == nil) != c.stay {
			t.Errorf("%s: there %v, want %v", filepath.Base(c.dir), err == nil, c.stay)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a directory not of weed's went: %v", err)
	}
}
