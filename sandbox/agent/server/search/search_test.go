package search

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
)

// naive is the obviously-right search the fast paths must agree with: every line of
// every file, one match per line, first match's column.
func naive(t *testing.T, root string, re *regexp.Regexp) []agent.Match {
	var out []agent.Match
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "ignored") {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || strings.HasSuffix(p, ".bin") || d.Name() == ".gitignore" {
			return nil
		}
		f, _ := os.Open(p)
		defer f.Close()
		rel, _ := filepath.Rel(root, p)
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			if loc := re.FindStringIndex(sc.Text()); loc != nil {
				out = append(out, agent.Match{Path: rel, Line: n, Column: len([]rune(sc.Text()[:loc[0]])) + 1, Text: sc.Text()})
			}
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Line < out[j].Line
	})
	return out
}

func TestSearchAgreesWithNaive(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"a.go":            "package a\nfunc Main() {}\nfunc main() { x := fooError() }\n// FUNC MAIN(\nfunc mainly() {}\n",
		"dir/b.go":        "func TooError(x int)\n\tfunc BarError(\nnothing here\nfunc Éclair() // ünïcode func main(\n",
		"dir/sub/c.txt":   "Func Main( here\r\nand func main( there\n",
		"ignored/skip.go": "func main(\n",
		".gitignore":      "ignored/\n",
		"data.bin":        "func main(\x00binary",
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := fs.OpenWorkspace(root)
	s := &Handler{WS: ws}
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  agent.SearchArgs
		naive string
	}{
		{"literal", agent.SearchArgs{Query: "func main(", CaseSensitive: true}, `func main\(`},
		{"literal, ignoring case (anchored on a caseless byte)", agent.SearchArgs{Query: "func main("}, `(?i)func main\(`},
		{"literal, ignoring case, letters only", agent.SearchArgs{Query: "MAINLY"}, `(?i)mainly`},
		{"regex with a required literal", agent.SearchArgs{Query: `func [A-Z][a-z]+Error\(`, Regex: true, CaseSensitive: true}, `func [A-Z][a-z]+Error\(`},
		{"regex without a literal", agent.SearchArgs{Query: `[A-Z]\w+\(`, Regex: true, CaseSensitive: true}, `[A-Z]\w+\(`},
		{"regex ignoring case", agent.SearchArgs{Query: `^func\s+main`, Regex: true}, `(?i)^func\s+main`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.args.Hidden = true
			raw, _ := json.Marshal(tc.args)
			res, err := s.Search(context.Background(), raw, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := res.(agent.SearchResult).Matches
			for i := range got {
				got[i].Text = strings.TrimRight(got[i].Text, "\r")
			}
			want := naive(t, root, regexp.MustCompile(tc.naive))
			for i := range want {
				want[i].Text = strings.TrimRight(want[i].Text, "\r")
			}
			gj, _ := json.MarshalIndent(got, "", " ")
			wj, _ := json.MarshalIndent(want, "", " ")
			if string(gj) != string(wj) {
				t.Fatalf("search disagrees with a line-by-line scan:\ngot  %s\nwant %s", gj, wj)
			}
			if len(want) == 0 {
				t.Fatal("the case matches nothing: it tests nothing")
			}
		})
	}
}
