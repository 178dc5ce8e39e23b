package workspace_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/toolset"
	"github.com/google/jsonschema-go/jsonschema"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// goldenTool is what a client sees of a tool.
type goldenTool struct {
	Name         string                `json:"name"`
	Title        string                `json:"title"`
	Description  string                `json:"description"`
	Toolset      string                `json:"toolset"`
	Streams      bool                  `json:"streams,omitempty"`
	Annotations  workspace.Annotations `json:"annotations"`
	InputSchema  *jsonschema.Schema    `json:"inputSchema"`
	OutputSchema *jsonschema.Schema    `json:"outputSchema"`
}

func catalogJSON(t *testing.T) []byte {
	t.Helper()
	var tools []goldenTool
	for _, tl := range workspace.NewCatalog(toolset.All()...).Tools() {
		tools = append(tools, goldenTool{tl.Name, tl.Title, tl.Description, tl.Toolset, tl.Streams, tl.Annotations, tl.InputSchema, tl.OutputSchema})
	}
	b, err := json.MarshalIndent(tools, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestCatalogGolden pins every tool's name, description, annotations and schemas: a
// change to what clients see must show up in review. Regenerate with
// go test ./workspace -run TestCatalogGolden -update
func TestCatalogGolden(t *testing.T) {
	got := catalogJSON(t)
	if again := catalogJSON(t); !bytes.Equal(got, again) {
		t.Fatal("the catalogue does not marshal deterministically")
	}
	path := filepath.Join("testdata", "catalog.golden.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("catalogue differs from %s at line %d:\n got: %s\nwant: %s\n(run with -update if the change is intended)", path, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("catalogue differs from %s in length (%d vs %d lines; run with -update if intended)", path, len(gl), len(wl))
	}
}

func propNames(s *jsonschema.Schema) []string {
	var out []string
	for k := range s.Properties {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestSeedTools holds the seed's five tools (seeds/coding-environment-tools.md) to its
// parameter names, required fields, defaults and response fields exactly.
func TestSeedTools(t *testing.T) {
	cat := workspace.NewCatalog(toolset.All()...)
	for _, tc := range []struct {
		tool     string
		params   []string
		options  []string // nil: no options object
		required []string
		defaults map[string]any // dotted path → default
		result   []string       // response fields that must be present
	}{
		{"readFile", []string{"path", "workspaceRoot"}, nil, []string{"path"}, nil,
			[]string{"path", "size", "mtime", "hash", "isBinary", "content"}},
		{"writeFile", []string{"path", "contents", "workspaceRoot", "options"}, []string{"atomic", "createIfMissing"}, []string{"path", "contents"},
			map[string]any{"options.atomic": true, "options.createIfMissing": true},
			[]string{"path", "size"}},
		{"listFiles", []string{"path", "workspaceRoot", "options"}, []string{"recursive", "globs", "maxEntries"}, nil,
			map[string]any{"path": ".", "options.recursive": false, "options.maxEntries": 10000.0},
			[]string{"path", "entries", "count"}},
		{"searchFiles", []string{"query", "workspaceRoot", "options"}, []string{"regex", "caseSensitive", "globs", "maxResults"}, []string{"query"},
			map[string]any{"options.regex": false, "options.caseSensitive": false, "options.maxResults": 1000.0},
			[]string{"query", "results", "count"}},
		{"runCommand", []string{"command", "args", "workspaceRoot", "options"}, []string{"cwd", "env", "timeout", "confirmed"}, []string{"command"},
			map[string]any{"options.timeout": 300.0},
			[]string{"command", "args", "exitCode", "stdout", "stderr"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			tl, ok := cat.Lookup(tc.tool)
			if !ok {
				t.Fatalf("no tool %s", tc.tool)
			}
			if tl.Toolset != "core" {
				t.Errorf("toolset = %q", tl.Toolset)
			}
			in := tl.InputSchema
			if got := propNames(in); !slices.Equal(got, sorted(tc.params...)) {
				t.Errorf("parameters = %v, want %v", got, sorted(tc.params...))
			}
			if got := sorted(in.Required...); !slices.Equal(got, sorted(tc.required...)) {
				t.Errorf("required = %v, want %v", got, sorted(tc.required...))
			}
			if tc.options != nil {
				if got := propNames(in.Properties["options"]); !slices.Equal(got, sorted(tc.options...)) {
					t.Errorf("options = %v, want %v", got, sorted(tc.options...))
				}
			}
			for path, want := range tc.defaults {
				s := in
				for p := range strings.SplitSeq(path, ".") {
					s = s.Properties[p]
				}
				var got any
				if s == nil || json.Unmarshal(s.Default, &got) != nil || got != want {
					t.Errorf("default of %s = %s, want %v", path, s.Default, want)
				}
			}
			for _, f := range tc.result {
				if tl.OutputSchema.Properties[f] == nil {
					t.Errorf("output schema lacks %s", f)
				}
			}
		})
	}
	t.Run("entry and result fields", func(t *testing.T) {
		ls, _ := cat.Lookup("listFiles")
		if got := propNames(ls.OutputSchema.Properties["entries"].Items); !slices.Equal(got, sorted("name", "path", "type", "size", "mtime")) {
			t.Errorf("listFiles entry fields = %v", got)
		}
		sr, _ := cat.Lookup("searchFiles")
		if got := propNames(sr.OutputSchema.Properties["results"].Items); !slices.Equal(got, sorted("path", "line", "column", "text")) {
			t.Errorf("searchFiles result fields = %v", got)
		}
	})
}

// TestCatalogToolsRunAndSchemasAgree: every tool's input schema names only fields
// its decoder accepts, and its required list matches what the call insists on.
func TestArguments(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("f.txt", "x")
	for _, tc := range []struct {
		name, tool string
		args       string
		want       error
		field      string // the error must name it
	}{
		{"unknown argument", "readFile", `{"path": "f.txt", "bogus": 1}`, workspace.ErrInvalid, "bogus"},
		{"unknown option", "writeFile", `{"path": "f.txt", "contents": "", "options": {"atomik": true}}`, workspace.ErrInvalid, "atomik"},
		{"misspelled case", "readFile", `{"Path": "f.txt"}`, workspace.ErrInvalid, "path"},
		{"missing required", "readFile", `{}`, workspace.ErrInvalid, "path"},
		{"missing one of two", "writeFile", `{"path": "f.txt"}`, workspace.ErrInvalid, "contents"},
		{"null required", "searchFiles", `{"query": null}`, workspace.ErrInvalid, "query"},
		{"wrong type", "readFile", `{"path": 7}`, workspace.ErrInvalid, "path"},
		{"not an object", "readFile", `["f.txt"]`, workspace.ErrInvalid, "arguments"},
		{"empty path", "readFile", `{"path": ""}`, workspace.ErrInvalid, "path"},
		{"workspaceRoot /tmp", "readFile", `{"path": "f.txt", "workspaceRoot": "/tmp"}`, workspace.ErrInvalid, "workspaceRoot"},
		{"workspaceRoot ..", "listFiles", `{"workspaceRoot": ".."}`, workspace.ErrInvalid, "workspaceRoot"},
		{"workspaceRoot /workspace/sub", "searchFiles", `{"query": "x", "workspaceRoot": "/workspace/sub"}`, workspace.ErrInvalid, "workspaceRoot"},
		{"workspaceRoot on runCommand", "runCommand", `{"command": "true", "workspaceRoot": "/"}`, workspace.ErrInvalid, "workspaceRoot"},
		{"unknown tool", "rm_rf", `{}`, workspace.ErrInvalid, "rm_rf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			err := e.refused(tc.want, tc.tool, tc.args)
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
	for _, root := range []string{".", "/workspace", "", "./", "/workspace/"} {
		t.Run("workspaceRoot "+root, func(t *testing.T) {
			e := e.sub(t)
			e.ok("readFile", map[string]any{"path": "f.txt", "workspaceRoot": root})
		})
	}
	t.Run("null and empty arguments are {}", func(t *testing.T) {
		e := e.sub(t)
		e.ok("listFiles", "null")
		e.ok("listFiles", nil)
	})
}
