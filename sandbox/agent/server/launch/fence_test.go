package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFenceComplement: a fence grants writes on everything but its directories and the
// way down to them, and nothing through a symlink.
func TestFenceComplement(t *testing.T) {
	d, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	for _, p := range []string{"run/state", "other/deep", "agent"} {
		must(t, os.MkdirAll(filepath.Join(d, p), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(d, "run/sock"), nil, 0o600))
	must(t, os.Symlink(filepath.Join(d, "run"), filepath.Join(d, "to-run")))
	f, err := NewFence(filepath.Join(d, "run"), filepath.Join(d, "agent"), filepath.Join(d, "missing"))
	must(t, err)
	w := f.Writable()
	for _, p := range w {
		for _, fenced := range f.Fenced() {
			if within(p, fenced) || within(fenced, p) {
				t.Errorf("writable %s overlaps the fenced %s", p, fenced)
			}
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			t.Errorf("writable %s is a symlink", p)
		}
	}
	if !slices.Contains(w, filepath.Join(d, "other")) {
		t.Errorf("the fenced directories' sibling %s is not writable: %v", filepath.Join(d, "other"), w)
	}
	if !slices.Contains(w, "/dev") && dirExists("/dev") {
		t.Errorf("/dev is not writable: %v", w)
	}
	if _, err := NewFence("/"); err == nil {
		t.Error(`NewFence("/") was accepted`)
	}
	if _, err := NewFence("relative/dir"); err == nil {
		t.Error("NewFence of a relative path was accepted")
	}
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// fenceScript tampers with the fenced directory $F (unlink, create, rename over,
// symlink, mkdir, append, truncate) and does the same beside it in $O, printing one
// "<what>=ok|refused" line each.
const fenceScript = `
try() { k=$1; shift; if "$@" 2>/dev/null; then echo "$k=ok"; else echo "$k=refused"; fi; }
try f_unlink rm -f "$F/sock"
try f_create sh -c ': > "$F/planted"'
try f_rename mv -f "$F/keep" "$F/sock"
try f_symlink ln -s /tmp "$F/link"
try f_mkdir mkdir "$F/dir"
try f_append sh -c 'echo x >> "$F/keep"'
try f_truncate truncate -s 0 "$F/keep"
try f_nested sh -c ': > "$F/state/planted"'
try o_create sh -c ': > "$O/made"'
try o_rename mv -f "$O/made" "$O/moved"
try o_symlink ln -s /tmp "$O/link"
try o_unlink rm -f "$O/moved"
try o_mkdir mkdir "$O/dir"
try devnull sh -c 'echo x > /dev/null'
`

// TestFenceRefusesWrites: a command in a fenced domain (scope-only, and a policy's)
// can't change anything beneath the fenced directory, and everything beside it, on
// both launchers; the fenced files are as they were.
func TestFenceRefusesWrites(t *testing.T) {
	forEachLauncher(t, testFenceRefusesWrites)
}

func testFenceRefusesWrites(t *testing.T, launcher string) {
	requireScopes(t)
	d, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	fenced, open := filepath.Join(d, "run"), filepath.Join(d, "open")
	must(t, os.MkdirAll(filepath.Join(fenced, "state"), 0o777))
	must(t, os.MkdirAll(open, 0o777))
	must(t, os.WriteFile(filepath.Join(fenced, "sock"), []byte("sock"), 0o666))
	must(t, os.WriteFile(filepath.Join(fenced, "keep"), []byte("keep"), 0o666))
	fence, err := NewFence(fenced)
	must(t, err)

	scope, err := NewScopeRuleset(ScopeAll, fence)
	must(t, err)
	defer scope.Close()
	cache := NewScopedCache(os.Getenv("PATH"), 0, ScopeAll, fence)
	defer cache.Close()
	starts := map[string]func(*exec.Cmd) error{
		"scope":  func(cmd *exec.Cmd) error { return scope.StartVia(launcher, cmd) },
		"policy": func(cmd *exec.Cmd) error { return cache.StartVia(launcher, nil, []string{"/usr", "/bin"}, "", cmd) },
	}
	for name, start := range starts {
		cmd := exec.Command("/bin/sh", "-c", fenceScript)
		cmd.Env = append(os.Environ(), "F="+fenced, "O="+open, "CWS_SCOPE_LAUNCHER=1")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		must(t, start(cmd))
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out.String())
		}
		got := map[string]string{}
		for _, line := range strings.Split(out.String(), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				got[k] = v
			}
		}
		for _, k := range []string{"f_unlink", "f_create", "f_rename", "f_symlink", "f_mkdir", "f_append", "f_truncate", "f_nested"} {
			if got[k] != "refused" {
				t.Errorf("%s: %s = %q, want refused", name, k, got[k])
			}
		}
		for _, k := range []string{"o_create", "o_rename", "o_symlink", "o_unlink", "o_mkdir", "devnull"} {
			if got[k] != "ok" {
				t.Errorf("%s: %s = %q, want ok", name, k, got[k])
			}
		}
		must(t, os.RemoveAll(filepath.Join(open, "dir")))
		must(t, os.RemoveAll(filepath.Join(open, "link")))
	}
	entries, err := os.ReadDir(fenced)
	must(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"keep", "sock", "state"}) {
		t.Errorf("the fenced directory holds %v, want keep, sock, state", names)
	}
	for f, want := range map[string]string{"keep": "keep", "sock": "sock"} {
		if b, _ := os.ReadFile(filepath.Join(fenced, f)); string(b) != want {
			t.Errorf("%s = %q, want %q", f, b, want)
		}
	}
	// This process is not in the domain: the agent still writes there.
	must(t, os.WriteFile(filepath.Join(fenced, "state", "mine"), nil, 0o600))
}
