package lsp

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// warmFixture is a fixture whose fake language has the marker fake.mod, warmed after
// 20ms of quiet, in a container with room (a cgroup directory of the test's).
func warmFixture(t *testing.T, tweak func(*Config)) (*fixture, string) {
	t.Helper()
	cg := t.TempDir()
	writeCgroup(t, cg, "max", 0)
	f := newFixture(t, nil, func(c *Config) {
		c.Languages[0].Markers = []string{"fake.mod"}
		c.WarmDelay = 20 * time.Millisecond
		c.Cgroup = cg
		if tweak != nil {
			tweak(c)
		}
	})
	return f, cg
}

// writeCgroup writes memory.max (a number or "max") and memory.current.
func writeCgroup(t *testing.T, dir, max string, current int64) {
	t.Helper()
	for name, v := range map[string]string{"memory.max": max, "memory.current": fmt.Sprint(current)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) mkdir(rel string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Join(f.root, rel), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// running waits up to wait for the number of running servers to be n, and reports
// whether it got there.
func (f *fixture) running(n int, wait time.Duration) bool {
	for end := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		if len(f.m.Status()) == n {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// The write of a source file in a directory under a project marker starts the server
// in the background and opens that file in it: the first request finds it open.
func TestWarmAfterWriteUnderMarker(t *testing.T) {
	f, _ := warmFixture(t, nil)
	f.write("fake.mod", "module\n")
	f.mkdir("pkg")
	f.write("pkg/a.fk", "Sym\n")
	f.m.Wrote(f.files, "pkg/a.fk", false)
	if !f.running(1, 10*time.Second) {
		t.Fatal("no server started after a write under fake.mod")
	}
	h := f.hover("pkg/a.fk", 1, 1)
	if h.Opens != 1 || h.Version != 1 || !slices.Equal(h.Open, []string{"a.fk"}) {
		t.Errorf("first request after the warm-up: %+v; want a.fk opened once, by the warm-up", h)
	}
}

// The write of the marker itself warms with the first source file beneath it.
func TestWarmAfterMarkerWrite(t *testing.T) {
	f, _ := warmFixture(t, nil)
	f.mkdir("mod/sub")
	f.write("mod/sub/deep.fk", "x\n")
	f.write("mod/top.fk", "x\n")
	f.write("mod/fake.mod", "module\n")
	f.m.Wrote(f.files, "mod/fake.mod", false)
	if !f.running(1, 10*time.Second) {
		t.Fatal("no server started after fake.mod was written")
	}
	if h := f.hover("mod/top.fk", 1, 1); !slices.Equal(h.Open, []string{"top.fk"}) || h.Opens != 1 {
		t.Errorf("after the warm-up: %+v; want the shallowest file, top.fk, opened", h)
	}
}

// An upload is looked through for projects: a marker anywhere near the top, with a
// source file at or beneath it.
func TestWarmAfterUpload(t *testing.T) {
	f, _ := warmFixture(t, nil)
	f.mkdir("repo-main/cmd")
	f.mkdir("repo-main/node_modules/dep")
	f.write("repo-main/node_modules/dep/a.fk", "dependency\n")
	f.write("repo-main/fake.mod", "module\n")
	f.write("repo-main/cmd/main.fk", "Sym\n")
	f.write("loose.fk", "outside the project\n")
	f.m.Wrote(f.files, ".", true)
	if !f.running(1, 10*time.Second) {
		t.Fatal("no server started after an upload with a project")
	}
	if h := f.hover("repo-main/cmd/main.fk", 1, 1); !slices.Equal(h.Open, []string{"main.fk"}) || h.Opens != 1 {
		t.Errorf("after the warm-up: %+v; want main.fk (under fake.mod) opened", h)
	}
}

// An upload into a directory of a project whose marker is above it.
func TestWarmAfterUploadBelowMarker(t *testing.T) {
	f, _ := warmFixture(t, nil)
	f.write("fake.mod", "module\n")
	f.mkdir("src/deep")
	f.write("src/deep/a.fk", "Sym\n")
	f.m.Wrote(f.files, "src", true)
	if !f.running(1, 10*time.Second) {
		t.Fatal("no server started after an upload below fake.mod")
	}
	if h := f.hover("src/deep/a.fk", 1, 1); !slices.Equal(h.Open, []string{"a.fk"}) || h.Opens != 1 {
		t.Errorf("after the warm-up: %+v", h)
	}
}

// Nothing starts without a project: source files without a marker, files of no
// language, an upload with no marker, or with warm-up off.
func TestWarmNotWithoutProject(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		rel   string
		dir   bool
		tweak func(*Config)
	}{
		{"source without marker", map[string]string{"a.fk": "x"}, "a.fk", false, nil},
		{"marker without source", map[string]string{"fake.mod": "m", "notes.txt": "x"}, "fake.mod", false, nil},
		{"not a language's file", map[string]string{"fake.mod": "m", "a.fk": "x", "README.md": "x"}, "README.md", false, nil},
		{"upload without marker", map[string]string{"a.fk": "x"}, ".", true, nil},
		{"marker only in a dependency", map[string]string{"node_modules/fake.mod": "m", "a.fk": "x"}, ".", true, nil},
		{"warm-up off", map[string]string{"fake.mod": "m", "a.fk": "x"}, "a.fk", false, func(c *Config) { c.WarmDelay = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := warmFixture(t, tc.tweak)
			for rel, content := range tc.files {
				f.mkdir(filepath.Dir(rel))
				f.write(rel, content)
			}
			f.m.Wrote(f.files, tc.rel, tc.dir)
			if f.running(1, 300*time.Millisecond) {
				t.Errorf("a server started: %+v", f.m.Status())
			}
		})
	}
}

// The warm-up is bounded: not while the container's memory is short, once per language
// until a tool call uses the server, and never after Close.
func TestWarmBounded(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		f, cg := warmFixture(t, nil)
		f.write("fake.mod", "m\n")
		f.write("a.fk", "x\n")
		writeCgroup(t, cg, fmt.Sprint(512<<20), 300<<20) // 212 MiB free, 384 wanted
		f.m.Wrote(f.files, "a.fk", false)
		if f.running(1, 300*time.Millisecond) {
			t.Fatalf("a server started with 212 MiB free: %+v", f.m.Status())
		}
		// Reclaimable page cache counts as free.
		os.WriteFile(filepath.Join(cg, "memory.stat"), []byte("anon 1000\ninactive_file 209715200\n"), 0o644)
		f.m.Wrote(f.files, "a.fk", false)
		if !f.running(1, 10*time.Second) {
			t.Fatal("no server started once there was room")
		}
	})
	t.Run("memory, cgroup v1", func(t *testing.T) {
		f, cg := warmFixture(t, nil)
		os.Remove(filepath.Join(cg, "memory.max"))
		os.Mkdir(filepath.Join(cg, "memory"), 0o755)
		os.WriteFile(filepath.Join(cg, "memory/memory.limit_in_bytes"), []byte(fmt.Sprint(512<<20)), 0o644)
		os.WriteFile(filepath.Join(cg, "memory/memory.usage_in_bytes"), []byte(fmt.Sprint(300<<20)), 0o644)
		f.write("fake.mod", "m\n")
		f.write("a.fk", "x\n")
		f.m.Wrote(f.files, "a.fk", false)
		if f.running(1, 300*time.Millisecond) {
			t.Fatalf("a server started with 212 MiB free: %+v", f.m.Status())
		}
		os.WriteFile(filepath.Join(cg, "memory/memory.stat"), []byte("cache 1\ntotal_inactive_file 209715200\n"), 0o644)
		f.m.Wrote(f.files, "a.fk", false)
		if !f.running(1, 10*time.Second) {
			t.Fatal("no server started once there was room")
		}
	})
	t.Run("pids", func(t *testing.T) {
		f, cg := warmFixture(t, nil)
		f.write("fake.mod", "m\n")
		f.write("a.fk", "x\n")
		os.WriteFile(filepath.Join(cg, "pids.max"), []byte("100\n"), 0o644)
		os.WriteFile(filepath.Join(cg, "pids.current"), []byte("90\n"), 0o644)
		f.m.Wrote(f.files, "a.fk", false)
		if f.running(1, 300*time.Millisecond) {
			t.Fatalf("a server started with 10 tasks left: %+v", f.m.Status())
		}
	})
	t.Run("once until used", func(t *testing.T) {
		f, _ := warmFixture(t, func(c *Config) { c.IdleTimeout = 100 * time.Millisecond; c.StopGrace = time.Second })
		f.write("fake.mod", "m\n")
		f.write("a.fk", "x\n")
		f.m.Wrote(f.files, "a.fk", false)
		if !f.running(1, 10*time.Second) || !f.running(0, 10*time.Second) {
			t.Fatal("the warmed server did not start, or did not stop when idle")
		}
		f.m.Wrote(f.files, "a.fk", false)
		if f.running(1, 300*time.Millisecond) {
			t.Fatal("an unused warmed server was warmed again after its idle stop")
		}
		f.hover("a.fk", 1, 1) // used: after its next stop a write warms it again
		if !f.running(0, 10*time.Second) {
			t.Fatal("not stopped when idle")
		}
		f.m.Wrote(f.files, "a.fk", false)
		if !f.running(1, 10*time.Second) {
			t.Fatal("a used server was not warmed again after its idle stop")
		}
	})
	t.Run("closed", func(t *testing.T) {
		f, _ := warmFixture(t, func(c *Config) { c.WarmDelay = 50 * time.Millisecond })
		f.write("fake.mod", "m\n")
		f.write("a.fk", "x\n")
		f.m.Wrote(f.files, "a.fk", false)
		f.m.Close()
		time.Sleep(200 * time.Millisecond)
		f.m.Wrote(f.files, "a.fk", false)
		if f.running(1, 200*time.Millisecond) {
			t.Fatal("a server started after Close")
		}
	})
}

// A language whose server knows only open files without a config (Language.Configs)
// gets the project's files opened, within bounds, and new ones before each request
// that looks across files.
func TestConfiglessProjectFiles(t *testing.T) {
	fx := func(t *testing.T) *fixture {
		return newFixture(t, nil, func(c *Config) { c.Languages[0].Configs = []string{"fake.json"} })
	}
	t.Run("opened", func(t *testing.T) {
		f := fx(t)
		for _, d := range []string{"sub", "node_modules/dep", ".hidden", "configured"} {
			f.mkdir(d)
		}
		f.write("a.fk", "Sym\n")
		f.write("b.fk", "uses Sym\n")
		f.write("sub/c.fk", "Sym again\n")
		f.write("secret.fk", "Sym, denied\n")
		f.write("node_modules/dep/x.fk", "Sym in a dependency\n")
		f.write(".hidden/y.fk", "Sym hidden\n")
		f.write("configured/fake.json", "{}\n")
		f.write("configured/z.fk", "Sym, in a project of its own\n")
		f.files.deny["secret.fk"] = true
		if h := f.hover("a.fk", 1, 1); !slices.Equal(h.Open, []string{"a.fk", "b.fk", "c.fk"}) {
			t.Fatalf("open after the first request: %v; want a.fk, b.fk, sub/c.fk", h.Open)
		}
		refs := func() []string {
			var locs []Location
			json.Unmarshal(f.must("get_references", map[string]any{"file_path": "a.fk", "line": 1, "character": 1}), &locs)
			var out []string
			for _, l := range locs {
				out = append(out, strings.TrimPrefix(l.URI, "file:///workspace/"))
			}
			slices.Sort(out)
			return out
		}
		if got := refs(); !slices.Equal(got, []string{"a.fk", "b.fk", "sub/c.fk"}) {
			t.Errorf("references: %v", got)
		}
		f.write("sub/d.fk", "a new use of Sym\n")
		if got := refs(); !slices.Equal(got, []string{"a.fk", "b.fk", "sub/c.fk", "sub/d.fk"}) {
			t.Errorf("references after a file was added: %v", got)
		}
	})
	t.Run("a config at the root", func(t *testing.T) {
		f := fx(t)
		f.write("fake.json", "{}\n")
		f.write("a.fk", "Sym\n")
		f.write("b.fk", "Sym\n")
		if h := f.hover("a.fk", 1, 1); !slices.Equal(h.Open, []string{"a.fk"}) {
			t.Errorf("open: %v; want only the asked file", h.Open)
		}
	})
	t.Run("bounded", func(t *testing.T) {
		f := fx(t)
		for i := range 150 {
			f.write(fmt.Sprintf("f%03d.fk", i), "Sym\n")
		}
		f.write("big.fk", strings.Repeat("x", maxProjectFile+1))
		if h := f.hover("f000.fk", 1, 1); len(h.Open) != maxProjectFiles || slices.Contains(h.Open, "big.fk") {
			t.Errorf("%d files open (big.fk: %v); want %d, without big.fk", len(h.Open), slices.Contains(h.Open, "big.fk"), maxProjectFiles)
		}
	})
}
