package core

import (
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent/guard"
)

func TestRefusesNone(t *testing.T) {
	for _, tc := range []struct {
		g    guard.Guard
		want bool
	}{
		{guard.Guard{}, true},
		{guard.Guard{Allow: [][]string{{"**"}}}, true},
		{guard.Guard{Allow: [][]string{{"**"}, {"src/**", "**"}}, Protect: []string{".cws-policy.json"}}, true},
		{guard.Guard{Allow: [][]string{{"**"}}, Deny: []string{".env"}}, false},
		{guard.Guard{Allow: [][]string{{"**"}, {"src/**"}}}, false},
		{guard.Guard{Allow: [][]string{{}}}, false},
	} {
		if got := refusesNone(&tc.g); got != tc.want {
			t.Errorf("refusesNone(%+v) = %v, want %v", tc.g, got, tc.want)
		}
	}
}

// TestSplitRaw reads git's `diff --raw -z -p` output as git 2.39 prints it: the names
// of every record (both sides of a rename), then the patch exactly as `git diff` prints
// it; output cut inside the records, or not made of records, is not whole.
func TestSplitRaw(t *testing.T) {
	patch := "diff --git a/f3.txt b/f3.txt\nindex f9efd72..a16fd30 100644\n--- a/f3.txt\n+++ b/f3.txt\n@@ -1 +1,2 @@\n x\n+y\n"
	out := ":100644 100644 f9efd72 0000000 M\x00f3.txt\x00" +
		":100644 100644 b5eac9e b5eac9e R100\x00old name.txt\x00new\nname.txt\x00" +
		":000000 100644 0000000 e69de29 A\x00we\tird é\x00" +
		"\x00" + patch
	for _, tc := range []struct {
		name      string
		out       string
		cut       bool
		names     []string
		patch     string
		wantWhole bool
	}{
		{"records and patch", out, false, []string{"f3.txt", "old name.txt", "new\nname.txt", "we\tird é"}, patch, true},
		{"cut inside the patch", out[:len(out)-5], true, []string{"f3.txt", "old name.txt", "new\nname.txt", "we\tird é"}, patch[:len(patch)-5], true},
		{"cut inside a record", out[:60], true, nil, "", false},
		{"cut between a rename's paths", out[:strings.Index(out, "new\n")], true, nil, "", false},
		{"cut right after the records", out[:strings.Index(out, "diff --git")-1], true, nil, "", false},
		{"nothing", "", false, nil, "", true},
		{"not raw records", patch, false, nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, p, whole := splitRaw(tc.out, tc.cut)
			if whole != tc.wantWhole || (whole && (!slices.Equal(names, tc.names) || p != tc.patch)) {
				t.Errorf("splitRaw = %q, %q, %v; want %q, %q, %v", names, p, whole, tc.names, tc.patch, tc.wantWhole)
			}
		})
	}
}
