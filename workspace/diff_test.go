package workspace_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// diffRepo is a repository as a user has one: what is committed (nil: no commit), then
// what changes in the working tree (a nil content deletes the file).
type diffRepo struct {
	name      string
	committed map[string]string
	worktree  map[string]*string
}

func text(s string) *string { return &s }

// The secret files' contents carry secret, which the diff must never show where the
// policy denies them.
var diffRepos = []diffRepo{
	{name: "top-level files only",
		committed: map[string]string{"README.md": "readme v1\n", "main.go": "package main\n", "notes.txt": "notes\n",
			".gitignore": ".env\nsecrets/\n"},
		worktree: map[string]*string{"README.md": text("readme v2\n"), "notes.txt": nil, "new.go": text("package main // new\n"),
			"todo.txt": text("todo\n"), ".env": text(secret + " env\n"), "key.pem": text(secret + " pem\n")}},
	{name: "nested files only",
		committed: map[string]string{"src/app/main.go": "package main\n", "src/lib/util.go": "package lib\n",
			"docs/guide.md": "guide v1\n", "secrets/token": secret + " v1\n", "build/gen/out.txt": "out v1\n"},
		worktree: map[string]*string{"src/app/main.go": text("package main // v2\n"), "docs/guide.md": nil,
			"src/new/x.go": text("package x\n"), "secrets/token": text(secret + " v2\n"), "secrets/new": text(secret + " new\n"),
			"build/gen/out.txt": text("out v2\n"), "build/gen/blob.bin": text("\x00\x01\x02binary\n")}},
	{name: "both",
		committed: map[string]string{"README.md": "readme v1\n", "main.go": "package main\n", ".gitignore": ".env\nsecrets/\n",
			"src/app/main.go": "package main\n", "docs/guide.md": "guide v1\n", "build/out.txt": "out v1\n"},
		worktree: map[string]*string{"README.md": text("readme v2\n"), "src/app/main.go": text("package main // v2\n"),
			"docs/guide.md": nil, "new.go": text("package main // new\n"), "src/new/x.go": text("package x\n"),
			".env": text(secret + " env\n"), "secrets/token": text(secret + " token\n"), "build/out.txt": text("out v2\n")}},
	{name: "odd names",
		committed: map[string]string{"a b.txt": "v1\n", "[x].go": "package x\n", "src/ü ß.go": "package u\n"},
		worktree: map[string]*string{"a b.txt": text("v2\n"), "[x].go": nil, "src/ü ß.go": text("package u // v2\n"),
			":colon.txt": text("new\n"), "-dash.go": text("package dash\n"), "src/*.go": text("package star\n"), "tab\tname.md": text("t\n")}},
	{name: "no commit",
		worktree: map[string]*string{"README.md": text("readme\n"), "src/a.go": text("package a\n"), ".gitignore": text(".env\n"),
			".env": text(secret + " env\n"), "secrets/token": text(secret + " token\n")}},
	{name: "empty repository"},
}

// diffPolicies are tenant policies, each with the pathspecs a user would give `git diff`
// by hand for it.
var diffPolicies = []struct {
	name, policy string
	byHand       []string
	hidesSecrets bool // the policy refuses every file that holds secret
}{
	{"no rules", `{}`, nil, false},
	{"**", `{"allowedPaths": ["**"]}`, nil, false},
	{"**/* (the seed's example)", `{"allowedPaths": ["**/*"]}`, nil, false},
	{"src/**", `{"allowedPaths": ["src/**"]}`, []string{":(glob)src/**"}, true},
	{"*.go", `{"allowedPaths": ["*.go"]}`, []string{":(glob)*.go"}, true},
	{"{src,docs}/**", `{"allowedPaths": ["{src,docs}/**"]}`, []string{":(glob)src/**", ":(glob)docs/**"}, true},
	{"denied directories", `{"deniedPaths": ["secrets/**", "build"]}`, []string{":(exclude)secrets", ":(exclude)build"}, false},
	{"denied gitignored files", `{"allowedPaths": ["**/*"], "deniedPaths": [".env", "secrets/**", "*.pem"]}`,
		[]string{":(exclude).env", ":(exclude)secrets", ":(exclude,glob)*.pem"}, true},
	{"allowed and denied", `{"allowedPaths": ["src/**", "*.md"], "deniedPaths": ["src/new/**"]}`,
		[]string{":(glob)src/**", ":(glob)*.md", ":(exclude)src/new"}, true},
}

// TestDiffUnderPolicies: the REST diff answers for every policy in every kind of
// repository, with the same patch as `git diff` run by hand under that policy (every
// change staged in a scratch index, then diffed against the last commit with the
// policy's pathspecs).
func TestDiffUnderPolicies(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	for _, p := range diffPolicies {
		for _, r := range diffRepos {
			t.Run(p.name+"/"+r.name, func(t *testing.T) {
				e := newTestEnv(t, p.policy)
				makeRepo(t, e, r)
				got, err := e.svc.Diff(context.Background(), e.caller, e.id)
				if err != nil {
					t.Fatalf("diff: %v", err)
				}
				if want := diffByHand(t, e.dir, r.committed != nil, p.byHand); got != want {
					t.Errorf("diff:\n%s\nwant (git diff by hand):\n%s", got, want)
				}
				if p.hidesSecrets && strings.Contains(got, secret) {
					t.Errorf("the diff shows a denied file:\n%s", got)
				}
				if p.name == "**" && r.name != "empty repository" && !strings.Contains(got, "diff --git") {
					t.Errorf("the diff of a changed repository is empty")
				}
			})
		}
	}
}

// TestDiffLeavesIndexAlone: the diff stages in a private index; the repository's own
// index (what the user staged) is unchanged.
func TestDiffLeavesIndexAlone(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	e := newTestEnv(t, `{"allowedPaths": ["**/*"], "deniedPaths": [".env"]}`)
	makeRepo(t, e, diffRepos[0])
	hostGit(t, e.dir, nil, "add", "new.go")
	before := hostGit(t, e.dir, nil, "diff", "--cached", "--name-status")
	if _, err := e.svc.Diff(context.Background(), e.caller, e.id); err != nil {
		t.Fatalf("diff: %v", err)
	}
	if after := hostGit(t, e.dir, nil, "diff", "--cached", "--name-status"); after != before {
		t.Errorf("the index changed: %q, was %q", after, before)
	}
}

// makeRepo builds r in the workspace with git on the host.
func makeRepo(t *testing.T, e *env, r diffRepo) {
	t.Helper()
	hostGit(t, e.dir, nil, "init", "-q", "-b", "main")
	if r.committed != nil {
		for p, c := range r.committed {
			e.put(p, c)
		}
		hostGit(t, e.dir, nil, "add", "-A")
		hostGit(t, e.dir, nil, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "base")
	}
	for p, c := range r.worktree {
		if c == nil {
			if err := os.Remove(filepath.Join(e.dir, p)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		e.put(p, *c)
	}
}

// diffByHand is what a user gets from git for the workspace's changes under pathspecs.
func diffByHand(t *testing.T, dir string, hasCommit bool, pathspecs []string) string {
	t.Helper()
	index := []string{"GIT_INDEX_FILE=" + filepath.Join(t.TempDir(), "index")}
	base := "4b825dc642cb6eb9a060e54bf8d69288fbee4904" // the empty tree
	if hasCommit {
		base = "HEAD"
	}
	hostGit(t, dir, index, "read-tree", base)
	hostGit(t, dir, index, "add", "-A")
	// core.quotepath=off: names as they are, as the endpoint prints them.
	return hostGit(t, dir, index, append([]string{"-c", "core.quotepath=off", "diff", "--cached", "--binary", base, "--"}, pathspecs...)...)
}

func hostGit(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestCommitAllUnderPolicies: gitCommit with all stages like the REST diff: it works
// under every policy in every kind of repository, and commits exactly what git by hand
// stages under the policy (denied files stay out of history).
func TestCommitAllUnderPolicies(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	for _, p := range diffPolicies {
		for _, r := range diffRepos {
			if r.name == "empty repository" {
				continue // nothing to commit
			}
			t.Run(p.name+"/"+r.name, func(t *testing.T) {
				e := newTestEnv(t, p.policy)
				makeRepo(t, e, r)
				want := diffByHand(t, e.dir, r.committed != nil, p.byHand)
				if want == "" {
					return // nothing the policy allows changed: git commit has nothing to do
				}
				e.ok("gitCommit", map[string]any{"message": "all", "all": true})
				base := "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
				if r.committed != nil {
					base = "HEAD~1"
				}
				if got := hostGit(t, e.dir, nil, "-c", "core.quotepath=off", "diff", "--binary", base, "HEAD"); got != want {
					t.Errorf("the commit:\n%s\nwant (git by hand):\n%s", got, want)
				}
			})
		}
	}
}
