package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cwsdev/cws/internal/testenv"
)

// goMain is the Go fixture: line 11 has non-ASCII text (two-byte é, a four-byte emoji
// that is a surrogate pair in UTF-16) before the symbol Greet.
const goMain = "package main\n" +
	"\n" +
	"import \"fmt\"\n" +
	"\n" +
	"// Greet says hello.\n" +
	"func Greet(name string) string {\n" +
	"\treturn \"hi \" + name\n" +
	"}\n" +
	"\n" +
	"func main() {\n" +
	"\t/* héllo 🎉 */ msg := Greet(\"wörld\")\n" +
	"\tfmt.Println(msg)\n" +
	"\tvar unused int\n" +
	"}\n"

// col is the 1-based code-point column of sub in line n (1-based) of text.
func col(t *testing.T, text string, n int, sub string) int {
	t.Helper()
	line := strings.Split(text, "\n")[n-1]
	i := strings.Index(line, sub)
	if i < 0 {
		t.Fatalf("%q not on line %d", sub, n)
	}
	return utf8.RuneCountInString(line[:i]) + 1
}

type lspRange struct {
	Start struct{ Line, Character int } `json:"start"`
	End   struct{ Line, Character int } `json:"end"`
}

type lspLocation struct {
	URI   string   `json:"uri"`
	Range lspRange `json:"range"`
}

// TestLSPToolsDocker: the lsp toolset on the real workspace image, through the real
// service and the go-sdk MCP client: every one of mcpls's 16 tools on a Go module with
// real gopls at exact positions, hover/definition/diagnostics for Python (pyright) and
// TypeScript (typescript-language-server), a language server crash, and the policy.
func TestLSPToolsDocker(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "lsp", "")
	r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions", tok, nil, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[sessionView](t, r).ID
	endpoint := srv.url + "/v1/sessions/" + id + "/mcp?toolsets=core,lsp"
	c := connect(t, endpoint, tok, "")
	for path, content := range map[string]string{
		"go.mod":        "module example.com/fx\n\ngo 1.22\n",
		"main.go":       goMain,
		"ugly.go":       "package main\nfunc  ugly( ) {\n}\n",
		"app.py":        "def greet(name: str) -> str:\n    return 'hi ' + name\n\n# héllo 🎉\nx: int = greet('w')\n",
		"app.ts":        "export function greet(name: string): string {\n  return 'hi ' + name;\n}\n// héllo 🎉\nconst n: number = greet('w');\n",
		"tsconfig.json": `{"compilerOptions": {"strict": true, "target": "es2020"}}`,
	} {
		c.call(t, "writeFile", map[string]any{"path": path, "contents": content})
	}
	raw := func(t *testing.T, tool string, args map[string]any) string {
		t.Helper()
		res, err := c.callRaw(tool, args, nil)
		if err != nil {
			t.Fatalf("%s %v: %v", tool, args, err)
		}
		if res.IsError {
			t.Fatalf("%s %v: tool error: %s", tool, args, text(res))
		}
		return text(res)
	}
	greetCol := col(t, goMain, 11, "Greet")
	at := map[string]any{"file_path": "/workspace/main.go", "line": 11, "character": greetCol}

	t.Run("go", func(t *testing.T) {
		if h := raw(t, "get_hover", at); !strings.Contains(h, "func Greet(name string) string") {
			t.Errorf("get_hover = %s", h)
		}
		var defs []lspLocation
		json.Unmarshal([]byte(raw(t, "get_definition", at)), &defs)
		if len(defs) != 1 || defs[0].URI != "file:///workspace/main.go" || defs[0].Range.Start.Line != 6 || defs[0].Range.Start.Character != 6 {
			t.Errorf("get_definition = %+v, want main.go 6:6", defs)
		}
		var refs []lspLocation
		json.Unmarshal([]byte(raw(t, "get_references", map[string]any{"file_path": "main.go", "line": 11, "character": greetCol, "include_declaration": true})), &refs)
		if len(refs) != 2 {
			t.Errorf("get_references with the declaration = %+v, want 2", refs)
		}
		for _, l := range refs {
			if l.Range.Start.Line == 11 && l.Range.Start.Character != greetCol {
				t.Errorf("reference on line 11 at character %d, want %d", l.Range.Start.Character, greetCol)
			}
		}
		json.Unmarshal([]byte(raw(t, "get_references", at)), &refs)
		if len(refs) != 1 || refs[0].Range.Start.Line != 11 {
			t.Errorf("get_references = %+v, want the one use on line 11", refs)
		}
		if comp := raw(t, "get_completions", map[string]any{"file_path": "main.go", "line": 12, "character": col(t, goMain, 12, "Println"), "trigger": "."}); !strings.Contains(comp, `"Println"`) {
			t.Errorf("get_completions after fmt. = %.300s", comp)
		}
		if syms := raw(t, "get_document_symbols", map[string]any{"file_path": "main.go"}); !strings.Contains(syms, `"Greet"`) || !strings.Contains(syms, `"main"`) {
			t.Errorf("get_document_symbols = %s", syms)
		}
		if ws := raw(t, "workspace_symbol_search", map[string]any{"query": "Greet", "file_path": "main.go"}); !strings.Contains(ws, `"Greet"`) || !strings.Contains(ws, "main.go") {
			t.Errorf("workspace_symbol_search = %s", ws)
		}
		diags := raw(t, "get_diagnostics", map[string]any{"file_path": "main.go"})
		if !strings.Contains(diags, "declared and not used") || !strings.Contains(diags, `"line":13`) {
			t.Errorf("get_diagnostics = %s", diags)
		}
		if cached := raw(t, "get_cached_diagnostics", map[string]any{"file_path": "main.go"}); !strings.Contains(cached, "declared and not used") {
			t.Errorf("get_cached_diagnostics = %s", cached)
		}
		if f := raw(t, "format_document", map[string]any{"file_path": "ugly.go"}); !strings.Contains(f, "newText") {
			t.Errorf("format_document = %s", f)
		}
		if acts := raw(t, "get_code_actions", map[string]any{"file_path": "main.go", "start_line": 11, "start_character": 2, "end_line": 12, "end_character": 18}); !strings.Contains(strings.ToLower(acts), "extract") {
			t.Errorf("get_code_actions over two statements = %s", acts)
		}
		var items []map[string]any
		json.Unmarshal([]byte(raw(t, "prepare_call_hierarchy", map[string]any{"file_path": "main.go", "line": 6, "character": 6})), &items)
		if len(items) != 1 || items[0]["name"] != "Greet" {
			t.Fatalf("prepare_call_hierarchy = %v", items)
		}
		if in := raw(t, "get_incoming_calls", map[string]any{"item": items[0]}); !strings.Contains(in, `"main"`) {
			t.Errorf("get_incoming_calls = %s", in)
		}
		json.Unmarshal([]byte(raw(t, "prepare_call_hierarchy", map[string]any{"file_path": "main.go", "line": 10, "character": 6})), &items)
		if out := raw(t, "get_outgoing_calls", map[string]any{"item": items[0]}); !strings.Contains(out, `"Greet"`) || !strings.Contains(out, "Println") {
			t.Errorf("get_outgoing_calls of main = %s", out)
		}
		if logs := raw(t, "get_server_logs", map[string]any{"limit": 5}); !strings.HasPrefix(logs, `{"logs":[`) {
			t.Errorf("get_server_logs = %.300s", logs)
		}
		if msgs := raw(t, "get_server_messages", nil); !strings.HasPrefix(msgs, `{"messages":[`) {
			t.Errorf("get_server_messages = %.300s", msgs)
		}
		plan := raw(t, "rename_symbol", map[string]any{"file_path": "main.go", "line": 6, "character": 6, "new_name": "Hello"})
		// The declaration, its doc comment and the call on the non-ASCII line.
		if strings.Count(plan, `"newText":"Hello"`) != 3 || !strings.Contains(plan, fmt.Sprintf(`"start":{"line":11,"character":%d}`, greetCol)) {
			t.Errorf("rename_symbol plan = %s", plan)
		}
		raw(t, "rename_symbol", map[string]any{"file_path": "main.go", "line": 6, "character": 6, "new_name": "Hello", "apply": true})
		got := c.call(t, "readFile", map[string]any{"path": "main.go"})["content"].(string)
		if strings.Count(got, "Hello") != 3 || strings.Contains(got, "Greet(") || !strings.Contains(got, "/* héllo 🎉 */ msg := Hello(") {
			t.Errorf("main.go after rename apply:\n%s", got)
		}
	})

	t.Run("errors", func(t *testing.T) {
		mcp := srv.url + "/v1/sessions/" + id + "/mcp?toolsets=lsp"
		we := rawToolCall(t, mcp, tok, "get_hover", map[string]any{"file_path": "main.go", "line": 99, "character": 1})
		if we == nil || we.Code != -32602 || !strings.Contains(string(we.Data), `"valid"`) {
			t.Errorf("position out of bounds: %+v, want -32602 with the valid range", we)
		}
		if we := rawToolCall(t, mcp, tok, "get_hover", map[string]any{"file_path": ".env", "line": 1, "character": 1}); we == nil || we.Code != -32002 {
			t.Errorf("denied file: %+v, want -32002", we)
		}
		if we := rawToolCall(t, mcp, tok, "get_definition", map[string]any{"file_path": "../etc/passwd", "line": 1, "character": 1}); we == nil || we.Code != -32001 {
			t.Errorf("traversal: %+v, want -32001", we)
		}
	})

	t.Run("server crash", func(t *testing.T) {
		ctr := containerOf(t, id)
		if out, err := boxExec(ctr, "/", "pkill", "-KILL", "-x", "gopls"); err != nil {
			t.Fatalf("pkill gopls: %v %s", err, out)
		}
		if h := raw(t, "get_hover", map[string]any{"file_path": "main.go", "line": 6, "character": 6}); !strings.Contains(h, "func Hello(name string) string") {
			t.Errorf("get_hover after gopls was killed = %s", h)
		}
	})

	for _, lang := range []struct {
		name, file, hover string
		use, def          [2]int
		diag              string
	}{
		{"python", "app.py", "greet", [2]int{5, 10}, [2]int{1, 5}, "str"},
		{"typescript", "app.ts", "greet", [2]int{5, 19}, [2]int{1, 17}, "number"},
	} {
		t.Run(lang.name, func(t *testing.T) {
			at := map[string]any{"file_path": lang.file, "line": lang.use[0], "character": lang.use[1]}
			if h := raw(t, "get_hover", at); !strings.Contains(h, lang.hover) {
				t.Errorf("get_hover = %s", h)
			}
			var defs []lspLocation
			json.Unmarshal([]byte(raw(t, "get_definition", at)), &defs)
			if len(defs) != 1 || !strings.HasSuffix(defs[0].URI, "/workspace/"+lang.file) || defs[0].Range.Start.Line != lang.def[0] || defs[0].Range.Start.Character != lang.def[1] {
				t.Errorf("get_definition = %+v, want %s %d:%d", defs, lang.file, lang.def[0], lang.def[1])
			}
			if d := raw(t, "get_diagnostics", map[string]any{"file_path": lang.file}); !strings.Contains(d, lang.diag) || !strings.Contains(d, `"line":5`) {
				t.Errorf("get_diagnostics = %s", d)
			}
		})
	}
}
