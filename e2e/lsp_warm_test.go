package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
)

// TestLSPWarmAndProjectsDocker: language servers ready before they are asked, and a
// TypeScript/JavaScript project without a tsconfig.json seen whole, on the real image
// through the real service.
//
//   - A fresh session runs no language server. A Go module uploaded as an archive gets
//     gopls started in the background; 5 s later it is running before any LSP call, and
//     the first get_hover answers (its time is printed: the bench holds the ≤ 1 s goal).
//   - TypeScript and JavaScript files written (with a package.json) get their server
//     started too. Without any tsconfig.json or jsconfig.json, get_references from the
//     declaring file finds the uses in the other files, and rename_symbol plans edits in
//     all of them.
func TestLSPWarmAndProjectsDocker(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "lspwarm", "")
	r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions", tok, nil, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[sessionView](t, r).ID
	ctr := containerOf(t, id)
	servers := func() string {
		out, _ := boxExec(ctr, "/", "sh", "-c", "pgrep -l -x 'gopls|node' || true")
		return strings.TrimSpace(string(out))
	}
	if s := servers(); s != "" {
		t.Fatalf("language servers in a fresh session: %s", s)
	}
	c := connect(t, srv.url+"/v1/sessions/"+id+"/mcp?toolsets=core,lsp", tok, "")
	lsp := func(t *testing.T, tool string, args map[string]any) string {
		t.Helper()
		res, err := c.callRaw(tool, args, nil)
		if err != nil {
			logs, _ := c.callRaw("get_server_logs", map[string]any{"limit": 60, "min_level": "debug"}, nil)
			out := sandboxLogs(ctr)
			t.Fatalf("%s %v: %v\nserver logs: %s\nagent: %s", tool, args, err, text(logs), out)
		}
		if res.IsError {
			t.Fatalf("%s %v: tool error: %s", tool, args, text(res))
		}
		return text(res)
	}

	t.Run("go module upload", func(t *testing.T) {
		ents := []tartest.Entry{tartest.File("go.mod", "module example.com/up\n\ngo 1.22\n")}
		for p := range 4 {
			for f := range 5 {
				var b strings.Builder
				fmt.Fprintf(&b, "package p%d\n\nimport \"strings\"\n", p)
				if p > 0 {
					fmt.Fprintf(&b, "\nimport prev \"example.com/up/p%d\"\n", p-1)
				}
				for fn := range 10 {
					fmt.Fprintf(&b, "\n// F%d_%d upper-cases s.\nfunc F%d_%d(s string) string {\n", f, fn, f, fn)
					if p > 0 && fn == 0 {
						fmt.Fprintf(&b, "\treturn prev.F%d_9(s)\n}\n", f)
					} else {
						b.WriteString("\treturn strings.ToUpper(s)\n}\n")
					}
				}
				ents = append(ents, tartest.File(fmt.Sprintf("p%d/f%d.go", p, f), b.String()))
			}
		}
		up := do(t, nil, srv.url, http.MethodPut, "/v1/sessions/"+id+"/archive", tok, tartest.Build(ents...), map[string]string{"Content-Type": "application/x-tar"})
		if up.status != http.StatusOK {
			t.Fatalf("upload: %d %s", up.status, up.body)
		}
		time.Sleep(5 * time.Second)
		if s := servers(); !strings.Contains(s, "gopls") {
			t.Fatalf("5 s after the upload, before any LSP call, gopls is not running: %q", s)
		}
		// p2/f0.go: package, blank, import strings, blank, import prev, blank, comment,
		// func F0_0, then line 9: "\treturn prev.F0_9(s)".
		start := time.Now()
		h := lsp(t, "get_hover", map[string]any{"file_path": "p2/f0.go", "line": 9, "character": len("\treturn prev.") + 1})
		took := time.Since(start)
		if !strings.Contains(h, "F0_9(s string) string") {
			t.Errorf("get_hover = %s", h)
		}
		t.Logf("first get_hover 5 s after the upload of a Go module (4 packages × 5 files): %s", took.Round(time.Millisecond))
	})

	t.Run("typescript and javascript without tsconfig", func(t *testing.T) {
		files := map[string]string{
			"web/package.json":     `{"name": "web", "private": true}`,
			"web/src/lib.ts":       "export function greet(name: string): string {\n  return 'hi ' + name;\n}\n",
			"web/src/app.ts":       "import { greet } from './lib';\n\nconsole.log(greet('app'));\n",
			"web/src/pages/two.ts": "import { greet } from '../lib';\n\nexport const two = greet('two');\n",
			"web/js/util.js":       "export function shout(s) {\n  return s.toUpperCase();\n}\n",
			"web/js/main.js":       "import { shout } from './util.js';\n\nshout('main');\n",
		}
		for p, content := range files {
			c.call(t, "writeFile", map[string]any{"path": p, "contents": content})
		}
		// The writes showed a project (package.json): its server starts before any call.
		for i := 0; ; i++ {
			out, _ := boxExec(ctr, "/", "pgrep", "-f", "typescript-language-server")
			if len(out) > 0 {
				break
			}
			if i == 100 {
				t.Fatal("typescript-language-server not started 10 s after the project's files were written")
			}
			time.Sleep(100 * time.Millisecond)
		}
		refs := func(t *testing.T, file string, line, char int) []string {
			t.Helper()
			var locs []lspLocation
			json.Unmarshal([]byte(lsp(t, "get_references", map[string]any{"file_path": file, "line": line, "character": char, "include_declaration": true})), &locs)
			var out []string
			for _, l := range locs {
				out = append(out, fmt.Sprintf("%s:%d", strings.TrimPrefix(l.URI, "file:///workspace/"), l.Range.Start.Line))
			}
			slices.Sort(out)
			return slices.Compact(out)
		}
		// greet, declared on line 1 of lib.ts at character 17.
		want := []string{"web/src/app.ts:1", "web/src/app.ts:3", "web/src/lib.ts:1", "web/src/pages/two.ts:1", "web/src/pages/two.ts:3"}
		if got := refs(t, "web/src/lib.ts", 1, 17); !slices.Equal(got, want) {
			t.Errorf("get_references of greet from its declaration = %v, want %v", got, want)
		}
		if got := refs(t, "web/js/util.js", 1, 17); !slices.Equal(got, []string{"web/js/main.js:1", "web/js/main.js:3", "web/js/util.js:1"}) {
			t.Errorf("get_references of shout (JavaScript) = %v", got)
		}
		var plan struct {
			Changes map[string][]json.RawMessage `json:"changes"`
		}
		json.Unmarshal([]byte(lsp(t, "rename_symbol", map[string]any{"file_path": "web/src/lib.ts", "line": 1, "character": 17, "new_name": "welcome"})), &plan)
		var touched []string
		for uri := range plan.Changes {
			touched = append(touched, strings.TrimPrefix(uri, "file:///workspace/"))
		}
		slices.Sort(touched)
		if !slices.Equal(touched, []string{"web/src/app.ts", "web/src/lib.ts", "web/src/pages/two.ts"}) {
			t.Errorf("rename_symbol plans edits in %v, want lib.ts, app.ts and pages/two.ts", touched)
		}
		// A file added later is seen by the next references search.
		c.call(t, "writeFile", map[string]any{"path": "web/src/late.ts", "contents": "import { greet } from './lib';\ngreet('late');\n"})
		if got := refs(t, "web/src/lib.ts", 1, 17); !slices.Contains(got, "web/src/late.ts:2") {
			t.Errorf("get_references after late.ts was written = %v, want its use", got)
		}
	})
}
