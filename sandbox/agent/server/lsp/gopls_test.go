package lsp

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// goplsVersion is the gopls the real-server test runs. v0.24.0 needs go >= 1.27; this
// is the newest that builds with the project's go 1.26.
const goplsVersion = "v0.23.0"

// gopls finds or builds gopls: cached under the user cache dir so reruns are fast. It
// skips the test when gopls can't be had, except in CI, where it fails.
func gopls(t *testing.T) string {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		fail("no cache dir: %v", err)
	}
	dir := filepath.Join(cache, "cws-test", "gopls-"+goplsVersion)
	bin := filepath.Join(dir, "gopls")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if testing.Short() {
		t.Skip("-short: not building gopls")
	}
	cmd := exec.Command("go", "install", "golang.org/x/tools/gopls@"+goplsVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		fail("build gopls %s: %v\n%s", goplsVersion, err, out)
	}
	return bin
}

// at is where the nth (0-based) needle in src starts, in API terms, plus offset code
// points; computed independently of Text.
func at(t *testing.T, src, needle string, nth, offset int) Pos {
	t.Helper()
	i := -1
	for range nth + 1 {
		j := strings.Index(src[i+1:], needle)
		if j < 0 {
			t.Fatalf("%q: occurrence %d not found", needle, nth)
		}
		i += 1 + j
	}
	line := strings.Count(src[:i], "\n") + 1
	lineStart := strings.LastIndex(src[:i], "\n") + 1
	return Pos{Line: line, Character: utf8.RuneCountInString(src[lineStart:i]) + 1 + offset}
}

func span(t *testing.T, src, needle string, nth int) Span {
	return Span{Start: at(t, src, needle, nth, 0), End: at(t, src, needle, nth, utf8.RuneCountInString(needle))}
}

// apply applies API edits to src (edits must not overlap).
func apply(t *testing.T, src string, edits []TextEdit) string {
	t.Helper()
	off := func(p Pos) int {
		lines := strings.SplitAfter(src, "\n")
		o := 0
		for _, l := range lines[:p.Line-1] {
			o += len(l)
		}
		l := lines[p.Line-1]
		for range p.Character - 1 {
			_, n := utf8.DecodeRuneInString(l)
			l, o = l[n:], o+n
		}
		return o
	}
	type e struct {
		a, b int
		s    string
	}
	var es []e
	for _, ed := range edits {
		es = append(es, e{off(ed.Range.Start), off(ed.Range.End), ed.NewText})
	}
	for i := range es { // from the end, so earlier offsets stay valid
		for j := i + 1; j < len(es); j++ {
			if es[j].a > es[i].a {
				es[i], es[j] = es[j], es[i]
			}
		}
	}
	for _, x := range es {
		src = src[:x.a] + x.s + src[x.b:]
	}
	return src
}

func TestGopls(t *testing.T) {
	bin := gopls(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go toolchain")
	}
	root := t.TempDir()
	srcs := map[string]string{}
	for _, name := range []string{"go.mod", "main.go", "util.go", "diag.go", "format.go"} {
		b, err := os.ReadFile(filepath.Join("testdata", "gomod", name+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		srcs[name] = string(b)
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir()
	gocache, _ := exec.Command(goBin, "env", "GOCACHE").Output()
	m := New(Config{
		Root: root,
		Path: filepath.Dir(bin) + ":" + filepath.Dir(goBin) + ":/usr/bin:/bin",
		Env:  []string{"HOME=" + home, "GOCACHE=" + strings.TrimSpace(string(gocache)), "GOPATH=" + filepath.Join(home, "go")},
	})
	defer m.Close()
	files := diskFiles{root: root, deny: map[string]bool{}}
	run := func(tool string, args any) (json.RawMessage, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		raw, _ := json.Marshal(args)
		res, dropped, err := m.Run(ctx, tool, raw, files)
		if err != nil {
			t.Fatalf("%s %s: %v", tool, raw, err)
		}
		return res, dropped
	}
	decode := func(raw json.RawMessage, v any) {
		t.Helper()
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	main, util := srcs["main.go"], srcs["util.go"]
	call := at(t, main, "Greet(\"x\")", 0, 0) // after a non-ASCII comment on the same line
	decl := span(t, main, "Greet", 1)         // "func Greet" (occurrence 0 is in the comment)
	mainURI, utilURI := "file:///workspace/main.go", "file:///workspace/util.go"
	utilCall := span(t, util, "Greet", 0)
	callSpan := Span{Start: call, End: Pos{call.Line, call.Character + 5}}
	posArgs := func(file string, p Pos) map[string]any {
		return map[string]any{"file_path": file, "line": p.Line, "character": p.Character}
	}

	t.Run("get_hover", func(t *testing.T) {
		raw, _ := run("get_hover", posArgs("main.go", call))
		var h hover
		decode(raw, &h)
		if !strings.Contains(h.Contents, "func Greet(name string) string") || h.Range == nil || *h.Range != callSpan {
			t.Errorf("hover %s, want Greet's signature at %v", raw, callSpan)
		}
		// gopls (through v0.23 at least) does not negotiate positionEncoding: this runs on
		// UTF-16, surrogate pairs included; the fake server covers UTF-8.
		if st := m.Status(); len(st) != 1 || st[0].Server != "gopls" {
			t.Errorf("status %+v", st)
		}
		t.Logf("gopls position encoding: %s", m.Status()[0].Encoding)
	})
	t.Run("get_definition", func(t *testing.T) {
		raw, _ := run("get_definition", posArgs("main.go", call))
		var locs []Location
		decode(raw, &locs)
		if len(locs) != 1 || locs[0] != (Location{URI: mainURI, Range: decl}) {
			t.Errorf("definition %s, want %s %v", raw, mainURI, decl)
		}
	})
	t.Run("get_definition outside the workspace", func(t *testing.T) {
		raw, _ := run("get_definition", posArgs("main.go", at(t, main, "Println", 0, 0)))
		var locs []Location
		decode(raw, &locs)
		if len(locs) != 1 || !strings.HasPrefix(locs[0].URI, "file:///") || !strings.HasSuffix(locs[0].URI, "/src/fmt/print.go") {
			t.Errorf("definition of fmt.Println %s: want the absolute stdlib path", raw)
		}
	})
	t.Run("get_references", func(t *testing.T) {
		raw, _ := run("get_references", posArgs("main.go", call))
		var locs []Location
		decode(raw, &locs)
		want := map[Location]bool{{URI: mainURI, Range: callSpan}: true, {URI: utilURI, Range: utilCall}: true}
		if len(locs) != 2 || !want[locs[0]] || !want[locs[1]] {
			t.Errorf("references %s, want %v", raw, want)
		}
		a := posArgs("main.go", call)
		a["include_declaration"] = true
		raw, _ = run("get_references", a)
		decode(raw, &locs)
		if len(locs) != 3 {
			t.Errorf("references with declaration %s", raw)
		}
		files.deny["util.go"] = true
		raw, dropped := run("get_references", posArgs("main.go", call))
		delete(files.deny, "util.go")
		decode(raw, &locs)
		if dropped != 1 || len(locs) != 1 || locs[0].URI != mainURI {
			t.Errorf("references with util.go denied: %s dropped %d", raw, dropped)
		}
	})
	t.Run("get_completions", func(t *testing.T) {
		raw, _ := run("get_completions", posArgs("main.go", at(t, main, "Println", 0, 0)))
		var items []completion
		decode(raw, &items)
		found := false
		for _, it := range items {
			found = found || it.Label == "Println" && it.Kind == 3
		}
		if !found {
			t.Errorf("completions after fmt. lack Println (function): %.500s", raw)
		}
	})
	t.Run("get_document_symbols", func(t *testing.T) {
		raw, _ := run("get_document_symbols", map[string]any{"file_path": "main.go"})
		var syms []symbol
		decode(raw, &syms)
		var greet *symbol
		for i := range syms {
			if syms[i].Name == "Greet" {
				greet = &syms[i]
			}
		}
		if greet == nil || greet.Kind != 12 || greet.SelectionRange == nil || *greet.SelectionRange != decl ||
			greet.Range.Start != (Pos{decl.Start.Line, 1}) || greet.Range.End != (Pos{decl.Start.Line + 2, 2}) {
			t.Errorf("symbols %s: want Greet, a function, at %v", raw, decl)
		}
	})
	t.Run("workspace_symbol_search", func(t *testing.T) {
		raw, _ := run("workspace_symbol_search", map[string]any{"query": "Greet", "kind_filter": "function"})
		var syms []workspaceSymbol
		decode(raw, &syms)
		if len(syms) == 0 || syms[0].Name != "Greet" || syms[0].Location != (Location{URI: mainURI, Range: decl}) {
			t.Errorf("workspace symbols %s", raw)
		}
		raw, _ = run("workspace_symbol_search", map[string]any{"query": "Greet", "kind_filter": "struct"})
		if string(raw) != "[]" {
			t.Errorf("kind_filter struct: %s", raw)
		}
	})
	diagSpan := span(t, srcs["diag.go"], `"s"`, 0)
	t.Run("get_diagnostics", func(t *testing.T) {
		raw, _ := run("get_diagnostics", map[string]any{"file_path": "diag.go"})
		var ds []Diagnostic
		decode(raw, &ds)
		if len(ds) != 1 || ds[0].Severity != 1 || ds[0].Range != diagSpan {
			t.Errorf("diagnostics %s, want one error at %v", raw, diagSpan)
		}
	})
	t.Run("get_cached_diagnostics", func(t *testing.T) {
		raw, _ := run("get_cached_diagnostics", map[string]any{"file_path": "diag.go"})
		var c struct {
			FilePath    string             `json:"file_path"`
			Diagnostics []cachedDiagnostic `json:"diagnostics"`
		}
		decode(raw, &c)
		if c.FilePath != "diag.go" || len(c.Diagnostics) != 1 || c.Diagnostics[0].Severity != "error" || c.Diagnostics[0].Range != diagSpan {
			t.Errorf("cached diagnostics %s", raw)
		}
	})
	t.Run("format_document", func(t *testing.T) {
		raw, _ := run("format_document", map[string]any{"file_path": "format.go"})
		var edits []TextEdit
		decode(raw, &edits)
		want := "package main\n\nfunc badly() int {\n\treturn 1\n}\n"
		if got := apply(t, srcs["format.go"], edits); got != want {
			t.Errorf("formatted:\n%s\nwant:\n%s\nedits %s", got, want, raw)
		}
	})
	t.Run("get_code_actions", func(t *testing.T) {
		raw, _ := run("get_code_actions", map[string]any{"file_path": "main.go",
			"start_line": callSpan.Start.Line, "start_character": callSpan.Start.Character,
			"end_line": callSpan.End.Line, "end_character": callSpan.End.Character, "kind_filter": "refactor.inline"})
		var actions []codeAction
		decode(raw, &actions)
		var inline *codeAction
		for i := range actions {
			if strings.Contains(actions[i].Title, "Inline call") {
				inline = &actions[i]
			}
		}
		if inline == nil || inline.Edit == nil || len(inline.Edit.Changes[mainURI]) == 0 {
			t.Errorf("code actions %s: want an inline-call refactoring with its edit", raw)
		}
	})
	t.Run("rename_symbol", func(t *testing.T) {
		a := posArgs("main.go", call)
		a["new_name"] = "Salute"
		raw, _ := run("rename_symbol", a)
		var we WorkspaceEdit
		decode(raw, &we)
		if len(we.Changes) != 2 {
			t.Fatalf("rename %s: want edits in main.go and util.go", raw)
		}
		for name, uri := range map[string]string{"main.go": mainURI, "util.go": utilURI} {
			got := apply(t, srcs[name], we.Changes[uri])
			want := strings.ReplaceAll(srcs[name], "Greet(", "Salute(")
			if name == "main.go" {
				want = strings.Replace(want, "Greet says", "Salute says", 1) // gopls renames the doc comment's mention too
			}
			if got != want {
				t.Errorf("%s renamed:\n%s\nwant:\n%s", name, got, want)
			}
		}
		files.deny["util.go"] = true
		_, dropped := run("rename_symbol", a)
		delete(files.deny, "util.go")
		if dropped != 1 {
			t.Errorf("rename with util.go denied dropped %d edits, want 1", dropped)
		}
	})
	var item json.RawMessage
	t.Run("prepare_call_hierarchy", func(t *testing.T) {
		raw, _ := run("prepare_call_hierarchy", posArgs("main.go", decl.Start))
		var items []json.RawMessage
		decode(raw, &items)
		var it struct {
			Name           string
			URI            string
			SelectionRange Span
		}
		if len(items) == 1 {
			decode(items[0], &it)
			item = items[0]
		}
		if it.Name != "Greet" || it.URI != mainURI || it.SelectionRange != decl {
			t.Fatalf("prepare %s", raw)
		}
	})
	t.Run("get_incoming_calls", func(t *testing.T) {
		raw, _ := run("get_incoming_calls", map[string]any{"item": item})
		var calls []struct {
			From       struct{ Name, URI string }
			FromRanges []Span
		}
		decode(raw, &calls)
		got := map[string]Span{}
		for _, c := range calls {
			if len(c.FromRanges) == 1 {
				got[c.From.Name+" "+c.From.URI] = c.FromRanges[0]
			}
		}
		if got["main "+mainURI] != callSpan || got["helper "+utilURI] != utilCall {
			t.Errorf("incoming %s", raw)
		}
	})
	t.Run("get_outgoing_calls", func(t *testing.T) {
		raw, _ := run("prepare_call_hierarchy", posArgs("main.go", at(t, main, "main()", 0, 0)))
		var items []json.RawMessage
		decode(raw, &items)
		raw, _ = run("get_outgoing_calls", map[string]any{"item": items[0]})
		var calls []struct {
			To         struct{ Name, URI string }
			FromRanges []Span
		}
		decode(raw, &calls)
		got := map[string]Span{}
		for _, c := range calls {
			if len(c.FromRanges) == 1 {
				got[c.To.Name] = c.FromRanges[0]
			}
		}
		if got["Greet"] != callSpan || got["Println"] != span(t, main, "Println", 0) || got["helper"] != span(t, main, "helper", 0) {
			t.Errorf("outgoing %s", raw)
		}
	})
	t.Run("a file created by another tool is seen", func(t *testing.T) {
		write := func(name, src string) {
			if err := os.WriteFile(filepath.Join(root, name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("use.go", "package main\n\nvar _ = Extra()\n")
		raw, _ := run("get_diagnostics", map[string]any{"file_path": "use.go"})
		if !strings.Contains(string(raw), "undefined: Extra") {
			t.Fatalf("before extra.go: %s", raw)
		}
		write("extra.go", "package main\n\nfunc Extra() int { return 1 }\n") // never opened
		raw, _ = run("get_diagnostics", map[string]any{"file_path": "use.go"})
		// gopls sometimes republishes for the open file only later than the settle time.
		for i := 0; string(raw) != "[]" && i < 100; i++ {
			time.Sleep(100 * time.Millisecond)
			raw, _ = run("get_cached_diagnostics", map[string]any{"file_path": "use.go"})
			raw = json.RawMessage(strings.TrimSuffix(strings.TrimPrefix(string(raw), `{"file_path":"use.go","diagnostics":`), "}"))
		}
		if string(raw) != "[]" {
			t.Errorf("after extra.go was written: %s", raw)
		}
	})
	t.Run("get_server_logs", func(t *testing.T) {
		raw, _ := run("get_server_logs", map[string]any{"limit": 5})
		var l struct{ Logs []logEntry }
		decode(raw, &l)
		if !strings.HasPrefix(string(raw), `{"logs":[`) || len(l.Logs) > 5 {
			t.Errorf("logs %s", raw)
		}
	})
	t.Run("get_server_messages", func(t *testing.T) {
		raw, _ := run("get_server_messages", map[string]any{})
		if !strings.HasPrefix(string(raw), `{"messages":[`) {
			t.Errorf("messages %s", raw)
		}
	})
}
