package agent_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
)

// The exact tar.in (a restore) refuses what tar.in refuses, all or nothing, even with
// its files written in parallel: whatever entry is refused, and however many files were
// queued before it, the workspace is as it was and no staging directory is left.
func TestTarInExactRefusals(t *testing.T) {
	cases := []tartest.Case{
		{Name: "files queued, then a file through a symlink of the archive", Code: agent.CodeTraversal, Path: "l/x",
			Body: func() io.Reader {
				return bytes.NewReader(tartest.Build(append(many(300), tartest.Symlink("l", "/etc"), tartest.File("l/x", "x"))...))
			}},
		{Name: "files queued, then a large file cut short", Code: agent.CodeInvalid, Path: "big",
			Body: func() io.Reader {
				b := tartest.Build(append(many(300), tartest.File("big", strings.Repeat("b", 3<<20)))...)
				return bytes.NewReader(b[:len(b)-1<<20])
			}},
		{Name: "files queued, then a small file cut short", Code: agent.CodeInvalid, Path: "small",
			Body: func() io.Reader {
				b := tartest.Build(append(many(300), tartest.File("small", strings.Repeat("s", 10<<10)))...)
				return bytes.NewReader(b[:len(b)-8<<10])
			}},
		{Name: "a hard link to a file later in the archive", Code: agent.CodeInvalid, Path: "early",
			Body: func() io.Reader {
				return bytes.NewReader(tartest.Build(append(many(10), tartest.Hardlink("early", "late"), tartest.File("late", "x"))...))
			}},
	}
	for _, tc := range tartest.Refusals() {
		switch tc.Name {
		case "symlink out of the workspace", "hard link copies count against the size limit":
			continue // accepted: a symlink is data, a hard link no copy
		case "symlink to /etc then a file through it":
			tc.Path = "link/cws-escape" // the link is data; the entry through it is refused
		case "symlink to a denied dir then a file through it":
			tc.Code, tc.Path = agent.CodeTraversal, "link/x"
		}
		cases = append(cases, tc)
	}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			c, dir, _ := pipeAgent(t)
			ctx := ctxT(t)
			if _, err := c.TarIn(ctx, agent.TarInArgs{}, bytes.NewReader(tartest.Fixture())); err != nil {
				t.Fatalf("fixture: %v", err)
			}
			before := workspaceHash(t, c)
			_, err := c.TarIn(ctx, agent.TarInArgs{Path: ".", MaxBytes: tc.MaxBytes, Guard: tartest.Guard(), Exact: true}, tc.Body())
			var we *agent.WireError
			if !errors.As(err, &we) {
				t.Fatalf("got %v, want a %s refusal", err, tc.Code)
			}
			if we.Code != tc.Code || (tc.Path != "" && we.Path != tc.Path) {
				t.Errorf("got %s %q (%v), want %s %q", we.Code, we.Path, we, tc.Code, tc.Path)
			}
			if after := workspaceHash(t, c); after != before {
				t.Errorf("workspace changed by a refused upload")
			}
			if _, err := os.Lstat(filepath.Join(dir, "new.txt")); err == nil {
				t.Errorf("new.txt, the archive's first entry, was written")
			}
			noStaging(t, dir)
		})
	}
}

// many is n small files in n/20 directories (new/), all allowed.
func many(n int) []tartest.Entry {
	ents := []tartest.Entry{tartest.File("new.txt", "new\n")}
	for i := range n {
		ents = append(ents, tartest.File(fmt.Sprintf("new/d%02d/f%03d", i%(n/20+1), i), strings.Repeat("x", i)))
	}
	return ents
}
