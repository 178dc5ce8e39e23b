package workspace_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

var isoSecond = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$`)

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func TestReadFile(t *testing.T) {
	e := newTestEnv(t, "")
	binary := []byte{0x89, 'P', 'N', 'G', 0, 1, 2, 0xff, 0xfe}
	e.put("README.md", "# README\nhello\n")
	e.put("docs/utf8.txt", "héllo wörld ✓ 日本\n")
	e.put("img.bin", string(binary))
	e.put("latin1.txt", "caf\xe9\n") // not UTF-8: binary for the seed's purposes
	e.put("empty.txt", "")

	for _, tc := range []struct {
		name, root, path, file string
		want                   []byte
		binary                 bool
	}{
		{"seed example", ".", "README.md", "README.md", []byte("# README\nhello\n"), false},
		{"no workspaceRoot", "", "README.md", "README.md", []byte("# README\nhello\n"), false},
		{"workspaceRoot /workspace", "/workspace", "README.md", "README.md", []byte("# README\nhello\n"), false},
		{"absolute under /workspace", "", "/workspace/docs/utf8.txt", "docs/utf8.txt", []byte("héllo wörld ✓ 日本\n"), false},
		{"utf-8 text", ".", "docs/utf8.txt", "docs/utf8.txt", []byte("héllo wörld ✓ 日本\n"), false},
		{"binary", ".", "img.bin", "img.bin", binary, true},
		{"invalid utf-8", ".", "latin1.txt", "latin1.txt", []byte("caf\xe9\n"), true},
		{"empty", ".", "empty.txt", "empty.txt", []byte{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			a := map[string]any{"path": tc.path}
			if tc.root != "" {
				a["workspaceRoot"] = tc.root
			}
			r := value[*core.ReadFileResult](t, e.ok("readFile", a))
			if r.Path != tc.path {
				t.Errorf("path = %q, want %q", r.Path, tc.path)
			}
			if r.Size != int64(len(tc.want)) {
				t.Errorf("size = %d, want %d", r.Size, len(tc.want))
			}
			if r.Hash != sha(tc.want) {
				t.Errorf("hash = %s, want %s", r.Hash, sha(tc.want))
			}
			if r.IsBinary != tc.binary {
				t.Errorf("isBinary = %v, want %v", r.IsBinary, tc.binary)
			}
			got := []byte(r.Content)
			if tc.binary {
				var err error
				if got, err = base64.StdEncoding.DecodeString(r.Content); err != nil {
					t.Fatalf("binary content is not base64: %v", err)
				}
			}
			if string(got) != string(tc.want) {
				t.Errorf("content = %q, want %q", got, tc.want)
			}
			if !isoSecond.MatchString(r.MTime) {
				t.Fatalf("mtime %q is not ISO 8601 to the second", r.MTime)
			}
			fi, err := os.Stat(e.path(tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if want := fi.ModTime().UTC().Format("2006-01-02T15:04:05Z"); r.MTime != want {
				t.Errorf("mtime = %s, want %s", r.MTime, want)
			}
		})
	}

	t.Run("missing file is an error result", func(t *testing.T) {
		e := e.sub(t)
		if f := e.failure("readFile", map[string]any{"path": "nope.txt"}); f.Code != "not_found" {
			t.Errorf("code = %q, want not_found", f.Code)
		}
	})
	t.Run("directory is an error result", func(t *testing.T) {
		e := e.sub(t)
		if f := e.failure("readFile", map[string]any{"path": "docs"}); f.Code != "is_dir" {
			t.Errorf("code = %q, want is_dir", f.Code)
		}
	})
}

func TestWriteFile(t *testing.T) {
	e := newTestEnv(t, "")
	f := false
	tr := true
	for _, tc := range []struct {
		name     string
		path     string
		contents string
		opts     map[string]any
		file     string
	}{
		{"seed example", "test.txt", "Hello, World!\n", map[string]any{"atomic": true, "createIfMissing": true}, "test.txt"},
		{"defaults create parents", "a/b/c/new.txt", "nested", nil, "a/b/c/new.txt"},
		{"not atomic", "plain.txt", "x", map[string]any{"atomic": f}, "plain.txt"},
		{"createIfMissing false, parent exists", "a/other.txt", "y", map[string]any{"createIfMissing": f}, "a/other.txt"},
		{"utf-8", "ü/ñ.txt", "日本語 ✓", nil, "ü/ñ.txt"},
		{"absolute under /workspace", "/workspace/abs.txt", "abs", map[string]any{"atomic": tr}, "abs.txt"},
		{"empty", "empty.txt", "", nil, "empty.txt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			a := map[string]any{"workspaceRoot": ".", "path": tc.path, "contents": tc.contents}
			if tc.opts != nil {
				a["options"] = tc.opts
			}
			r := value[*core.WriteFileResult](t, e.ok("writeFile", a))
			if r.Path != tc.path || r.Size != int64(len(tc.contents)) {
				t.Errorf("result = %+v, want {%s %d}", r, tc.path, len(tc.contents))
			}
			if got := e.get(tc.file); got != tc.contents {
				t.Errorf("file = %q, want %q", got, tc.contents)
			}
		})
	}

	t.Run("seed response is exactly path and size", func(t *testing.T) {
		e := e.sub(t)
		v := e.ok("writeFile", map[string]any{"path": "test.txt", "contents": "Hello, World!\n"})
		if got := asJSON(v); got != `{"path":"test.txt","size":14}` {
			t.Errorf("result = %s", got)
		}
	})
	t.Run("overwrite replaces content", func(t *testing.T) {
		e := e.sub(t)
		e.put("over.txt", "a long original content")
		e.ok("writeFile", map[string]any{"path": "over.txt", "contents": "short"})
		if got := e.get("over.txt"); got != "short" {
			t.Errorf("file = %q", got)
		}
	})
	t.Run("atomic write leaves no temp file", func(t *testing.T) {
		e := e.sub(t)
		e.ok("writeFile", map[string]any{"path": "clean/f.txt", "contents": "x"})
		ents, _ := os.ReadDir(e.path("clean"))
		if len(ents) != 1 {
			t.Errorf("clean/ holds %d entries, want 1", len(ents))
		}
	})
	t.Run("createIfMissing false with missing parent is an error result", func(t *testing.T) {
		e := e.sub(t)
		fd := e.failure("writeFile", map[string]any{"path": "missing/dir/x.txt", "contents": "x", "options": map[string]any{"createIfMissing": false}})
		if fd.Code != "not_found" {
			t.Errorf("code = %q, want not_found", fd.Code)
		}
		if e.exists("missing") {
			t.Error("the parent directory was created")
		}
	})
	t.Run("writing a directory is an error result", func(t *testing.T) {
		e := e.sub(t)
		e.failed("writeFile", map[string]any{"path": "a", "contents": "x"})
	})
}

func TestListFiles(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("file.py", "print(1)\n")
	e.put("README.md", "readme")
	e.put("src/app.py", "x = 1\n")
	e.put("src/lib/util.py", "y = 2\n")
	e.put("src/lib/data.json", "{}")

	names := func(r *core.ListFilesResult) []string {
		var out []string
		for _, en := range r.Entries {
			out = append(out, en.Path)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want []string
	}{
		{"default is the root, not recursive", map[string]any{}, []string{"README.md", "file.py", "src"}},
		{"explicit path .", map[string]any{"workspaceRoot": ".", "path": "."}, []string{"README.md", "file.py", "src"}},
		{"subdirectory", map[string]any{"path": "src"}, []string{"src/app.py", "src/lib"}},
		{"recursive", map[string]any{"options": map[string]any{"recursive": true}},
			[]string{"README.md", "file.py", "src", "src/app.py", "src/lib", "src/lib/data.json", "src/lib/util.py"}},
		{"seed example: globs, not recursive", map[string]any{"path": ".", "options": map[string]any{"recursive": false, "globs": []string{"**/*.py"}, "maxEntries": 1000}},
			[]string{"file.py"}},
		{"globs recursive", map[string]any{"options": map[string]any{"recursive": true, "globs": []string{"**/*.py"}}},
			[]string{"file.py", "src/app.py", "src/lib/util.py"}},
		{"two globs", map[string]any{"options": map[string]any{"recursive": true, "globs": []string{"**/*.json", "*.md"}}},
			[]string{"README.md", "src/lib/data.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			r := value[*core.ListFilesResult](t, e.ok("listFiles", tc.args))
			if got := names(r); !slices.Equal(got, tc.want) {
				t.Errorf("entries = %v, want %v", got, tc.want)
			}
			if r.Count != len(r.Entries) || r.Truncated {
				t.Errorf("count = %d (%d entries), truncated = %v", r.Count, len(r.Entries), r.Truncated)
			}
		})
	}

	t.Run("entry fields", func(t *testing.T) {
		e := e.sub(t)
		r := value[*core.ListFilesResult](t, e.ok("listFiles", map[string]any{"path": "."}))
		if r.Path != "." {
			t.Errorf("path = %q", r.Path)
		}
		byPath := map[string]core.FileEntry{}
		for _, en := range r.Entries {
			byPath[en.Path] = en
			if !isoSecond.MatchString(en.MTime) {
				t.Errorf("%s: mtime %q is not ISO 8601", en.Path, en.MTime)
			}
		}
		if f := byPath["file.py"]; f.Name != "file.py" || f.Type != "file" || f.Size != 9 {
			t.Errorf("file.py = %+v", f)
		}
		if d := byPath["src"]; d.Name != "src" || d.Type != "directory" {
			t.Errorf("src = %+v", d)
		}
	})
	t.Run("maxEntries cuts and marks truncated", func(t *testing.T) {
		e := e.sub(t)
		r := value[*core.ListFilesResult](t, e.ok("listFiles", map[string]any{"options": map[string]any{"recursive": true, "maxEntries": 2}}))
		if want := []string{"README.md", "file.py"}; r.Count == 2 && (r.Entries[0].Path != want[0] || r.Entries[1].Path != want[1]) {
			t.Errorf("first entries = %v, want %v (sorted order)", r.Entries, want)
		}
		if r.Count != 2 || len(r.Entries) != 2 || !r.Truncated {
			t.Errorf("count = %d, entries = %d, truncated = %v; want 2, 2, true", r.Count, len(r.Entries), r.Truncated)
		}
	})
	t.Run("missing directory is an error result", func(t *testing.T) {
		e := e.sub(t)
		if f := e.failure("listFiles", map[string]any{"path": "nope"}); f.Code != "not_found" {
			t.Errorf("code = %q", f.Code)
		}
	})
	t.Run("a file is not a directory", func(t *testing.T) {
		e := e.sub(t)
		e.failed("listFiles", map[string]any{"path": "file.py"})
	})
	t.Run("invalid glob", func(t *testing.T) {
		e := e.sub(t)
		e.refused(workspace.ErrInvalid, "listFiles", map[string]any{"options": map[string]any{"globs": []string{"[a-"}}})
	})
	t.Run("negative maxEntries", func(t *testing.T) {
		e := e.sub(t)
		e.refused(workspace.ErrInvalid, "listFiles", map[string]any{"options": map[string]any{"maxEntries": -1}})
	})
}

func TestListFilesHidesDenied(t *testing.T) {
	e := newTestEnv(t, `{"deniedPaths": ["**/.env", "secrets/**"]}`)
	e.put(".env", "TOKEN=x")
	e.put("app/.env", "TOKEN=y")
	e.put("secrets/key", "k")
	e.put("app/main.go", "package main")
	r := value[*core.ListFilesResult](t, e.ok("listFiles", map[string]any{"options": map[string]any{"recursive": true}}))
	var got []string
	for _, en := range r.Entries {
		got = append(got, en.Path)
	}
	slices.Sort(got)
	if want := []string{"app", "app/main.go"}; !slices.Equal(got, want) {
		t.Errorf("entries = %v, want %v", got, want)
	}
	e.refused(workspace.ErrPolicy, "listFiles", map[string]any{"path": "secrets"})
}

func TestEditFile(t *testing.T) {
	e := newTestEnv(t, "")
	const orig = "alpha\nbeta\ngamma beta\n"
	for _, tc := range []struct {
		name    string
		args    map[string]any
		want    string // file afterwards
		replace int
		err     error // refusal class; the file must stay orig
	}{
		{"exactly once", map[string]any{"oldText": "alpha", "newText": "ALPHA"}, "ALPHA\nbeta\ngamma beta\n", 1, nil},
		{"multi-line", map[string]any{"oldText": "alpha\nbeta\n", "newText": "x\n"}, "x\ngamma beta\n", 1, nil},
		{"delete text", map[string]any{"oldText": "gamma ", "newText": ""}, "alpha\nbeta\nbeta\n", 1, nil},
		{"two matches refused", map[string]any{"oldText": "beta", "newText": "B"}, orig, 0, workspace.ErrInvalid},
		{"no match refused", map[string]any{"oldText": "delta", "newText": "D"}, orig, 0, workspace.ErrInvalid},
		{"empty oldText refused", map[string]any{"oldText": "", "newText": "D"}, orig, 0, workspace.ErrInvalid},
		{"replaceAll", map[string]any{"oldText": "beta", "newText": "B", "replaceAll": true}, "alpha\nB\ngamma B\n", 2, nil},
		{"replaceAll with one match", map[string]any{"oldText": "gamma", "newText": "G", "replaceAll": true}, "alpha\nbeta\nG beta\n", 1, nil},
		{"replaceAll with no match refused", map[string]any{"oldText": "delta", "newText": "D", "replaceAll": true}, orig, 0, workspace.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			e.put("f.txt", orig)
			tc.args["path"] = "f.txt"
			if tc.err != nil {
				e.refused(tc.err, "editFile", tc.args)
			} else {
				r := value[*core.EditFileResult](t, e.ok("editFile", tc.args))
				if r.Replacements != tc.replace || r.Path != "f.txt" || r.Size != int64(len(tc.want)) {
					t.Errorf("result = %+v, want %d replacements, size %d", r, tc.replace, len(tc.want))
				}
			}
			if got := e.get("f.txt"); got != tc.want {
				t.Errorf("file = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("missing file is an error result", func(t *testing.T) {
		e := e.sub(t)
		e.failure("editFile", map[string]any{"path": "nope.txt", "oldText": "a", "newText": "b"})
	})
}

func TestFindFiles(t *testing.T) {
	e := newTestEnv(t, "")
	for _, f := range []string{"main.go", "cmd/x/main.go", "pkg/a.go", "pkg/a_test.go", "pkg/sub/b.go", "README.md", "gen.go/inner.txt"} {
		e.put(f, "x")
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want []string
	}{
		{"bare pattern matches at any depth", map[string]any{"pattern": "*.go"}, []string{"cmd/x/main.go", "main.go", "pkg/a.go", "pkg/a_test.go", "pkg/sub/b.go"}},
		{"pattern with a slash is anchored", map[string]any{"pattern": "pkg/*.go"}, []string{"pkg/a.go", "pkg/a_test.go"}},
		{"doublestar", map[string]any{"pattern": "pkg/**/*.go"}, []string{"pkg/a.go", "pkg/a_test.go", "pkg/sub/b.go"}},
		{"beneath a path", map[string]any{"pattern": "*.go", "path": "pkg"}, []string{"pkg/a.go", "pkg/a_test.go", "pkg/sub/b.go"}},
		{"beneath a path, relative pattern", map[string]any{"pattern": "sub/*.go", "path": "pkg"}, []string{"pkg/sub/b.go"}},
		{"no match", map[string]any{"pattern": "*.rs"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			r := value[*core.FindFilesResult](t, e.ok("findFiles", tc.args))
			got := slices.Clone(r.Files)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) || r.Count != len(tc.want) {
				t.Errorf("files = %v (count %d), want %v", r.Files, r.Count, tc.want)
			}
		})
	}
	t.Run("maxResults counts files, not matching directories", func(t *testing.T) {
		e := e.sub(t)
		r := value[*core.FindFilesResult](t, e.ok("findFiles", map[string]any{"pattern": "*.go", "maxResults": 2}))
		if r.Count != 2 || !r.Truncated {
			t.Errorf("count = %d, truncated = %v", r.Count, r.Truncated)
		}
	})
	t.Run("invalid pattern", func(t *testing.T) {
		e := e.sub(t)
		e.refused(workspace.ErrInvalid, "findFiles", map[string]any{"pattern": "[a-"})
	})
}

func TestDeleteFile(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("f.txt", "x")
	e.put("dir/a.txt", "a")
	e.put("dir/sub/b.txt", "b")

	r := value[*core.DeleteFileResult](t, e.ok("deleteFile", map[string]any{"path": "f.txt"}))
	if !r.Deleted || r.Path != "f.txt" || e.exists("f.txt") {
		t.Errorf("delete file: %+v, exists = %v", r, e.exists("f.txt"))
	}
	// The code should be not_empty; the agent reports "exists" (see the report: its
	// wireError tests fs.ErrExist, which ENOTEMPTY also matches, before ENOTEMPTY).
	e.failure("deleteFile", map[string]any{"path": "dir"})
	if !e.exists("dir/sub/b.txt") {
		t.Fatal("non-recursive delete removed files")
	}
	e.ok("deleteFile", map[string]any{"path": "dir", "recursive": true})
	if e.exists("dir") {
		t.Error("recursive delete left dir")
	}
	if f := e.failure("deleteFile", map[string]any{"path": "f.txt"}); f.Code != "not_found" {
		t.Errorf("missing: code = %q", f.Code)
	}
	for _, root := range []string{".", "/workspace", "./", "x/.."} {
		e.refused(workspace.ErrInvalid, "deleteFile", map[string]any{"path": root, "recursive": true})
	}
	if _, err := os.Stat(e.dir); err != nil {
		t.Fatal("the workspace root is gone")
	}
}

func TestDeleteSymlinkRemovesLinkOnly(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("target.txt", "keep")
	e.symlink("target.txt", "link.txt")
	e.ok("deleteFile", map[string]any{"path": "link.txt"})
	if e.exists("link.txt") || e.get("target.txt") != "keep" {
		t.Error("deleting a symlink must remove the link, not its target")
	}
}

func TestMoveFile(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("a.txt", "A")
	e.put("b.txt", "B")

	r := value[*core.MoveFileResult](t, e.ok("moveFile", map[string]any{"source": "a.txt", "destination": "new/dir/a2.txt"}))
	if r.Source != "a.txt" || r.Destination != "new/dir/a2.txt" {
		t.Errorf("result = %+v", r)
	}
	if e.exists("a.txt") || e.get("new/dir/a2.txt") != "A" {
		t.Error("file was not moved")
	}
	if f := e.failure("moveFile", map[string]any{"source": "new/dir/a2.txt", "destination": "b.txt"}); f.Code != "exists" {
		t.Errorf("existing destination: code = %q", f.Code)
	}
	if e.get("b.txt") != "B" {
		t.Fatal("destination was overwritten without overwrite")
	}
	e.ok("moveFile", map[string]any{"source": "new/dir/a2.txt", "destination": "b.txt", "overwrite": true})
	if e.get("b.txt") != "A" || e.exists("new/dir/a2.txt") {
		t.Error("overwrite did not replace the destination")
	}
	if f := e.failure("moveFile", map[string]any{"source": "missing.txt", "destination": "x.txt"}); f.Code != "not_found" {
		t.Errorf("missing source: code = %q", f.Code)
	}
	e.ok("moveFile", map[string]any{"source": "new", "destination": "renamed"})
	if !e.exists("renamed/dir") {
		t.Error("directory was not moved")
	}
}

// TestNoWorkspacePolicyFile: a workspace without .cws-policy.json is the common case;
// calls must work there under the tenant's policy alone.
func TestNoWorkspacePolicyFile(t *testing.T) {
	e := newTestEnv(t, `{"deniedPaths": [".env"]}`)
	e.put("a.txt", "A")
	e.put(".env", "SECRET")
	if r := value[*core.ReadFileResult](t, e.ok("readFile", map[string]any{"path": "a.txt"})); r.Content != "A" {
		t.Errorf("content = %q", r.Content)
	}
	e.refused(workspace.ErrPolicy, "readFile", map[string]any{"path": ".env"})
}

func TestWriteThenReadRoundTrip(t *testing.T) {
	e := newTestEnv(t, "")
	content := strings.Repeat("line ✓\n", 1000)
	e.ok("writeFile", map[string]any{"path": "r/t.txt", "contents": content})
	r := value[*core.ReadFileResult](t, e.ok("readFile", map[string]any{"path": "r/t.txt"}))
	if r.Content != content || r.Hash != sha([]byte(content)) || r.IsBinary {
		t.Error("read back differs from what was written")
	}
	if _, err := time.Parse(time.RFC3339, r.MTime); err != nil {
		t.Errorf("mtime %s: %v", r.MTime, err)
	}
}
