package search

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
)

// TestSearchAgreesWithRipgrep: on a tree with .gitignore files, dot-files, binaries,
// links and a FIFO, the agent's search finds the lines ripgrep finds, where ripgrep is
// installed (the workspace image has it). The agent's search stands in for rg, so it
// must not find less, nor more.
func TestSearchAgreesWithRipgrep(t *testing.T) {
	rg, err := exec.LookPath("rg")
	if err != nil {
		t.Skip("rg is not installed")
	}
	root := policyTree(t)
	// rg stops at a NUL anywhere; the agent calls a file binary by its first 8 KiB.
	os.Remove(root + "/late-nul.txt")
	ws, err := fs.OpenWorkspace(root)
	s := &Handler{WS: ws}
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		args  agent.SearchArgs
		flags []string
	}{
		{"literal", agent.SearchArgs{Query: "needle", CaseSensitive: true, Hidden: true}, []string{"--hidden", "-F", "-s"}},
		{"ignoring case", agent.SearchArgs{Query: "NEEDLE", Hidden: true}, []string{"--hidden", "-F", "-i"}},
		{"regex", agent.SearchArgs{Query: `n[e]+dle$`, Regex: true, CaseSensitive: true, Hidden: true}, []string{"--hidden", "-s"}},
		{"without dot-files", agent.SearchArgs{Query: "needle", CaseSensitive: true}, []string{"-F", "-s"}},
		{"noIgnore", agent.SearchArgs{Query: "needle", CaseSensitive: true, NoIgnore: true}, []string{"--no-ignore", "-F", "-s"}},
		// rg lets a -g glob override .gitignore for the files it names (src/gen.go with
		// "*.go"); the agent's globs only narrow what .gitignore leaves.
		{"globs", agent.SearchArgs{Query: "needle", CaseSensitive: true, Globs: []string{"*.txt", "ok.*"}}, []string{"-g", "*.txt", "-g", "ok.*", "-F", "-s"}},
		{"a subtree", agent.SearchArgs{Query: "needle", Path: "src", CaseSensitive: true}, []string{"-F", "-s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, _ := json.Marshal(tc.args)
			res, err := s.Search(context.Background(), raw, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range res.(agent.SearchResult).Matches {
				got = append(got, fmt.Sprintf("%s:%d:%d:%s", m.Path, m.Line, m.Column, m.Text))
			}
			dir := "."
			if tc.args.Path != "" {
				dir = tc.args.Path
			}
			argv := append([]string{"-n", "--column", "--no-heading", "--with-filename", "--no-messages", "--no-require-git", "-g", "!.git"}, tc.flags...)
			cmd := exec.Command(rg, append(argv, "--", tc.args.Query, dir)...)
			cmd.Dir = root
			out, _ := cmd.Output() // exit 1: no match
			var want []string
			for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
				if l != "" {
					want = append(want, strings.TrimPrefix(l, "./"))
				}
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("agent search found\n%s\nrg found\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if len(want) == 0 {
				t.Error("the case matches nothing: it tests nothing")
			}
		})
	}
}
