package deploy_test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// journaledRig is a scratch ext4 without a journal (a loop file), the kind of file
// system scripts/journaled.sh moves a directory off, and a way to run the script's
// journaled function on it.
type journaledRig struct {
	t    *testing.T
	host string // the journal-less file system's mount point
}

func newJournaledRig(t *testing.T) *journaledRig {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("scripts/journaled.sh's test mounts loop files: it needs root (CI=true)")
		}
		t.Skip("needs root: it mounts loop files")
	}
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "findmnt", "fallocate", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing (CI=true)", tool)
			}
			t.Skipf("%s is missing", tool)
		}
	}
	dir := t.TempDir()
	img, host := filepath.Join(dir, "host.img"), filepath.Join(dir, "host")
	// 1 GiB sparse, and images of a third of it (JOURNALED_MIN_MIB): small, so that
	// the image's inode tables and journal, written whole, and its fsync weigh little
	// on the disk the other tests share.
	sh(t, "truncate -s 1G "+img+" && mkfs.ext4 -q -F -O ^has_journal "+img+" && mkdir "+host+" && mount -o loop "+img+" "+host)
	t.Cleanup(func() {
		// Whatever the script mounted under it first, then it.
		out, _ := exec.Command("sh", "-c", "findmnt -rno TARGET | grep -F '"+host+"/' | sort -r").Output()
		for _, m := range strings.Fields(string(out)) {
			_ = exec.Command("umount", m).Run()
		}
		_ = exec.Command("umount", host).Run()
	})
	if journalLess(t, host) != "slow" {
		t.Skip("this kernel does not report a journal-less ext4 as such (/sys/fs/ext4/*/journal_task)")
	}
	return &journaledRig{t: t, host: host}
}

// journaled runs `journaled DIR IMG say [BUSY]` under set -euo pipefail and returns
// what it said and its exit status.
func (r *journaledRig) journaled(dir, img string, extra ...string) (string, int) {
	r.t.Helper()
	script := ". " + filepath.Join(repoRoot(r.t), "scripts/journaled.sh") + "; say() { echo \"say: $*\"; }; set -euo pipefail; journaled " +
		shq(dir) + " " + shq(img) + " say"
	for _, e := range extra {
		script += " " + shq(e)
	}
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "CWS_VOLUMES_FS=", "JOURNALED_MIN_MIB=64")
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatal(err)
	}
	return string(out), code
}

func (r *journaledRig) mounted(dir string) bool {
	return exec.Command("mountpoint", "-q", dir).Run() == nil
}

// journalLess is what the script's journal_less says of dir: "slow" or "fine".
func journalLess(t *testing.T, dir string) string {
	t.Helper()
	return strings.TrimSpace(sh(t, ". "+shq(filepath.Join(repoRoot(t), "scripts/journaled.sh"))+"; journal_less "+shq(dir)+" && echo slow || echo fine"))
}

// sh runs a bash script and returns its output; a failure fails the test.
func sh(t *testing.T, script string) string {
	t.Helper()
	return command{}.must(t, "bash", "-c", script)
}

func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// readTree reads every regular file under dir, by its path below dir.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		got[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestJournaled(t *testing.T) {
	r := newJournaledRig(t)
	dir, img := filepath.Join(r.host, "volumes"), filepath.Join(r.host, "cws", "volumes.ext4")
	files := map[string]string{"metadata.db": "db of before", "v1/_data/a b": "one", "v2/_data/.hidden": "two", "v2/_data/deep/x/y": strings.Repeat("z", 100000)}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o640); err != nil {
			t.Fatal(err)
		}
	}

	// Busy: nothing happens while processes that may use the directory run.
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	out, code := r.journaled(dir, img, "^sleep 60$")
	_ = sleeper.Process.Kill()
	_ = sleeper.Wait()
	if code != 0 || r.mounted(dir) || !strings.Contains(out, "processes that may use it run") {
		t.Fatalf("busy: exit %d, mounted %v: %s", code, r.mounted(dir), out)
	}

	// The first time: the image is made whole (not sparse), the files move into it and
	// nothing stays underneath.
	out, code = r.journaled(dir, img)
	if code != 0 || !r.mounted(dir) {
		t.Fatalf("first: exit %d, mounted %v: %s", code, r.mounted(dir), out)
	}
	if got := readTree(t, dir); !maps.Equal(got, files) {
		t.Errorf("after the move: %v, want %v", got, files)
	}
	if _, err := os.Stat(filepath.Join(dir, "lost+found")); err == nil {
		t.Error("lost+found is there: Docker would list it as a volume")
	}
	whole := func(when string) {
		t.Helper()
		if fi, err := os.Stat(img); err != nil {
			t.Fatal(err)
		} else if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 < fi.Size() {
			t.Errorf("%s: the image is sparse (%d of %d bytes allocated): a full host would lose writes to it", when, st.Blocks*512, fi.Size())
		}
	}
	whole("made")
	// An fstrim (weekly on systemd hosts) must not punch the free blocks out of it.
	_ = exec.Command("fstrim", dir).Run()
	whole("after fstrim")
	if fs := strings.TrimSpace(sh(t, "findmnt -no FSTYPE "+shq(dir))); fs != "ext4" {
		t.Errorf("mounted file system %q", fs)
	}
	if got := journalLess(t, dir); got != "fine" {
		t.Errorf("the mounted file system still has no journal: %s", got)
	}
	sh(t, "umount "+shq(dir))
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left underneath: %v", left)
	}

	// Again, unmounted with nothing underneath (a boot), the image sparse (an older
	// journaled.sh made it so): its holes filled, mounted again, files intact.
	sh(t, "fallocate --dig-holes "+shq(img))
	if out, code = r.journaled(dir, img); code != 0 || !r.mounted(dir) || !maps.Equal(readTree(t, dir), files) {
		t.Fatalf("remount: exit %d, mounted %v: %s", code, r.mounted(dir), out)
	}
	whole("mounted again")
	// Mounted: nothing to say, and the image kept whole.
	sh(t, "umount "+shq(dir)+" && fallocate --dig-holes "+shq(img)+" && mount -o loop,discard "+shq(img)+" "+shq(dir))
	if out, code = r.journaled(dir, img); code != 0 || out != "" {
		t.Errorf("mounted already: exit %d: %q", code, out)
	}
	whole("mounted already, sparse")
	_ = exec.Command("fstrim", dir).Run()
	whole("mounted with discard, after fstrim")

	// Unmounted, and a dockerd meanwhile wrote its own metadata.db underneath: both
	// are left alone (merging would overwrite the volumes' labels), and it says how.
	sh(t, "umount "+shq(dir))
	if err := os.WriteFile(filepath.Join(dir, "metadata.db"), []byte("db of another dockerd"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, code = r.journaled(dir, img)
	if code != 0 || r.mounted(dir) || !strings.Contains(out, "To merge") {
		t.Fatalf("both hold files: exit %d, mounted %v: %s", code, r.mounted(dir), out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "metadata.db")); string(b) != "db of another dockerd" {
		t.Errorf("the directory's own file changed: %q", b)
	}
	sh(t, "mkdir -p /tmp/cws-jt && mount -o loop,ro "+shq(img)+" /tmp/cws-jt")
	inImg := readTree(t, "/tmp/cws-jt")
	sh(t, "umount /tmp/cws-jt && rmdir /tmp/cws-jt")
	if !maps.Equal(inImg, files) {
		t.Errorf("the image's files changed: %v", inImg)
	}
	if err := os.Remove(filepath.Join(dir, "metadata.db")); err != nil {
		t.Fatal(err)
	}

	// A broken image: it stops (status 1), mounts nothing, and says what to do; the
	// broken file is not replaced (it may hold volumes).
	broken := filepath.Join(r.host, "broken.ext4")
	sh(t, "head -c 8M /dev/urandom > "+shq(broken))
	out, code = r.journaled(dir, broken)
	if code != 1 || r.mounted(dir) || !strings.Contains(out, "e2fsck -f") {
		t.Errorf("broken image: exit %d, mounted %v: %s", code, r.mounted(dir), out)
	}
	if fi, err := os.Stat(broken); err != nil || fi.Size() != 8<<20 {
		t.Errorf("the broken image was touched: %v %v", fi, err)
	}

	// No room for an image twice the directory's size plus JOURNALED_MIN_MIB: left as
	// it is.
	sh(t, "fallocate -l $(( $(df -B1M --output=avail "+shq(r.host)+" | tail -1) - 100 ))M "+shq(filepath.Join(r.host, "filler")))
	out, code = r.journaled(filepath.Join(r.host, "other"), filepath.Join(r.host, "other.ext4"))
	if code != 0 || r.mounted(filepath.Join(r.host, "other")) || !strings.Contains(out, "MiB free") {
		t.Errorf("no room: exit %d: %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(r.host, "other.ext4")); err == nil {
		t.Error("an image was made without room for it")
	}
}
