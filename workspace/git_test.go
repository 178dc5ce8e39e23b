package workspace_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

var hexHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// gitEnv returns an env whose workspace is a git repository on branch main, made with
// runCommand as an agent would.
func gitEnv(t *testing.T) *env {
	t.Helper()
	e := newTestEnv(t, "")
	e.ok("runCommand", map[string]any{"command": "git", "args": []string{"init", "-q", "-b", "main"}})
	return e
}

func TestGitTools(t *testing.T) {
	e := gitEnv(t)

	st := value[*core.GitStatusResult](t, e.ok("gitStatus", map[string]any{}))
	if st.Branch != "main" || !st.Clean || len(st.Files) != 0 {
		t.Errorf("empty repo status = %s", asJSON(st))
	}

	e.ok("writeFile", map[string]any{"path": "a.txt", "contents": "v1\n"})
	e.ok("writeFile", map[string]any{"path": "dir/b.txt", "contents": "b\n"})
	st = value[*core.GitStatusResult](t, e.ok("gitStatus", map[string]any{"workspaceRoot": "."}))
	if st.Clean || asJSON(st.Files) != `[{"path":"a.txt","index":"?","worktree":"?"},{"path":"dir/b.txt","index":"?","worktree":"?"}]` {
		t.Errorf("untracked status = %s", asJSON(st))
	}

	c1 := value[*core.GitCommitResult](t, e.ok("gitCommit", map[string]any{"message": "first commit", "all": true}))
	if !hexHash.MatchString(c1.Commit) || !strings.Contains(c1.Summary, "first commit") {
		t.Errorf("commit = %s", asJSON(c1))
	}
	st = value[*core.GitStatusResult](t, e.ok("gitStatus", nil))
	if !st.Clean || st.Branch != "main" {
		t.Errorf("status after commit = %s", asJSON(st))
	}

	e.ok("writeFile", map[string]any{"path": "a.txt", "contents": "v2\n"})
	st = value[*core.GitStatusResult](t, e.ok("gitStatus", nil))
	if asJSON(st.Files) != `[{"path":"a.txt","index":" ","worktree":"M"}]` {
		t.Errorf("modified status = %s", asJSON(st.Files))
	}
	d := value[*core.GitDiffResult](t, e.ok("gitDiff", nil))
	if d.Empty || !containsAll(d.Diff, "--- a/a.txt", "+++ b/a.txt", "-v1", "+v2") {
		t.Errorf("diff = %s", asJSON(d))
	}
	if d := value[*core.GitDiffResult](t, e.ok("gitDiff", map[string]any{"staged": true})); !d.Empty || d.Diff != "" {
		t.Errorf("staged diff before add = %s", asJSON(d))
	}
	if d := value[*core.GitDiffResult](t, e.ok("gitDiff", map[string]any{"paths": []string{"dir"}})); !d.Empty {
		t.Errorf("diff limited to dir = %s", asJSON(d))
	}
	if d := value[*core.GitDiffResult](t, e.ok("gitDiff", map[string]any{"contextLines": 0})); !strings.Contains(d.Diff, "@@ -1 +1 @@") {
		t.Errorf("diff -U0 = %s", d.Diff)
	}

	c2 := value[*core.GitCommitResult](t, e.ok("gitCommit", map[string]any{"message": "second commit\n\nbody", "paths": []string{"a.txt"}}))
	if c2.Commit == c1.Commit || !hexHash.MatchString(c2.Commit) {
		t.Errorf("second commit = %s", asJSON(c2))
	}

	l := value[*core.GitLogResult](t, e.ok("gitLog", nil))
	if l.Count != 2 || l.Commits[0].Hash != c2.Commit || l.Commits[0].Subject != "second commit" || l.Commits[1].Subject != "first commit" {
		t.Fatalf("log = %s", asJSON(l))
	}
	if l.Commits[0].Author != "alice" || l.Commits[0].Email != "alice@cws.invalid" || !strings.HasPrefix(l.Commits[0].Date, "20") {
		t.Errorf("log identity = %s", asJSON(l.Commits[0]))
	}
	if l := value[*core.GitLogResult](t, e.ok("gitLog", map[string]any{"maxCount": 1})); l.Count != 1 {
		t.Errorf("log maxCount 1 = %d commits", l.Count)
	}
	if l := value[*core.GitLogResult](t, e.ok("gitLog", map[string]any{"path": "dir/b.txt"})); l.Count != 1 || l.Commits[0].Hash != c1.Commit {
		t.Errorf("log of dir/b.txt = %s", asJSON(l))
	}
	if l := value[*core.GitLogResult](t, e.ok("gitLog", map[string]any{"ref": "HEAD~1"})); l.Count != 1 || l.Commits[0].Hash != c1.Commit {
		t.Errorf("log HEAD~1 = %s", asJSON(l))
	}

	sh := value[*core.GitShowResult](t, e.ok("gitShow", nil))
	if sh.Ref != "HEAD" || !containsAll(sh.Output, c2.Commit, "second commit", "body", "-v1", "+v2") {
		t.Errorf("show = %s", asJSON(sh))
	}
	if sh := value[*core.GitShowResult](t, e.ok("gitShow", map[string]any{"ref": c1.Commit[:10]})); !strings.Contains(sh.Output, "first commit") {
		t.Errorf("show first = %s", sh.Output)
	}
	if d := value[*core.GitDiffResult](t, e.ok("gitDiff", map[string]any{"ref": "HEAD~1"})); !containsAll(d.Diff, "-v1", "+v2") {
		t.Errorf("diff HEAD~1 = %s", d.Diff)
	}

	b := value[*core.GitBranchResult](t, e.ok("gitBranch", map[string]any{"create": "feature"}))
	if b.Current != "main" || !slices.Equal(b.Branches, []string{"feature", "main"}) {
		t.Errorf("branch create = %s", asJSON(b))
	}
	b = value[*core.GitBranchResult](t, e.ok("gitBranch", map[string]any{"create": "old", "startPoint": "HEAD~1"}))
	if !slices.Contains(b.Branches, "old") {
		t.Errorf("branch with startPoint = %s", asJSON(b))
	}
	co := value[*core.GitCheckoutResult](t, e.ok("gitCheckout", map[string]any{"ref": "old"}))
	if co.Ref != "old" || e.get("a.txt") != "v1\n" {
		t.Errorf("checkout old = %s, a.txt = %q", asJSON(co), e.get("a.txt"))
	}
	e.ok("gitCheckout", map[string]any{"ref": "topic", "create": true})
	if st := value[*core.GitStatusResult](t, e.ok("gitStatus", nil)); st.Branch != "topic" {
		t.Errorf("after checkout -b: branch %q", st.Branch)
	}
	if b := value[*core.GitBranchResult](t, e.ok("gitBranch", nil)); b.Current != "topic" {
		t.Errorf("current = %q", b.Current)
	}
	e.ok("gitCheckout", map[string]any{"ref": "main"})
	b = value[*core.GitBranchResult](t, e.ok("gitBranch", map[string]any{"delete": "feature"}))
	if slices.Contains(b.Branches, "feature") || b.Current != "main" {
		t.Errorf("branch delete = %s", asJSON(b))
	}

	t.Run("git failures are error results", func(t *testing.T) {
		e := e.sub(t)
		if f := e.failure("gitCommit", map[string]any{"message": "nothing to commit"}); f.Code != "git_failed" {
			t.Errorf("empty commit: %+v", f)
		}
		e.failure("gitCheckout", map[string]any{"ref": "no-such-branch"})
		e.failure("gitShow", map[string]any{"ref": "no-such-ref"})
		e.failure("gitBranch", map[string]any{"create": "main"})
	})
	t.Run("refs starting with - are invalid", func(t *testing.T) {
		e := e.sub(t)
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{
			{"gitDiff", map[string]any{"ref": "--output=/tmp/x"}},
			{"gitLog", map[string]any{"ref": "-p"}},
			{"gitShow", map[string]any{"ref": "--help"}},
			{"gitCheckout", map[string]any{"ref": "-b"}},
			{"gitCheckout", map[string]any{"ref": "-", "create": true}},
			{"gitBranch", map[string]any{"create": "-D"}},
			{"gitBranch", map[string]any{"create": "x", "startPoint": "--orphan"}},
			{"gitBranch", map[string]any{"delete": "-f"}},
			{"gitShow", map[string]any{"ref": "HEAD --"}},
			{"gitShow", map[string]any{"ref": "a//b"}},
		} {
			e.refused(workspace.ErrInvalid, tc.tool, tc.args)
		}
	})
	t.Run("other invalid arguments", func(t *testing.T) {
		e := e.sub(t)
		e.refused(workspace.ErrInvalid, "gitCommit", map[string]any{"message": "  "})
		e.refused(workspace.ErrInvalid, "gitDiff", map[string]any{"contextLines": -1})
		e.refused(workspace.ErrTraversal, "gitDiff", map[string]any{"paths": []string{"../x"}})
		e.refused(workspace.ErrTraversal, "gitCommit", map[string]any{"message": "m", "paths": []string{"/etc/passwd"}})
		e.refused(workspace.ErrTraversal, "gitLog", map[string]any{"path": "a/../../x"})
	})
}

func TestGitNotARepository(t *testing.T) {
	e := newTestEnv(t, "")
	if f := e.failure("gitStatus", nil); f.Code != "git_failed" {
		t.Errorf("failure = %+v", f)
	}
}

// TestGitHooksDoNotRun: repository hooks (and the commit signing program, which
// .git/config can name) are programs the command allowlist never saw; git tools must
// not run them.
func TestGitHooksDoNotRun(t *testing.T) {
	e := gitEnv(t)
	hook := "#!/bin/sh\ntouch \"$(git rev-parse --show-toplevel)/$(basename \"$0\")-ran\"\n"
	hooks := []string{"pre-commit", "prepare-commit-msg", "commit-msg", "post-commit", "post-checkout", "reference-transaction"}
	for _, h := range hooks {
		e.put(".git/hooks/"+h, hook)
		if err := os.Chmod(e.path(".git/hooks/"+h), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.put("a.txt", "a\n")
	e.ok("gitCommit", map[string]any{"message": "with hooks", "all": true})
	e.ok("gitBranch", map[string]any{"create": "b2"})
	e.ok("gitCheckout", map[string]any{"ref": "b2"})
	e.ok("gitCheckout", map[string]any{"ref": "b3", "create": true})
	for _, h := range hooks {
		if e.exists(h + "-ran") {
			t.Errorf("hook %s ran", h)
		}
	}
	// The hooks are valid: plain git would have run them.
	e.ok("runCommand", map[string]any{"command": "git", "args": []string{"-c", "user.name=x", "-c", "user.email=x@y", "commit", "-q", "--allow-empty", "-m", "direct"}})
	if !e.exists("pre-commit-ran") {
		t.Fatal("sanity: the pre-commit hook does not run under plain git, so the test proves nothing")
	}
}

func TestGitCommitDoesNotRunSigningProgram(t *testing.T) {
	e := gitEnv(t)
	e.put("evil-gpg", "#!/bin/sh\ntouch \"$(dirname \"$0\")/gpg-ran\"\nexit 1\n")
	if err := os.Chmod(e.path("evil-gpg"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.put(".git/info/exclude", "evil-gpg\ngpg-ran\n")
	cfg := e.get(".git/config") + "[commit]\n\tgpgsign = true\n[gpg]\n\tprogram = " + e.path("evil-gpg") + "\n[log]\n\tshowSignature = true\n"
	e.put(".git/config", cfg)
	e.put("a.txt", "a\n")
	e.ok("gitCommit", map[string]any{"message": "unsigned", "all": true})
	e.ok("gitLog", nil)
	e.ok("gitShow", nil)
	if e.exists("gpg-ran") {
		t.Error("gitCommit ran gpg.program from the repository's config")
	}
}
