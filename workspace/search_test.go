package workspace_test

import (
	"fmt"
	"testing"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/toolset/core"
)

func TestSearchFiles(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("main.py", "import os\n\ndef hello():\n    return 1\nDEF LOUD\n")
	e.put("src/util.py", "x = 1\n  def helper(): pass\n")
	e.put("notes.txt", "def in a text file\n")
	e.put("unicode.txt", "éé def here\n")
	e.put("blob.bin", "def \x00 binary\n")
	e.put(".gitignore", "ignored.py\nbuild/\n")
	e.put("ignored.py", "def ignored():\n")
	e.put("build/out.py", "def built():\n")
	e.put(".git/config", "def in git dir\n")

	type m struct {
		path      string
		line, col int
		text      string
	}
	for _, tc := range []struct {
		name  string
		query string
		opts  map[string]any
		want  []m
	}{
		{"seed example", "def ", map[string]any{"regex": false, "caseSensitive": false, "globs": []string{"**/*.py"}, "maxResults": 100}, []m{
			{"main.py", 3, 1, "def hello():"}, {"main.py", 5, 1, "DEF LOUD"}, {"src/util.py", 2, 3, "  def helper(): pass"},
		}},
		{"literal, case-insensitive by default", "def ", nil, []m{
			{"main.py", 3, 1, "def hello():"}, {"main.py", 5, 1, "DEF LOUD"}, {"notes.txt", 1, 1, "def in a text file"},
			{"src/util.py", 2, 3, "  def helper(): pass"}, {"unicode.txt", 1, 4, "éé def here"},
		}},
		{"caseSensitive", "DEF", map[string]any{"caseSensitive": true}, []m{{"main.py", 5, 1, "DEF LOUD"}}},
		{"regex", `h[a-z]+lo?\(`, map[string]any{"regex": true}, []m{{"main.py", 3, 5, "def hello():"}}},
		{"literal is not a regex", `hel+o`, nil, []m{}},
		{"regex metachars literal", `():`, nil, []m{{"main.py", 3, 10, "def hello():"}, {"src/util.py", 2, 13, "  def helper(): pass"}}},
		{"regex anchors per line", `^[ \t]+def`, map[string]any{"regex": true}, []m{{"src/util.py", 2, 1, "  def helper(): pass"}}},
		{"bare glob matches file names", "def", map[string]any{"globs": []string{"*.txt"}}, []m{
			{"notes.txt", 1, 1, "def in a text file"}, {"unicode.txt", 1, 4, "éé def here"},
		}},
		{"anchored glob", "def", map[string]any{"globs": []string{"src/**"}}, []m{{"src/util.py", 2, 3, "  def helper(): pass"}}},
		{"non-ASCII query, case-insensitive", "ÉÉ", nil, []m{{"unicode.txt", 1, 1, "éé def here"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			a := map[string]any{"workspaceRoot": ".", "query": tc.query}
			if tc.opts != nil {
				a["options"] = tc.opts
			}
			r := value[*core.SearchFilesResult](t, e.ok("searchFiles", a))
			var got []m
			for _, x := range r.Results {
				got = append(got, m{x.Path, x.Line, x.Column, x.Text})
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
				t.Errorf("results =\n%v\nwant\n%v", got, tc.want)
			}
			if r.Query != tc.query || r.Count != len(r.Results) || r.Truncated {
				t.Errorf("query = %q, count = %d (%d results), truncated = %v", r.Query, r.Count, len(r.Results), r.Truncated)
			}
		})
	}

	t.Run("maxResults cuts and marks truncated", func(t *testing.T) {
		e := e.sub(t)
		r := value[*core.SearchFilesResult](t, e.ok("searchFiles", map[string]any{"query": "def", "options": map[string]any{"maxResults": 2}}))
		if r.Count != 2 || len(r.Results) != 2 || !r.Truncated {
			t.Errorf("count = %d, results = %d, truncated = %v", r.Count, len(r.Results), r.Truncated)
		}
	})
	t.Run("results are never nil", func(t *testing.T) {
		e := e.sub(t)
		r := value[*core.SearchFilesResult](t, e.ok("searchFiles", map[string]any{"query": "zzz-nothing"}))
		if r.Results == nil || asJSON(r) != `{"query":"zzz-nothing","results":[],"count":0}` {
			t.Errorf("result = %s", asJSON(r))
		}
	})
	for _, tc := range []struct {
		name string
		args map[string]any
	}{
		{"invalid regex", map[string]any{"query": "(", "options": map[string]any{"regex": true}}},
		{"empty query", map[string]any{"query": ""}},
		{"invalid glob", map[string]any{"query": "x", "options": map[string]any{"globs": []string{"[a-"}}}},
		{"negative maxResults", map[string]any{"query": "x", "options": map[string]any{"maxResults": -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			e.refused(workspace.ErrInvalid, "searchFiles", tc.args)
		})
	}
}

func TestSearchSkipsDenied(t *testing.T) {
	e := newTestEnv(t, `{"deniedPaths": ["**/.env", "secret/**"]}`)
	e.put(".env", "TOKEN=needle")
	e.put("app/.env", "TOKEN=needle")
	e.put("secret/a.txt", "needle")
	e.put("ok.txt", "needle")
	r := value[*core.SearchFilesResult](t, e.ok("searchFiles", map[string]any{"query": "needle"}))
	if r.Count != 1 || r.Results[0].Path != "ok.txt" {
		t.Errorf("results = %s, want only ok.txt", asJSON(r.Results))
	}
}
