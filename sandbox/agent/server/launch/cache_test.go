package launch

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// requireLandlock skips where the host's kernel has no Landlock (the container tests in
// sandbox/docker and e2e cover CI).
func requireLandlock(t *testing.T) {
	t.Helper()
	if ABI() == 0 {
		t.Skip("Landlock unavailable on this kernel")
	}
}

// copyExec copies the executable from to to (a new inode each time).
func copyExec(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	must(t, err)
	tmp := to + ".tmp"
	must(t, os.WriteFile(tmp, b, 0o755))
	must(t, os.Rename(tmp, to))
}

// startUnder starts argv through c under programs (looked up on c's path) and waits for it.
func startUnder(t *testing.T, c *Cache, programs []string, argv ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := c.Start(programs, nil, "", cmd.Start); err != nil {
		return "", err
	}
	err := cmd.Wait()
	return out.String(), err
}

// TestCacheStart restricts commands started from this very process: each is held to its
// own policy, a policy seen before reuses its ruleset, a stricter policy after a looser
// one is held to the stricter, and the process itself (every other thread, and every
// thread that started a restricted command, which is never reused) stays unrestricted.
func TestCacheStart(t *testing.T) {
	requireLandlock(t)
	env, err := exec.LookPath("env")
	if err != nil {
		t.Skip("no env on this host")
	}
	c := NewCache(os.Getenv("PATH"), 0)
	defer c.Close()
	denied := func(err error) bool { return errors.Is(err, syscall.EACCES) }

	if out, err := startUnder(t, c, []string{"env", "true"}, env, "true"); err != nil {
		t.Fatalf("env true under [env true]: %v: %s", err, out)
	}
	if out, err := startUnder(t, c, []string{"env"}, env, "true"); err == nil || !strings.Contains(strings.ToLower(out), "permission denied") {
		t.Errorf("env true under [env] after [env true]: %v, %q; want true refused", err, out)
	}
	if _, err := startUnder(t, c, []string{"env"}, "/bin/sh", "sh", "-c", "true"); !denied(err) {
		t.Errorf("sh under [env]: %v; want EACCES from the start", err)
	}
	if _, err := startUnder(t, c, []string{}, env, "true"); !denied(err) {
		t.Errorf("env under []: %v; want EACCES", err)
	}
	if len(c.m) != 3 {
		t.Errorf("%d rulesets cached for 3 policies", len(c.m))
	}

	// Restricted and unrestricted starts at once: only the restricted ones are refused.
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if i%2 == 0 {
				if _, err := startUnder(t, c, []string{"env"}, "/bin/sh", "sh", "-c", "true"); !denied(err) {
					t.Errorf("sh under [env]: %v", err)
				}
				return
			}
			if out, err := exec.Command("/bin/sh", "-c", env+" true").CombinedOutput(); err != nil {
				t.Errorf("sh -c 'env true' unrestricted: %v: %s", err, out)
			}
		})
	}
	wg.Wait()
}

// TestCacheStale rebuilds a ruleset when what its grants were resolved from changed:
// a program replaced by another file is allowed again (its new inode granted), and a
// symlink's old target is refused once the link points elsewhere.
func TestCacheStale(t *testing.T) {
	requireLandlock(t)
	trueBin, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true on this host")
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	bin := filepath.Join(dir, "bin")
	must(t, os.Mkdir(bin, 0o755))
	c := NewCache(bin, 0)
	defer c.Close()

	prog := filepath.Join(bin, "prog")
	copyExec(t, trueBin, prog)
	if out, err := startUnder(t, c, []string{"prog"}, prog); err != nil {
		t.Fatalf("prog: %v: %s", err, out)
	}
	copyExec(t, trueBin, prog) // the same bytes, another file
	if out, err := startUnder(t, c, []string{"prog"}, prog); err != nil {
		t.Errorf("prog replaced: %v: %s; want its new file granted", err, out)
	}

	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	copyExec(t, trueBin, a)
	copyExec(t, trueBin, b)
	link := filepath.Join(bin, "link")
	must(t, os.Symlink(a, link))
	if out, err := startUnder(t, c, []string{"link"}, a); err != nil {
		t.Fatalf("a through link: %v: %s", err, out)
	}
	must(t, os.Remove(link))
	must(t, os.Symlink(b, link))
	if _, err := startUnder(t, c, []string{"link"}, a); !errors.Is(err, syscall.EACCES) {
		t.Errorf("a after link moved to b: %v; want EACCES", err)
	}
	if out, err := startUnder(t, c, []string{"link"}, b); err != nil {
		t.Errorf("b through link: %v: %s", err, out)
	}
}

// TestCacheEvicts keeps at most max rulesets, closing what it drops.
func TestCacheEvicts(t *testing.T) {
	requireLandlock(t)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		must(t, err)
		return len(ents)
	}
	c := NewCache(os.Getenv("PATH"), 2)
	before := fds()
	for range 3 {
		for _, p := range []string{"true", "false", "env", "sh"} {
			rs, err := c.ruleset([]string{p}, nil, "")
			must(t, err)
			rs.Close()
		}
	}
	if len(c.m) != 2 {
		t.Errorf("%d rulesets cached, want 2", len(c.m))
	}
	if n := fds() - before; n != 2 {
		t.Errorf("%d more descriptors open, want 2 (the cached rulesets)", n)
	}
	c.Close()
	if n := fds() - before; n != 0 {
		t.Errorf("%d more descriptors open after Close", n)
	}
}

func TestKey(t *testing.T) {
	keys := map[string]bool{}
	for _, p := range []struct {
		programs, dirs []string
		exclude        string
	}{
		{[]string{"a", "b"}, nil, ""},
		{[]string{"a\x00b"}, nil, ""},
		{[]string{"a"}, []string{"b"}, ""},
		{[]string{"a"}, nil, "b"},
		{[]string{"1:a"}, nil, ""},
		{[]string{"a", "1:b"}, nil, ""},
		{nil, nil, ""},
		{[]string{""}, nil, ""},
	} {
		k := key(p.programs, p.dirs, p.exclude)
		if keys[k] {
			t.Errorf("key(%q, %q, %q) = %q, taken", p.programs, p.dirs, p.exclude, k)
		}
		keys[k] = true
	}
}

func BenchmarkCacheHit(b *testing.B) {
	if ABI() == 0 {
		b.Skip("Landlock unavailable")
	}
	c := NewCache("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 0)
	defer c.Close()
	progs, dirs := []string{"true", "id", "git", "python3"}, []string{"/usr/lib/git-core"}
	for b.Loop() {
		rs, err := c.ruleset(progs, dirs, "/workspace")
		if err != nil {
			b.Fatal(err)
		}
		rs.Close()
	}
}

func BenchmarkStart(b *testing.B) {
	if ABI() == 0 {
		b.Skip("Landlock unavailable")
	}
	c := NewCache("/usr/bin", 0)
	defer c.Close()
	for _, restricted := range []bool{false, true} {
		name := "direct"
		if restricted {
			name = "restricted"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command("/usr/bin/true")
				var err error
				if restricted {
					err = c.Start([]string{"true"}, nil, "", cmd.Start)
				} else {
					err = cmd.Start()
				}
				if err == nil {
					err = cmd.Wait()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
