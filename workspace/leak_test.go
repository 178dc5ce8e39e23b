package workspace_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

// secret marks every denied file's content: it must never appear in any output.
const secret = "S3CRET"

const leakPolicy = `{"deniedPaths": [".env", "secrets/**", "**/*.pem", "{prod,stage}.key"]}`

// leakEnv is a git repository with denied files in its first commit (the root), changed
// in the second, and changed again (unstaged and staged) in the worktree.
func leakEnv(t *testing.T) (*env, map[string]string) {
	t.Helper()
	e := newTestEnv(t, leakPolicy)
	git := func(args ...string) string {
		t.Helper()
		r := value[*core.RunCommandResult](t, e.ok("runCommand", map[string]any{"command": "git", "args": args}))
		return strings.TrimSpace(r.Stdout)
	}
	git("init", "-q", "-b", "main")
	git("config", "user.email", "t@example.com")
	git("config", "user.name", "t")
	denied := []string{".env", "secrets/db.txt", "deep/dir/cert.pem", "prod.key", "stage.key"}
	for _, p := range denied {
		e.put(p, secret+"-v1 "+p+"\n")
	}
	e.put("README.md", "readme v1\n")
	git("add", "-A")
	git("commit", "-q", "-m", "root")
	ids := map[string]string{"root": git("rev-parse", "HEAD"), "blob": git("rev-parse", "HEAD:.env"),
		"tree": git("rev-parse", "HEAD:secrets")}
	for _, p := range denied {
		e.put(p, secret+"-v2 "+p+"\n")
	}
	e.put("README.md", "readme v2\n")
	git("commit", "-q", "-am", "second")
	ids["second"] = git("rev-parse", "HEAD")
	ids["blob2"] = git("rev-parse", "HEAD:.env")
	for _, p := range denied {
		e.put(p, secret+"-v3 "+p+"\n")
	}
	git("add", "-A")
	for _, p := range denied {
		e.put(p, secret+"-v4 "+p+"\n")
	}
	e.put("README.md", "readme v3\n")
	return e, ids
}

// TestDeniedPathsNeverLeaveThroughGit: every git tool, in every mode, leaves denied
// files' contents out, and refuses REF:path and object ids that would print them.
func TestDeniedPathsNeverLeaveThroughGit(t *testing.T) {
	e, ids := leakEnv(t)
	outputs := []struct {
		name   string
		tool   string
		args   map[string]any
		readme bool // the output must still show README.md's change
	}{
		{"show HEAD", "gitShow", nil, true},
		{"show root commit", "gitShow", map[string]any{"ref": ids["root"]}, true},
		{"show HEAD~1", "gitShow", map[string]any{"ref": "HEAD~1"}, true},
		{"show by branch name", "gitShow", map[string]any{"ref": "main"}, true},
		{"diff worktree", "gitDiff", nil, true},
		{"diff staged", "gitDiff", map[string]any{"staged": true}, false}, // only denied files are staged
		{"diff against HEAD~1", "gitDiff", map[string]any{"ref": "HEAD~1"}, true},
		{"diff between commits", "gitDiff", map[string]any{"ref": ids["root"] + ".." + ids["second"]}, true},
		{"diff symmetric", "gitDiff", map[string]any{"ref": ids["root"] + "..." + ids["second"]}, true},
		{"diff open range", "gitDiff", map[string]any{"ref": ids["root"] + ".."}, true},
		{"diff of a parent dir", "gitDiff", map[string]any{"ref": "HEAD~1", "paths": []string{"deep"}}, false},
		{"diff no context", "gitDiff", map[string]any{"contextLines": 0}, true},
		{"status", "gitStatus", nil, false},
		{"log", "gitLog", nil, false},
	}
	for _, tc := range outputs {
		t.Run(tc.name, func(t *testing.T) {
			out := asJSON(e.sub(t).ok(tc.tool, tc.args))
			if strings.Contains(out, secret) {
				t.Errorf("%s leaks a denied file: %s", tc.tool, out)
			}
			if tc.readme && !strings.Contains(out, "readme") {
				t.Errorf("%s lost the allowed change: %s", tc.tool, out)
			}
		})
	}
	t.Run("diff is git's own patch of the allowed files", func(t *testing.T) {
		e := e.sub(t)
		for _, a := range []map[string]any{nil, {"ref": "HEAD~1"}, {"contextLines": 1}} {
			d := value[*core.GitDiffResult](t, e.ok("gitDiff", a))
			args := []string{"-c", "core.quotepath=off", "diff", "--no-color"}
			if a["ref"] != nil {
				args = append(args, a["ref"].(string))
			}
			if a["contextLines"] != nil {
				args = append(args, "-U1")
			}
			want := value[*core.RunCommandResult](t, e.ok("runCommand", map[string]any{"command": "git", "args": append(args, "--", "README.md")}))
			if d.Diff != want.Stdout {
				t.Errorf("gitDiff(%v) =\n%s\nwant git diff -- README.md:\n%s", a, d.Diff, want.Stdout)
			}
		}
	})
	t.Run("status hides denied files", func(t *testing.T) {
		st := value[*core.GitStatusResult](t, e.sub(t).ok("gitStatus", nil))
		if len(st.Files) != 1 || st.Files[0].Path != "README.md" {
			t.Errorf("status = %s, want README.md only", asJSON(st.Files))
		}
	})
	refusals := []struct {
		name string
		tool string
		args map[string]any
		want error // nil: an error result (isError)
	}{
		{"REF:path of a denied file", "gitShow", map[string]any{"ref": "HEAD:.env"}, workspace.ErrPolicy},
		{"REF:path in a denied dir", "gitShow", map[string]any{"ref": "HEAD~1:secrets/db.txt"}, workspace.ErrPolicy},
		{"REF:path of a denied glob", "gitShow", map[string]any{"ref": "HEAD:deep/dir/cert.pem"}, workspace.ErrPolicy},
		{"REF:path of a brace rule", "gitShow", map[string]any{"ref": "main:stage.key"}, workspace.ErrPolicy},
		{"REF:path spelled with ..", "gitShow", map[string]any{"ref": "HEAD:deep/../.env"}, workspace.ErrPolicy},
		{"blob id", "gitShow", map[string]any{"ref": ids["blob"]}, nil},
		{"tree id", "gitShow", map[string]any{"ref": ids["tree"]}, nil},
		{"tree id:path", "gitShow", map[string]any{"ref": ids["tree"] + ":db.txt"}, nil},
		{"diff of two blob ids", "gitDiff", map[string]any{"ref": ids["blob"] + ".." + ids["blob2"]}, nil},
		{"diff against a blob id", "gitDiff", map[string]any{"ref": ids["blob"]}, nil},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			if tc.want != nil {
				e.refused(tc.want, tc.tool, tc.args)
				return
			}
			if out := asJSON(e.failed(tc.tool, tc.args)); strings.Contains(out, secret) {
				t.Errorf("refusal leaks: %s", out)
			}
		})
	}
	t.Run("REF:path of an allowed file", func(t *testing.T) {
		r := value[*core.GitShowResult](t, e.sub(t).ok("gitShow", map[string]any{"ref": "HEAD~1:README.md"}))
		if r.Output != "readme v1\n" {
			t.Errorf("HEAD~1:README.md = %q", r.Output)
		}
	})
	t.Run("REST diff", func(t *testing.T) {
		d, err := e.svc.Diff(context.Background(), e.caller, e.id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(d, secret) || !strings.Contains(d, "readme v3") {
			t.Errorf("REST diff = %s", d)
		}
	})
	t.Run("commit all leaves denied files unstaged", func(t *testing.T) {
		e := e.sub(t)
		e.ok("runCommand", map[string]any{"command": "git", "args": []string{"reset", "-q"}})
		e.ok("gitCommit", map[string]any{"message": "third", "all": true})
		show := value[*core.RunCommandResult](t, e.ok("runCommand", map[string]any{"command": "git", "args": []string{"show", "--stat", "HEAD"}}))
		if strings.Contains(show.Stdout, ".env") || strings.Contains(show.Stdout, "secrets") || !strings.Contains(show.Stdout, "README.md") {
			t.Errorf("commit -A staged denied files:\n%s", show.Stdout)
		}
	})
}

// TestHardLinksToDeniedFiles: a hard link is the same file under another name; where the
// policy denies anything, no tool reads or writes a multiply-linked file, and git outputs
// leave it out.
func TestHardLinksToDeniedFiles(t *testing.T) {
	e, _ := leakEnv(t)
	link := func(from, to string) {
		t.Helper()
		if err := os.Link(e.path(from), e.path(to)); err != nil {
			t.Fatal(err)
		}
	}
	link(".env", "notes.txt")
	link("secrets/db.txt", "docs.md")
	// A tracked, allowed file replaced by a link to a denied one.
	os.Remove(e.path("README.md"))
	link(".env", "README.md")
	before := e.get(".env")

	for _, p := range []string{"notes.txt", "docs.md", "README.md", "/workspace/notes.txt", "./docs.md"} {
		t.Run("readFile "+p, func(t *testing.T) {
			e.sub(t).refused(workspace.ErrPolicy, "readFile", map[string]any{"path": p})
		})
	}
	t.Run("writeFile in place", func(t *testing.T) {
		e.sub(t).refused(workspace.ErrPolicy, "writeFile", map[string]any{"path": "notes.txt", "contents": "pwned",
			"options": map[string]any{"atomic": false}})
		if e.get(".env") != before {
			t.Errorf(".env changed through its hard link: %q", e.get(".env"))
		}
	})
	t.Run("editFile", func(t *testing.T) {
		e.sub(t).refused(workspace.ErrPolicy, "editFile", map[string]any{"path": "notes.txt", "oldText": secret, "newText": "x"})
		if e.get(".env") != before {
			t.Errorf(".env changed through its hard link")
		}
	})
	t.Run("atomic write replaces the name, not the file", func(t *testing.T) {
		e := e.sub(t)
		e.ok("writeFile", map[string]any{"path": "docs.md", "contents": "fresh"})
		if e.get("docs.md") != "fresh" || !strings.Contains(e.get("secrets/db.txt"), secret) {
			t.Errorf("docs.md = %q, secrets/db.txt = %q", e.get("docs.md"), e.get("secrets/db.txt"))
		}
	})
	t.Run("search", func(t *testing.T) {
		for _, a := range []map[string]any{{"query": secret}, {"query": secret, "path": "notes.txt"}, {"query": "S3C.ET", "options": map[string]any{"regex": true}}} {
			out, err := e.sub(t).call("searchFiles", a)
			if err == nil && strings.Contains(asJSON(out.Value), secret+"-v") {
				t.Errorf("searchFiles(%v) = %s", a, asJSON(out.Value))
			}
		}
	})
	t.Run("git and the REST diff", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{{"gitDiff", nil}, {"gitDiff", map[string]any{"ref": "HEAD"}}} {
			if out := asJSON(e.sub(t).ok(tc.tool, tc.args)); strings.Contains(out, secret) {
				t.Errorf("%s leaks through a hard link: %s", tc.tool, out)
			}
		}
		d, err := e.svc.Diff(context.Background(), e.caller, e.id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(d, secret) {
			t.Errorf("REST diff leaks through a hard link:\n%s", d)
		}
	})
	t.Run("no deny rules: hard links are ordinary", func(t *testing.T) {
		e := newTestEnv(t, "")
		e.put("a.txt", "shared\n")
		if err := os.Link(e.path("a.txt"), e.path("b.txt")); err != nil {
			t.Fatal(err)
		}
		if r := value[*core.ReadFileResult](t, e.ok("readFile", map[string]any{"path": "b.txt"})); r.Content != "shared\n" {
			t.Errorf("b.txt = %q", r.Content)
		}
	})
}
