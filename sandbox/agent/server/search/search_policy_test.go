package search

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
)

// policyTree is a workspace holding "needle" in every kind of file a search must and
// must not read.
func policyTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, body string) {
		p := filepath.Join(root, name)
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, []byte(body), 0o644))
	}
	write("ok.txt", "a needle\n")
	write("src/deep/ok.go", "x := \"needle\"\n")
	write(".env", "TOKEN=needle\n")
	write("app/.env", "TOKEN=needle\n")
	write("secret/a.txt", "needle\n")
	write(".gitignore", "ignored/\n*.log\n")
	write("ignored/x.txt", "needle\n")
	write("debug.log", "needle\n")
	write("src/.gitignore", "gen.go\n")
	write("src/gen.go", "needle\n")
	write("bin.dat", "needle\x00\x01\x02")
	// Bigger than one read: the match is at the end, after the binary check.
	write("big.txt", strings.Repeat("filler line\n", 100<<10/12)+"last needle\n")
	// A NUL past the first 8 KiB does not make a file binary.
	write("late-nul.txt", strings.Repeat("x", 9<<10)+"\x00\nneedle\n")
	must(os.Link(filepath.Join(root, ".env"), filepath.Join(root, "notes.txt")))
	must(os.Symlink(".env", filepath.Join(root, "env-link.txt")))
	must(os.Symlink("secret", filepath.Join(root, "secret-link")))
	must(os.Symlink("/etc", filepath.Join(root, "etc-link")))
	must(syscall.Mkfifo(filepath.Join(root, "pipe.txt"), 0o644))
	return root
}

func searchPaths(t *testing.T, s *Handler, a agent.SearchArgs) ([]string, error) {
	t.Helper()
	raw, _ := json.Marshal(a)
	res, err := s.Search(context.Background(), raw, nil, nil)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, m := range res.(agent.SearchResult).Matches {
		paths = append(paths, m.Path)
	}
	return paths, nil
}

// TestSearchPolicy: what a search reads and skips: denied paths (also through a hard
// link or a symlink), .gitignore'd paths, binaries, files over the size limit, FIFOs.
func TestSearchPolicy(t *testing.T) {
	root := policyTree(t)
	ws, err := fs.OpenWorkspace(root)
	s := &Handler{WS: ws}
	if err != nil {
		t.Fatal(err)
	}
	deny := &guard.Guard{Deny: []string{"**/.env", "secret"}}
	for _, tc := range []struct {
		name string
		args agent.SearchArgs
		want []string
	}{
		{"without a policy, hard links are searched", agent.SearchArgs{Hidden: true},
			[]string{".env", "app/.env", "big.txt", "late-nul.txt", "notes.txt", "ok.txt", "secret/a.txt", "src/deep/ok.go"}},
		{"denied paths and hard links are skipped", agent.SearchArgs{Hidden: true, Guard: deny},
			[]string{"big.txt", "late-nul.txt", "ok.txt", "src/deep/ok.go"}},
		{"an allow-set limits the search", agent.SearchArgs{Hidden: true, Guard: &guard.Guard{Allow: [][]string{{"src/**"}}}},
			[]string{"src/deep/ok.go"}},
		{"dot-files only when hidden", agent.SearchArgs{},
			[]string{"big.txt", "late-nul.txt", "notes.txt", "ok.txt", "secret/a.txt", "src/deep/ok.go"}},
		{"size limit", agent.SearchArgs{Guard: deny, MaxFileSize: 50 << 10},
			[]string{"late-nul.txt", "ok.txt", "src/deep/ok.go"}},
		{"noIgnore reads ignored files", agent.SearchArgs{Guard: deny, NoIgnore: true},
			[]string{"big.txt", "debug.log", "ignored/x.txt", "late-nul.txt", "ok.txt", "src/deep/ok.go", "src/gen.go"}},
		{"globs", agent.SearchArgs{Guard: deny, Globs: []string{"*.go", "ok.*"}},
			[]string{"ok.txt", "src/deep/ok.go"}},
		{"a subtree keeps the .gitignore above it", agent.SearchArgs{Path: "src", Guard: deny, NoIgnore: false},
			[]string{"src/deep/ok.go"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.args.Query = "needle"
			got, err := searchPaths(t, s, tc.args)
			if err != nil {
				t.Fatal(err)
			}
			got = slices.Compact(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("files with matches = %q, want %q", got, tc.want)
			}
		})
	}

	for _, tc := range []struct {
		name, path string
	}{
		{"a denied file", ".env"},
		{"a denied directory", "secret"},
		{"a hard link to a denied file", "notes.txt"},
		{"a symlink to a denied file", "env-link.txt"},
		{"a symlink to a denied directory", "secret-link"},
		{"a symlink out of the workspace", "etc-link"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			got, err := searchPaths(t, s, agent.SearchArgs{Query: "needle", Path: tc.path, Hidden: true, Guard: deny})
			if err == nil || len(got) > 0 {
				t.Errorf("search of %s = %q, %v; want it refused", tc.path, got, err)
			}
		})
	}
}

// TestSearchAnswerFits: however many long lines match, the answer fits one frame, cut
// and marked truncated, instead of failing the call.
func TestSearchAnswerFits(t *testing.T) {
	root := t.TempDir()
	line := strings.Repeat("<needle> & ", 45) + "\n" // 495 bytes, escaped to ~1 KiB
	if err := os.WriteFile(filepath.Join(root, "many.html"), []byte(strings.Repeat(line, 5000)), 0o644); err != nil {
		t.Fatal(err)
	}
	ws, err := fs.OpenWorkspace(root)
	s := &Handler{WS: ws}
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(agent.SearchArgs{Query: "needle", MaxResults: 100000})
	res, err := s.Search(context.Background(), raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := res.(agent.SearchResult)
	enc, _ := json.Marshal(r)
	hdr, _ := json.Marshal(agent.Header{Done: true, Result: enc})
	if len(hdr) > agent.MaxHeader {
		t.Errorf("answer is %d bytes, a frame header holds %d", len(hdr), agent.MaxHeader)
	}
	if !r.Truncated || len(r.Matches) == 0 || len(r.Matches) == 5000 {
		t.Errorf("truncated = %v with %d of 5000 matches, want a truncated, non-empty answer", r.Truncated, len(r.Matches))
	}
	if r.Omitted != 5000-len(r.Matches) {
		t.Errorf("omitted = %d with %d of 5000 matches kept, want %d", r.Omitted, len(r.Matches), 5000-len(r.Matches))
	}
}
