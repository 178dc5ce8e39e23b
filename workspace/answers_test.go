package workspace_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cwsdev/cws/workspace/toolset/core"
	"github.com/cwsdev/cws/workspace/toolset/vscode"
)

// TestGrowingAnswersFit: over a tree whose answers would pass what one agent answer may
// hold, every tool that lists or searches answers, cut to fit: truncated, with how much
// it left out (in the result, or in the call's note where the result is an array).
func TestGrowingAnswersFit(t *testing.T) {
	e := newTestEnv(t, "")
	const dirs, perDir = 3, 4000
	for d := range dirs {
		for i := range perDir {
			e.put(fmt.Sprintf("big/d%d/%06d-%s.txt", d, i, strings.Repeat("long-name-", 19)), "")
		}
	}
	e.put("hay/lines.txt", strings.Repeat(strings.Repeat("needle ", 57)+"\n", 5000))

	t.Run("listFiles recursive, default options", func(t *testing.T) {
		r := value[*core.ListFilesResult](t, e.ok("listFiles", map[string]any{"path": "big", "options": map[string]any{"recursive": true}}))
		if !r.Truncated || r.Count == 0 || r.Count > 10000 || r.Count+r.Omitted != dirs*perDir+dirs {
			t.Errorf("truncated %v, %d entries, %d omitted; want a truncated answer and all %d counted", r.Truncated, r.Count, r.Omitted, dirs*perDir+dirs)
		}
	})
	t.Run("findFiles maxResults 100000", func(t *testing.T) {
		r := value[*core.FindFilesResult](t, e.ok("findFiles", map[string]any{"pattern": "*.txt", "path": "big", "maxResults": 100000}))
		if !r.Truncated || r.Count == 0 || r.Count+r.Omitted != dirs*perDir {
			t.Errorf("truncated %v, %d files, %d omitted; want a truncated answer and all %d counted", r.Truncated, r.Count, r.Omitted, dirs*perDir)
		}
	})
	t.Run("searchFiles maxResults 100000", func(t *testing.T) {
		r := value[*core.SearchFilesResult](t, e.ok("searchFiles", map[string]any{"query": "needle", "options": map[string]any{"maxResults": 100000}}))
		if !r.Truncated || r.Count == 0 || r.Count+r.Omitted != 5000 {
			t.Errorf("truncated %v, %d matches, %d omitted; want a truncated answer and all 5000 counted", r.Truncated, r.Count, r.Omitted)
		}
	})
	for _, tc := range []struct{ tool, arg, val string }{
		{"list_files_in_folder", "pathInProject", "big/d0"},
		{"find_files_by_name_substring", "nameSubstring", "LONG-NAME"},
	} {
		t.Run("vscode "+tc.tool, func(t *testing.T) {
			res, err := e.call(tc.tool, map[string]any{tc.arg: tc.val})
			if err != nil || res.IsError {
				t.Fatalf("%s: %v", tc.tool, err)
			}
			var n int
			switch v := res.Value.(type) {
			case *[]vscode.FolderEntry:
				n = len(*v)
			case *[]vscode.NamedFile:
				n = len(*v)
			}
			if n == 0 || !strings.Contains(res.Note, "truncated") || !strings.Contains(res.Note, "more were left out") {
				t.Errorf("%s: %d items, note %q; want some, and a note saying what was left out", tc.tool, n, res.Note)
			}
		})
	}
}
