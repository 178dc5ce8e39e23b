package search

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"testing"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/guard"
	"github.com/cwsdev/cws/sandbox/agent/server/fs"
)

// BenchmarkSearchGoSrc searches the Go toolchain's source tree (a real 150 MB tree).
func BenchmarkSearchGoSrc(b *testing.B) {
	root := runtime.GOROOT() + "/src"
	if _, err := os.Stat(root); err != nil {
		b.Skip("no GOROOT/src")
	}
	ws, err := fs.OpenWorkspace(root)
	s := &Handler{WS: ws}
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args agent.SearchArgs
	}{
		{"literal", agent.SearchArgs{Query: "func main(", CaseSensitive: true, MaxResults: 100000, Hidden: true}},
		{"literal-i", agent.SearchArgs{Query: "func main(", MaxResults: 100000, Hidden: true}},
		{"regex", agent.SearchArgs{Query: `func [A-Z][a-z]+Error\(`, Regex: true, CaseSensitive: true, MaxResults: 100000, Hidden: true}},
		{"literal-guarded", agent.SearchArgs{Query: "func main(", CaseSensitive: true, MaxResults: 100000, Hidden: true,
			Guard: &guard.Guard{Deny: []string{"**/.env", "**/*.pem", "secrets/**", ".ssh", "**/id_rsa*"}, Protect: []string{".cws-policy.json"}}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			raw, _ := json.Marshal(tc.args)
			for b.Loop() {
				res, err := s.Search(context.Background(), raw, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(res.(agent.SearchResult).Matches)), "matches")
			}
		})
	}
}
