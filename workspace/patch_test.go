package workspace_test

import (
	"testing"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

const (
	patchOrigA = "one\ntwo\nthree\n"
	patchOrigB = "alpha\nbeta\ngamma\n"
	patchOrigD = "to be deleted\n"
)

// multiPatch modifies a.txt and src/b.txt, creates new/c.txt and deletes d.txt.
const multiPatch = `diff --git a/a.txt b/a.txt
index 1111111..2222222 100644
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
diff --git a/src/b.txt b/src/b.txt
index 3333333..4444444 100644
--- a/src/b.txt
+++ b/src/b.txt
@@ -1,3 +1,4 @@
 alpha
 beta
+beta2
 gamma
diff --git a/new/c.txt b/new/c.txt
new file mode 100644
index 0000000..5555555
--- /dev/null
+++ b/new/c.txt
@@ -0,0 +1,2 @@
+created
+file
diff --git a/d.txt b/d.txt
deleted file mode 100644
index 6666666..0000000
--- a/d.txt
+++ /dev/null
@@ -1 +0,0 @@
-to be deleted
`

// conflictPatch applies to a.txt but its src/b.txt hunk does not match.
const conflictPatch = `diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1,3 +1,3 @@
 one
-two
+TWO
 three
diff --git a/new/c.txt b/new/c.txt
new file mode 100644
--- /dev/null
+++ b/new/c.txt
@@ -0,0 +1 @@
+created
diff --git a/src/b.txt b/src/b.txt
--- a/src/b.txt
+++ b/src/b.txt
@@ -1,3 +1,3 @@
 alpha
-BETA-NOT-THERE
+beta
 gamma
`

func patchEnv(t *testing.T, policyJSON string) *env {
	e := newTestEnv(t, policyJSON)
	e.put("a.txt", patchOrigA)
	e.put("src/b.txt", patchOrigB)
	e.put("d.txt", patchOrigD)
	return e
}

func TestApplyPatch(t *testing.T) {
	t.Run("multi-file: modify, create, delete", func(t *testing.T) {
		e := patchEnv(t, "")
		r := value[*core.ApplyPatchResult](t, e.ok("applyPatch", map[string]any{"patch": multiPatch}))
		want := []core.PatchedFile{{Path: "a.txt", Action: "modified"}, {Path: "src/b.txt", Action: "modified"},
			{Path: "new/c.txt", Action: "created"}, {Path: "d.txt", Action: "deleted"}}
		if r.Count != 4 || asJSON(r.Files) != asJSON(want) {
			t.Errorf("files = %s, want %s", asJSON(r.Files), asJSON(want))
		}
		if got := e.get("a.txt"); got != "one\nTWO\nthree\n" {
			t.Errorf("a.txt = %q", got)
		}
		if got := e.get("src/b.txt"); got != "alpha\nbeta\nbeta2\ngamma\n" {
			t.Errorf("src/b.txt = %q", got)
		}
		if got := e.get("new/c.txt"); got != "created\nfile\n" {
			t.Errorf("new/c.txt = %q", got)
		}
		if e.exists("d.txt") {
			t.Error("d.txt was not deleted")
		}
	})
	t.Run("one conflicting hunk: error result, nothing changed", func(t *testing.T) {
		e := patchEnv(t, "")
		f := e.failure("applyPatch", map[string]any{"patch": conflictPatch})
		if f.Code != "conflict" || f.Path != "src/b.txt" {
			t.Errorf("failure = %+v", f)
		}
		if e.get("a.txt") != patchOrigA || e.get("src/b.txt") != patchOrigB || e.exists("new/c.txt") {
			t.Error("a failed patch changed files")
		}
	})
	t.Run("patch to a missing file: error result, nothing changed", func(t *testing.T) {
		e := patchEnv(t, "")
		p := multiPatch + "diff --git a/missing.txt b/missing.txt\n--- a/missing.txt\n+++ b/missing.txt\n@@ -1 +1 @@\n-x\n+y\n"
		e.failed("applyPatch", map[string]any{"patch": p})
		if e.get("a.txt") != patchOrigA || !e.exists("d.txt") || e.exists("new/c.txt") {
			t.Error("a failed patch changed files")
		}
	})
	t.Run("rename", func(t *testing.T) {
		e := patchEnv(t, "")
		p := "diff --git a/d.txt b/moved/d2.txt\nsimilarity index 100%\nrename from d.txt\nrename to moved/d2.txt\n"
		r := value[*core.ApplyPatchResult](t, e.ok("applyPatch", map[string]any{"patch": p}))
		if r.Count != 1 || r.Files[0].Action != "renamed" || r.Files[0].OldPath != "d.txt" || r.Files[0].Path != "moved/d2.txt" {
			t.Errorf("files = %s", asJSON(r.Files))
		}
		if e.exists("d.txt") || e.get("moved/d2.txt") != patchOrigD {
			t.Error("rename not applied")
		}
	})
	t.Run("git patch of files in directories named a and b", func(t *testing.T) {
		e := newTestEnv(t, "")
		e.put("a/x.txt", "old\n")
		e.put("b/y.txt", "old\n")
		p := "diff --git a/a/x.txt b/a/x.txt\n--- a/a/x.txt\n+++ b/a/x.txt\n@@ -1 +1 @@\n-old\n+new\n" +
			"diff --git a/b/y.txt b/b/y.txt\n--- a/b/y.txt\n+++ b/b/y.txt\n@@ -1 +1 @@\n-old\n+new\n"
		r := value[*core.ApplyPatchResult](t, e.ok("applyPatch", map[string]any{"patch": p}))
		if r.Files[0].Path != "a/x.txt" || r.Files[1].Path != "b/y.txt" {
			t.Errorf("files = %s", asJSON(r.Files))
		}
		if e.get("a/x.txt") != "new\n" || e.get("b/y.txt") != "new\n" || e.exists("x.txt") || e.exists("y.txt") {
			t.Error("patch applied to the wrong files")
		}
	})
	t.Run("diff -u with a/ and b/ prefixes", func(t *testing.T) {
		e := patchEnv(t, "")
		p := "--- a/a.txt\t2024-01-01 00:00:00\n+++ b/a.txt\t2024-01-01 00:00:01\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
		r := value[*core.ApplyPatchResult](t, e.ok("applyPatch", map[string]any{"patch": p}))
		if r.Files[0].Path != "a.txt" || e.get("a.txt") != "one\n2\nthree\n" {
			t.Errorf("files = %s, a.txt = %q", asJSON(r.Files), e.get("a.txt"))
		}
	})
	t.Run("diff -u without prefixes", func(t *testing.T) {
		e := patchEnv(t, "")
		p := "--- src/b.txt\n+++ src/b.txt\n@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma\n"
		e.ok("applyPatch", map[string]any{"patch": p})
		if e.get("src/b.txt") != "alpha\nBETA\ngamma\n" {
			t.Errorf("src/b.txt = %q", e.get("src/b.txt"))
		}
	})
	for _, tc := range []struct {
		name, patch string
		want        error
	}{
		{"garbage", "this is not a patch", workspace.ErrInvalid},
		{"empty", "", workspace.ErrInvalid},
		{"traversal in a file name", "--- /dev/null\n+++ b/../escape.txt\n@@ -0,0 +1 @@\n+x\n", workspace.ErrTraversal},
		{"absolute file name", "--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-root\n+evil\n", workspace.ErrTraversal},
		{"policy file", "--- /dev/null\n+++ b/.cws-policy.json\n@@ -0,0 +1 @@\n+{}\n", workspace.ErrPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := patchEnv(t, "")
			e.refused(tc.want, "applyPatch", map[string]any{"patch": tc.patch})
		})
	}
}
