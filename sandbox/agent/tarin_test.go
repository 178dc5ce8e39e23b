package agent_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
)

// workspaceHash digests the whole workspace through tar.out, without a guard.
func workspaceHash(t *testing.T, c *agent.Client) string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := c.TarOut(ctxT(t), agent.TarOutArgs{Path: "."}, &buf); err != nil {
		t.Fatalf("tar out: %v", err)
	}
	h, err := tartest.Hash(&buf)
	if err != nil {
		t.Fatalf("hash: %v", err)
	}
	return h
}

// noStaging fails if an upload's staging directory was left in the workspace.
func noStaging(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".cws-staging-") {
			t.Errorf("staging directory %s left behind", e.Name())
		}
	}
}

// An upload is all or nothing: whatever entry is refused, the workspace is byte for
// byte what it was, including the allowed entries that came before the refused one.
func TestTarInRefusalsLeaveWorkspaceUnchanged(t *testing.T) {
	for _, tc := range tartest.Refusals() {
		t.Run(tc.Name, func(t *testing.T) {
			c, dir, _ := pipeAgent(t)
			ctx := ctxT(t)
			if _, err := c.TarIn(ctx, agent.TarInArgs{}, bytes.NewReader(tartest.Fixture())); err != nil {
				t.Fatalf("fixture: %v", err)
			}
			before := workspaceHash(t, c)
			_, err := c.TarIn(ctx, agent.TarInArgs{Path: ".", MaxBytes: tc.MaxBytes, Guard: tartest.Guard()}, tc.Body())
			var we *agent.WireError
			if !errors.As(err, &we) {
				t.Fatalf("got %v, want a %s refusal", err, tc.Code)
			}
			if we.Code != tc.Code || (tc.Path != "" && we.Path != tc.Path) {
				t.Errorf("got %s %q (%v), want %s %q", we.Code, we.Path, we, tc.Code, tc.Path)
			}
			if after := workspaceHash(t, c); after != before {
				t.Errorf("workspace changed by a refused upload")
			}
			if _, err := os.Lstat(filepath.Join(dir, "new.txt")); err == nil {
				t.Errorf("new.txt, the archive's first entry, was written")
			}
			noStaging(t, dir)
		})
	}
}

func TestTarInMerge(t *testing.T) {
	c, dir, _ := pipeAgent(t)
	ctx := ctxT(t)
	if _, err := c.TarIn(ctx, agent.TarInArgs{}, bytes.NewReader(tartest.Fixture())); err != nil {
		t.Fatalf("fixture: %v", err)
	}
	must(t, os.MkdirAll(filepath.Join(dir, "links"), 0o755))
	must(t, os.Symlink("../secrets/key", filepath.Join(dir, "links/key")))
	must(t, os.Symlink("../secrets", filepath.Join(dir, "links/dir")))
	// A stale staging directory, from an agent that died mid-upload.
	must(t, os.MkdirAll(filepath.Join(dir, ".cws-staging-dead/src"), 0o700))

	up := tartest.Build(
		tartest.Entry{Type: tar.TypeXGlobalHeader, Body: "0123abcd"}, // git archive writes one
		tartest.Dir("./"),
		tartest.Dir("./src/"),
		tartest.File("./src/main.go", "package main // v2\n"),
		tartest.File("./src/new/deep.go", "package new\n"),
		tartest.Entry{Name: "bin/run", Body: "#!/bin/sh\n", Mode: 0o755},
		tartest.Hardlink("bin/run2", "./bin/run"),
		tartest.Symlink("docs", "src/new"),
		tartest.File("links/key", "not a secret\n"),
		tartest.File("links/dir/x", "below a replaced link\n"),
	)
	res, err := c.TarIn(ctx, agent.TarInArgs{Path: ".", Guard: tartest.Guard()}, bytes.NewReader(up))
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 7 || res.Dirs != 1 {
		t.Errorf("result %+v, want 7 files and 1 dir", res)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Errorf("read %s: %v", p, err)
		}
		return string(b)
	}
	for p, want := range map[string]string{
		"src/main.go":     "package main // v2\n",             // replaced
		"src/util.go":     "package main\n\nfunc util() {}\n", // kept: the directory merged
		"src/new/deep.go": "package new\n",
		"README.md":       "# fixture\n",
		"bin/run2":        "#!/bin/sh\n",
		"secrets/key":     "-----BEGIN KEY-----\n", // not written through links/key
		"links/key":       "not a secret\n",
		"links/dir/x":     "below a replaced link\n",
	} {
		if got := read(p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "secrets/x")); err == nil {
		t.Error("secrets/x written through the workspace's links/dir symlink")
	}
	// The hard link is a copy: its own inode, one link each.
	var a, b syscall.Stat_t
	must(t, syscall.Stat(filepath.Join(dir, "bin/run"), &a))
	must(t, syscall.Stat(filepath.Join(dir, "bin/run2"), &b))
	if a.Ino == b.Ino || a.Nlink != 1 || b.Nlink != 1 {
		t.Errorf("bin/run2 is a hard link of bin/run (inodes %d/%d, links %d/%d), want a copy", a.Ino, b.Ino, a.Nlink, b.Nlink)
	}
	if fi, err := os.Stat(filepath.Join(dir, "bin/run2")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("bin/run2 mode: %v %v, want executable like its target", fi, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "docs")); err != nil || l != "src/new" {
		t.Errorf("docs -> %q (%v), want the archive's symlink to src/new", l, err)
	}
	noStaging(t, dir)
}
