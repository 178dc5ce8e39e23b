package workspace_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/workspace"
)

// The vscode toolset through the Service, on sandboxtest.Local: every tool but the code
// analysis ones (they need a language server: see e2e/vscode_test.go).

// jsonOf round-trips a result into a generic value for checks.
func jsonOf(t *testing.T, v any) any {
	t.Helper()
	var out any
	if err := json.Unmarshal([]byte(asJSON(v)), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// str is a tool's string result.
func str(t *testing.T, v any) string {
	t.Helper()
	return *value[*string](t, v)
}

func TestVSCodeEditor(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("src/a.js", "line one\nline two\nline three\n")

	if s := str(t, e.ok("get_open_in_editor_file_text", nil)); s != "" {
		t.Errorf("text with no active file = %q", s)
	}
	if s := str(t, e.ok("get_open_in_editor_file_path", map[string]any{})); s != "" {
		t.Errorf("path with no active file = %q", s)
	}
	for _, tool := range []string{"replace_selected_text", "replace_current_file_text"} {
		if f := e.failure(tool, map[string]any{"text": "x"}); f.Message != "no active editor" {
			t.Errorf("%s with no active file: %+v", tool, f)
		}
	}
	if f := e.failure("open_file_in_editor", map[string]any{"pathInProject": "nope.js"}); f.Code != "not_found" {
		t.Errorf("open missing file: %+v", f)
	}
	e.refused(workspace.ErrTraversal, "open_file_in_editor", map[string]any{"pathInProject": "../etc/passwd"})

	if s := str(t, e.ok("open_file_in_editor", map[string]any{"pathInProject": "src/a.js"})); s != "file is opened" {
		t.Errorf("open = %q", s)
	}
	if s := str(t, e.ok("get_open_in_editor_file_path", nil)); s != "/workspace/src/a.js" {
		t.Errorf("path = %q", s)
	}
	if s := str(t, e.ok("get_open_in_editor_file_text", nil)); s != "line one\nline two\nline three\n" {
		t.Errorf("text = %q", s)
	}
	// An empty selection inserts at the cursor (1:1), and the cursor moves past it.
	e.ok("replace_selected_text", map[string]any{"text": ">> "})
	e.ok("replace_selected_text", map[string]any{"text": "!"})
	if got := e.get("src/a.js"); got != ">> !line one\nline two\nline three\n" {
		t.Errorf("after inserts: %q", got)
	}
	// A selection (line 2, "two") is replaced.
	e.ok("open_file_in_editor", map[string]any{"pathInProject": "/workspace/src/a.js", "line": 2, "character": 6, "endLine": 2, "endCharacter": 9})
	if s := str(t, e.ok("replace_selected_text", map[string]any{"text": "2\nand more"})); s != "ok" {
		t.Errorf("replace = %q", s)
	}
	e.ok("replace_selected_text", map[string]any{"text": "!"})
	if got := e.get("src/a.js"); got != ">> !line one\nline 2\nand more!\nline three\n" {
		t.Errorf("after replace: %q", got)
	}
	e.refused(workspace.ErrInvalid, "open_file_in_editor", map[string]any{"pathInProject": "src/a.js", "line": 0})

	e.ok("replace_current_file_text", map[string]any{"text": "new"})
	if got := e.get("src/a.js"); got != "new" {
		t.Errorf("after replace_current_file_text: %q", got)
	}
	// The editor state is the session's: a second open file becomes active, the first
	// stays open.
	e.put("b.txt", "b")
	e.ok("open_file_in_editor", map[string]any{"pathInProject": "b.txt"})
	if s := str(t, e.ok("get_open_in_editor_file_text", nil)); s != "b" {
		t.Errorf("second file text = %q", s)
	}
	e.ok("execute_action_by_id", map[string]any{"actionId": "workbench.action.closeActiveEditor"})
	if s := str(t, e.ok("get_open_in_editor_file_path", nil)); s != "/workspace/src/a.js" {
		t.Errorf("after closing, active = %q", s)
	}
}

func TestVSCodeEditorPolicy(t *testing.T) {
	e := newTestEnv(t, `{"deniedPaths": ["secret/**"], "maxEditSize": 10}`)
	e.put("secret/k.txt", "k")
	e.put("a.txt", "abc")
	e.refused(workspace.ErrPolicy, "open_file_in_editor", map[string]any{"pathInProject": "secret/k.txt"})
	e.ok("open_file_in_editor", map[string]any{"pathInProject": "a.txt"})
	e.refused(workspace.ErrTooLarge, "replace_selected_text", map[string]any{"text": strings.Repeat("x", 11)})
}

func TestVSCodeFiles(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("src/utils/helper.js", "function helper() { return 'Hello'; }\n")

	got := jsonOf(t, e.ok("get_file_text_by_path", map[string]any{"pathInProject": "src/utils/helper.js"}))
	if asJSON(got) != `{"content":"function helper() { return 'Hello'; }\n","path":"/workspace/src/utils/helper.js","relativePath":"src/utils/helper.js"}` {
		t.Errorf("get_file_text_by_path = %s", asJSON(got))
	}
	if f := e.failure("get_file_text_by_path", map[string]any{"pathInProject": "missing.js"}); f.Code != "not_found" {
		t.Errorf("missing file: %+v", f)
	}
	e.refused(workspace.ErrInvalid, "get_file_text_by_path", map[string]any{})

	w := jsonOf(t, e.ok("rewrite_file_content", map[string]any{"pathInProject": "src/utils/helper.js", "text": "one\ntwo\nthree\nfour\n"})).(map[string]any)
	if w["path"] != "/workspace/src/utils/helper.js" || w["relativePath"] != "src/utils/helper.js" || w["size"] != 19.0 || w["operationTimeMs"] == nil {
		t.Errorf("rewrite = %v", w)
	}
	c := jsonOf(t, e.ok("create_new_file_with_text", map[string]any{"pathInProject": "src/new/file.js", "text": "x"})).(map[string]any)
	if c["relativePath"] != "src/new/file.js" || e.get("src/new/file.js") != "x" {
		t.Errorf("create = %v", c)
	}

	l := asJSON(jsonOf(t, e.ok("list_files_in_folder", map[string]any{"pathInProject": "src"})))
	if l != `[{"name":"new","path":"src/new","type":"directory"},{"name":"utils","path":"src/utils","type":"directory"}]` {
		t.Errorf("list src = %s", l)
	}
	if l := asJSON(jsonOf(t, e.ok("list_files_in_folder", map[string]any{"pathInProject": "/"}))); !strings.Contains(l, `"name":"src"`) {
		t.Errorf("list / = %s", l)
	}

	// Lines 2..3 replaced; with offset the start of line 2 stays.
	if s := str(t, e.ok("replace_file_content_at_position", map[string]any{"pathInProject": "src/utils/helper.js", "startLine": 2, "endLine": 3, "content": "TWO-THREE"})); s != "ok" {
		t.Errorf("replace at = %q", s)
	}
	if got := e.get("src/utils/helper.js"); got != "one\nTWO-THREE\nfour\n" {
		t.Errorf("after replace at: %q", got)
	}
	e.ok("replace_file_content_at_position", map[string]any{"pathInProject": "src/utils/helper.js", "startLine": 2, "endLine": 2, "content": "x", "offset": 4})
	if got := e.get("src/utils/helper.js"); got != "one\nTWO-x\nfour\n" {
		t.Errorf("after replace at offset: %q", got)
	}
	e.refused(workspace.ErrInvalid, "replace_file_content_at_position", map[string]any{"pathInProject": "src/utils/helper.js", "startLine": 9, "endLine": 9, "content": "x"})

	a := jsonOf(t, e.ok("append_file_content", map[string]any{"pathInProject": "src/utils/helper.js", "text": "five\n"})).(map[string]any)
	if a["path"] != "/workspace/src/utils/helper.js" || e.get("src/utils/helper.js") != "one\nTWO-x\nfour\nfive\n" {
		t.Errorf("append = %v, file %q", a, e.get("src/utils/helper.js"))
	}

	e.put("r.txt", "a a a")
	r := jsonOf(t, e.ok("replace_specific_text", map[string]any{"pathInProject": "r.txt", "searchText": "a", "replaceText": "b"})).(map[string]any)
	if r["replacements"] != 1.0 || e.get("r.txt") != "b a a" {
		t.Errorf("replace first = %v, %q", r, e.get("r.txt"))
	}
	r = jsonOf(t, e.ok("replace_specific_text", map[string]any{"pathInProject": "r.txt", "searchText": "a", "replaceText": "c", "replaceAll": true})).(map[string]any)
	if r["replacements"] != 2.0 || e.get("r.txt") != "b c c" || r["path"] != "/workspace/r.txt" {
		t.Errorf("replace all = %v, %q", r, e.get("r.txt"))
	}

	e.put("test/helper.test.js", "// function helper\n")
	s := asJSON(jsonOf(t, e.ok("search_in_files_content", map[string]any{"searchText": "TWO-x"})))
	if s != `[{"absolutePath":"/workspace/src/utils/helper.js","path":"src/utils/helper.js"}]` {
		t.Errorf("search = %s", s)
	}
	n := asJSON(jsonOf(t, e.ok("find_files_by_name_substring", map[string]any{"nameSubstring": "HELPER"})))
	if n != `[{"absolutePath":"/workspace/src/utils/helper.js","directory":"src/utils","name":"helper.js","path":"src/utils/helper.js"},{"absolutePath":"/workspace/test/helper.test.js","directory":"test","name":"helper.test.js","path":"test/helper.test.js"}]` {
		t.Errorf("find by name = %s", n)
	}
}

func TestVSCodeFilesPolicy(t *testing.T) {
	e := newTestEnv(t, `{"deniedPaths": ["secret/**"], "maxFileSize": 100, "maxEditSize": 10, "confirmationRequired": ["rewrite_file_content"]}`)
	e.put("secret/k.txt", "key")
	e.put("a.txt", "abc")
	e.refused(workspace.ErrPolicy, "get_file_text_by_path", map[string]any{"pathInProject": "secret/k.txt"})
	e.refused(workspace.ErrPolicy, "create_new_file_with_text", map[string]any{"pathInProject": "secret/new.txt", "text": "x"})
	e.refused(workspace.ErrTooLarge, "create_new_file_with_text", map[string]any{"pathInProject": "big.txt", "text": strings.Repeat("x", 101)})
	e.refused(workspace.ErrTooLarge, "append_file_content", map[string]any{"pathInProject": "a.txt", "text": strings.Repeat("x", 11)})
	e.refused(workspace.ErrConfirm, "rewrite_file_content", map[string]any{"pathInProject": "a.txt", "text": "x"})
	e.ok("rewrite_file_content", map[string]any{"pathInProject": "a.txt", "text": "x", "confirmed": true})
	if s := asJSON(jsonOf(t, e.ok("search_in_files_content", map[string]any{"searchText": "key"}))); s != "[]" {
		t.Errorf("search found a denied file: %s", s)
	}
	if s := asJSON(jsonOf(t, e.ok("find_files_by_name_substring", map[string]any{"nameSubstring": "k"}))); s != "[]" {
		t.Errorf("find by name listed a denied file: %s", s)
	}
	e.refused(workspace.ErrTraversal, "list_files_in_folder", map[string]any{"pathInProject": "/etc"})
}

func TestVSCodeBreakpoints(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("src/index.js", "a\nb\n")
	if s := asJSON(jsonOf(t, e.ok("get_debugger_breakpoints", nil))); s != "[]" {
		t.Errorf("no breakpoints = %s", s)
	}
	if s := str(t, e.ok("toggle_debugger_breakpoint", map[string]any{"pathInProject": "src/index.js", "line": 5})); s != "Breakpoint added" {
		t.Errorf("toggle = %q", s)
	}
	e.ok("toggle_debugger_breakpoint", map[string]any{"pathInProject": "src/index.js", "line": 12})
	if s := asJSON(jsonOf(t, e.ok("get_debugger_breakpoints", nil))); s != `[{"line":5,"path":"/workspace/src/index.js"},{"line":12,"path":"/workspace/src/index.js"}]` {
		t.Errorf("breakpoints = %s", s)
	}
	if s := str(t, e.ok("toggle_debugger_breakpoint", map[string]any{"pathInProject": "/workspace/src/index.js", "line": 5})); s != "Breakpoint removed" {
		t.Errorf("toggle again = %q", s)
	}
	if s := asJSON(jsonOf(t, e.ok("get_debugger_breakpoints", nil))); s != `[{"line":12,"path":"/workspace/src/index.js"}]` {
		t.Errorf("breakpoints after removal = %s", s)
	}
	e.refused(workspace.ErrInvalid, "toggle_debugger_breakpoint", map[string]any{"pathInProject": "src/index.js", "line": 0})
	// The editor's toggle action uses the cursor line.
	e.ok("open_file_in_editor", map[string]any{"pathInProject": "src/index.js", "line": 2})
	e.ok("execute_action_by_id", map[string]any{"actionId": "editor.debug.action.toggleBreakpoint"})
	if s := asJSON(jsonOf(t, e.ok("get_debugger_breakpoints", nil))); !strings.Contains(s, `{"line":2,`) {
		t.Errorf("breakpoints after the action = %s", s)
	}
}

// runConfigWorkspace writes run configurations of all four sources; each writes a
// marker file when it runs.
func runConfigWorkspace(e *env) {
	e.put(".vscode/launch.json", `{
  // VS Code accepts comments and trailing commas
  "version": "0.2.0",
  "configurations": [
    {"name": "Launch Python", "type": "python", "request": "launch", "program": "${workspaceFolder}/app.py", "args": ["py",],},
    {"name": "Launch Node", "type": "node", "request": "launch", "program": "${workspaceFolder}/app.js"},
    {"name": "Launch Shell", "type": "shell", "request": "launch", "command": "touch shell.marker"},
    {"name": "Launch Weird", "type": "cppdbg", "request": "launch"},
  ],
}`)
	e.put(".vscode/tasks.json", `{
  "version": "2.0.0",
  "tasks": [
    /* a block comment */
    {"label": "Touch Task", "type": "process", "command": "touch", "args": ["task.marker"], "group": "test"},
    {"label": "Compound", "type": "shell", "command": "touch a && touch b"},
  ]
}`)
	e.put("app.py", "import sys\nopen('python.marker', 'w').write(sys.argv[1])\n")
	e.put("app.js", "require('fs').writeFileSync('node.marker', 'node')\n")
	e.put("Makefile", ".PHONY: build\nVAR := x\nbuild:\n\ttouch make.marker\n%.o: %.c\n\tcc $<\n")
	e.put("package.json", `{"name": "p", "scripts": {"mark": "touch npm.marker"}, "dependencies": {"express": "^4.18.2"}, "devDependencies": {"typescript": "^5.0.0"}}`)
}

func waitFor(t *testing.T, e *env, rel string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !e.exists(rel) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", rel)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestVSCodeRunConfigurations(t *testing.T) {
	e := newTestEnv(t, "")
	runConfigWorkspace(e)
	names := asJSON(jsonOf(t, e.ok("get_run_configurations", nil)))
	want := `["Launch Python","Launch Node","Launch Shell","Launch Weird","Touch Task","Compound","make build","npm run mark"]`
	if names != want {
		t.Fatalf("run configurations = %s\nwant %s", names, want)
	}
	for _, tc := range []struct{ name, marker string }{
		{"Launch Python", "python.marker"}, {"Launch Node", "node.marker"}, {"Launch Shell", "shell.marker"},
		{"Touch Task", "task.marker"}, {"make build", "make.marker"}, {"npm run mark", "npm.marker"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.sub(t)
			if s := str(t, e.ok("run_configuration", map[string]any{"configName": tc.name})); s != "Run configuration started" {
				t.Fatalf("run = %q", s)
			}
			waitFor(t, e, tc.marker)
		})
	}
	if got := e.get("python.marker"); got != "py" {
		t.Errorf("python args: %q", got)
	}
	if f := e.failure("run_configuration", map[string]any{"configName": "nope"}); f.Code != "not_found" {
		t.Errorf("unknown config: %+v", f)
	}
	if f := e.failure("run_configuration", map[string]any{"configName": "Compound"}); f.Code != "unsupported" {
		t.Errorf("compound shell task: %+v", f)
	}
	if f := e.failure("run_configuration", map[string]any{"configName": "Launch Weird"}); f.Code != "unsupported" {
		t.Errorf("unsupported launch type: %+v", f)
	}
	l := asJSON(e.ok("listProcesses", nil))
	if !containsAll(l, `"command":"python3"`, `"command":"make"`, `"command":"npm"`) {
		t.Errorf("listProcesses = %s", l)
	}
}

func TestVSCodeRunConfigurationPolicy(t *testing.T) {
	e := newTestEnv(t, `{"allowedCommands": ["make"]}`)
	runConfigWorkspace(e)
	e.refused(workspace.ErrCommand, "run_configuration", map[string]any{"configName": "Launch Python"})
	e.ok("run_configuration", map[string]any{"configName": "make build"}) // make runs touch: the launcher's business
}

func TestVSCodeProgressAndActions(t *testing.T) {
	e := newTestEnv(t, "")
	if s := asJSON(jsonOf(t, e.ok("get_progress_indicators", nil))); s != "[]" {
		t.Errorf("no jobs = %s", s)
	}
	e.put(".vscode/launch.json", `{"configurations": [{"name": "Sleeper", "type": "shell", "command": "sleep 30"}]}`)
	e.put(".vscode/tasks.json", `{"tasks": [{"label": "Tests", "type": "process", "command": "touch", "args": ["tested"], "group": {"kind": "test", "isDefault": true}}]}`)
	acts := asJSON(jsonOf(t, e.ok("list_available_actions", nil)))
	if !containsAll(acts, `{"id":"workbench.action.files.save","text":"Save File"}`, `"editor.action.formatDocument"`, `"workbench.action.debug.start"`) {
		t.Errorf("actions = %s", acts)
	}
	if s := str(t, e.ok("execute_action_by_id", map[string]any{"actionId": "workbench.action.files.save"})); s != "ok" {
		t.Errorf("save = %q", s)
	}
	if s := str(t, e.ok("execute_action_by_id", map[string]any{"actionId": "no.such.action"})); s != "action not found" {
		t.Errorf("unknown action = %q", s)
	}
	if f := e.failure("execute_action_by_id", map[string]any{"actionId": "editor.action.formatDocument"}); f.Message != "no active editor" {
		t.Errorf("format without an active file: %+v", f)
	}
	e.ok("execute_action_by_id", map[string]any{"actionId": "workbench.action.tasks.test"})
	waitFor(t, e, "tested")
	// The file appears before touch exits: the task leaves the list when it has ended.
	deadline := time.Now().Add(10 * time.Second)
	for asJSON(jsonOf(t, e.ok("get_progress_indicators", nil))) != "[]" {
		if time.Now().After(deadline) {
			t.Fatal("the test task is still listed 10 s after it ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.ok("execute_action_by_id", map[string]any{"actionId": "workbench.action.debug.start"})
	p := jsonOf(t, e.ok("get_progress_indicators", nil)).([]any)
	if len(p) != 1 {
		t.Fatalf("progress = %s", asJSON(p))
	}
	job := p[0].(map[string]any)
	if job["title"] != "Sleeper" || job["source"] != "launch.json" || job["command"] != "sleep 30" || job["elapsedMs"] == nil {
		t.Errorf("progress = %s", asJSON(job))
	}
	e.ok("execute_action_by_id", map[string]any{"actionId": "workbench.action.debug.stop"})
	deadline = time.Now().Add(10 * time.Second)
	for asJSON(jsonOf(t, e.ok("get_progress_indicators", nil))) != "[]" {
		if time.Now().After(deadline) {
			t.Fatal("the job still runs after Stop")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestVSCodeProject(t *testing.T) {
	e := newTestEnv(t, "")
	if m := asJSON(jsonOf(t, e.ok("get_project_modules", nil))); m != `{"extensions":[],"types":[]}` {
		t.Errorf("empty project = %s", m)
	}
	if d := asJSON(jsonOf(t, e.ok("get_project_dependencies", nil))); d != `{"dependencies":{},"devDependencies":{},"projects":[],"type":"unknown"}` {
		t.Errorf("no manifests = %s", d)
	}
	e.put("package.json", `{"dependencies": {"express": "^4.18.2", "lodash": "^4.17.21"}, "devDependencies": {"typescript": "^5.0.0"}}`)
	e.put("requirements.txt", "# deps\nrequests>=2.0\nflask==3.0 ; python_version > '3'\nnumpy\n-r other.txt\n")
	e.put("pyproject.toml", "[project]\nname = \"x\"\ndependencies = [\"httpx>=0.27\"]\n[project.optional-dependencies]\ntest = [\"pytest\"]\n")
	e.put("go.mod", "module example.com/x\n\ngo 1.22\n\nrequire github.com/a/b v1.2.3\n\nrequire (\n\tgithub.com/c/d v0.1.0\n\tgithub.com/e/f v0.2.0 // indirect\n)\n")
	e.put("Cargo.toml", "[package]\nname = \"x\"\n[dependencies]\nserde = { version = \"1.0\", features = [\"derive\"] }\nrand = \"0.8\"\n[dev-dependencies]\ntokio-test = \"0.4\"\n")
	e.put("pom.xml", "<project/>")
	e.put(".vscode/extensions.json", `{
  // recommended
  "recommendations": ["esbenp.prettier-vscode", "dbaeumer.vscode-eslint",],
}`)
	m := asJSON(jsonOf(t, e.ok("get_project_modules", nil)))
	if m != `{"extensions":["esbenp.prettier-vscode","dbaeumer.vscode-eslint"],"types":["node","python","go","rust","java"]}` {
		t.Errorf("modules = %s", m)
	}
	d := jsonOf(t, e.ok("get_project_dependencies", nil)).(map[string]any)
	if d["type"] != "node" || asJSON(d["dependencies"]) != `{"express":"^4.18.2","lodash":"^4.17.21"}` || asJSON(d["devDependencies"]) != `{"typescript":"^5.0.0"}` {
		t.Errorf("first project = %s", asJSON(d))
	}
	want := []string{
		`{"dependencies":{"express":"^4.18.2","lodash":"^4.17.21"},"devDependencies":{"typescript":"^5.0.0"},"file":"package.json","type":"node"}`,
		`{"dependencies":{"flask":"==3.0","numpy":"*","requests":"\u003e=2.0"},"devDependencies":{},"file":"requirements.txt","type":"python"}`,
		`{"dependencies":{"httpx":"\u003e=0.27"},"devDependencies":{"pytest":"*"},"file":"pyproject.toml","type":"python"}`,
		`{"dependencies":{"github.com/a/b":"v1.2.3","github.com/c/d":"v0.1.0"},"devDependencies":{"github.com/e/f":"v0.2.0"},"file":"go.mod","type":"go"}`,
		`{"dependencies":{"rand":"0.8","serde":"1.0"},"devDependencies":{"tokio-test":"0.4"},"file":"Cargo.toml","type":"rust"}`,
	}
	projects := d["projects"].([]any)
	if len(projects) != len(want) {
		t.Fatalf("projects = %s", asJSON(projects))
	}
	for i, w := range want {
		if g := asJSON(projects[i]); g != w {
			t.Errorf("project %d = %s\nwant %s", i, g, w)
		}
	}
}

func TestVSCodeTerminal(t *testing.T) {
	e := newTestEnv(t, "")
	e.put("sub/f.txt", "x")
	r := jsonOf(t, e.ok("execute_terminal_command", map[string]any{"command": "cd sub && export GREETING=hi && greet() { echo \"$GREETING $1\"; }"})).(map[string]any)
	if r["status"] != "executed" || r["exitCode"] != 0.0 || r["cwd"] != "sub" {
		t.Errorf("first run = %v", r)
	}
	// cd, the exported variable and the function carry over.
	r = jsonOf(t, e.ok("execute_terminal_command", map[string]any{"command": "greet there; pwd; ls"})).(map[string]any)
	if r["output"] != "hi there\n/workspace/sub\nf.txt\n" && !strings.HasPrefix(r["output"].(string), "hi there\n") {
		t.Errorf("second run = %v", r)
	}
	info := jsonOf(t, e.ok("get_terminal_info", nil)).(map[string]any)
	if info["osType"] != "Linux" || info["cwd"] != "sub" || info["isDefault"] != true || !strings.Contains(info["scrollback"].(string), "hi there") || info["terminalType"] == "" {
		t.Errorf("terminal info = %v", info)
	}
	next := info["nextOffset"].(float64)
	e.ok("execute_terminal_command", map[string]any{"command": "echo later"})
	info = jsonOf(t, e.ok("get_terminal_info", map[string]any{"scrollbackOffset": next})).(map[string]any)
	if info["scrollback"] != "later\n" {
		t.Errorf("scrollback from %v = %q", next, info["scrollback"])
	}

	b := jsonOf(t, e.ok("run_command_on_background", map[string]any{"command": "echo out; echo err >&2; exit 3", "cwd": "sub"})).(map[string]any)
	if asJSON(b) != `{"exitCode":3,"stderr":"err\n","stdout":"out\n"}` {
		t.Errorf("background = %s", asJSON(b))
	}
	b = jsonOf(t, e.ok("run_command_on_background", map[string]any{"command": "pwd", "cwd": "sub"})).(map[string]any)
	if !strings.HasSuffix(strings.TrimSpace(b["stdout"].(string)), "sub") {
		t.Errorf("background cwd = %v", b)
	}
	b = jsonOf(t, e.ok("run_command_on_background", map[string]any{"command": "sleep 5", "timeout": 200})).(map[string]any)
	if b["timedOut"] != true || b["exitCode"] != -1.0 {
		t.Errorf("background timeout = %v", b)
	}
	o := jsonOf(t, e.ok("execute_os_specific_command", map[string]any{"windowsCommand": "dir", "unixCommand": "echo unix", "macCommand": "echo mac"})).(map[string]any)
	if o["osType"] != "Linux" || o["command"] != "echo unix" || o["executed"] != true || o["output"] != "unix\n" {
		t.Errorf("os specific = %v", o)
	}
	o = jsonOf(t, e.ok("execute_os_specific_command", map[string]any{"command": "echo generic"})).(map[string]any)
	if o["command"] != "echo generic" {
		t.Errorf("os specific generic = %v", o)
	}
	e.refused(workspace.ErrInvalid, "execute_os_specific_command", map[string]any{"windowsCommand": "dir"})

	w := jsonOf(t, e.ok("wait", map[string]any{"milliseconds": 30})).(map[string]any)
	if asJSON(w) != `{"message":"Waited for 30 milliseconds","status":"completed"}` {
		t.Errorf("wait = %s", asJSON(w))
	}
	e.refused(workspace.ErrInvalid, "wait", map[string]any{"milliseconds": 600001})
}

// TestVSCodeTerminalRefusals: a program outside allowedCommands is refused wherever the
// shell syntax hides it, before anything starts.
func TestVSCodeTerminalRefusals(t *testing.T) {
	// sh is allowed: its script is interpreted in-process with the same checks.
	e := newTestEnv(t, `{"allowedCommands": ["echo", "env", "xargs", "find", "cat", "sh"], "deniedPaths": ["secret.txt"]}`)
	e.put("secret.txt", "s")
	for _, cmd := range []string{
		"touch m1",
		"echo $(touch m2)",
		"echo `touch m3`",
		"sh -c 'touch m4'",
		"env X=1 touch m5",
		"echo m6 | xargs touch",
		"find . -maxdepth 0 -exec touch m7 \\;",
		"echo ok; touch m8",
	} {
		t.Run(cmd, func(t *testing.T) {
			e := e.sub(t)
			for _, tool := range []string{"execute_terminal_command", "run_command_on_background"} {
				err := e.refused(workspace.ErrCommand, tool, map[string]any{"command": cmd})
				if !strings.Contains(err.Error(), "touch") {
					t.Errorf("%s: %v does not name touch", tool, err)
				}
			}
			for i := 1; i <= 8; i++ {
				if m := "m" + string(rune('0'+i)); e.exists(m) {
					t.Fatalf("%s was created", m)
				}
			}
		})
	}
	e.refused(workspace.ErrPolicy, "execute_terminal_command", map[string]any{"command": "cat < secret.txt"})
	e.refused(workspace.ErrPolicy, "execute_terminal_command", map[string]any{"command": "echo x > secret.txt"})
	if got := e.get("secret.txt"); got != "s" {
		t.Errorf("secret.txt = %q", got)
	}
	e.refused(workspace.ErrTraversal, "execute_terminal_command", map[string]any{"command": "cd /etc"})
	if r := jsonOf(t, e.ok("execute_terminal_command", map[string]any{"command": "echo allowed"})).(map[string]any); r["output"] != "allowed\n" {
		t.Errorf("allowed = %v", r)
	}
}

func TestVSCodeGit(t *testing.T) {
	e := newTestEnv(t, `{"deniedPaths": ["secret/**"]}`)
	e.ok("execute_terminal_command", map[string]any{"command": "git init -q -b main && git config user.email a@b && git config user.name Dev"})
	e.put("a.txt", "v1\n")
	e.put("secret/k.txt", "k1\n")
	e.ok("run_command_on_background", map[string]any{"command": "git add -A && git commit -qm 'first commit: fix bug'"})
	e.put("a.txt", "v2\n")
	e.put("b.txt", "new\n")
	e.put("secret/k.txt", "k2\n")

	st := asJSON(jsonOf(t, e.ok("get_project_vcs_status", nil)))
	if st != `[{"pathInProject":"a.txt","type":"MODIFICATION"},{"pathInProject":"b.txt","type":"ADDITION"}]` {
		t.Errorf("status = %s", st)
	}
	hashes := jsonOf(t, e.ok("find_commit_by_message", map[string]any{"text": "FIX BUG"})).([]any)
	if len(hashes) != 1 || !hexHash.MatchString(hashes[0].(string)) {
		t.Fatalf("find commit = %v", hashes)
	}
	first := hashes[0].(string)
	if h := asJSON(jsonOf(t, e.ok("find_commit_by_message", map[string]any{"text": "nothing like it"}))); h != "[]" {
		t.Errorf("find none = %s", h)
	}

	c := jsonOf(t, e.ok("commit_changes", map[string]any{"message": "just a", "files": []string{"a.txt"}})).(map[string]any)
	if c["success"] != true || !hexHash.MatchString(c["commitHash"].(string)) {
		t.Fatalf("commit = %v", c)
	}
	if st := asJSON(jsonOf(t, e.ok("get_project_vcs_status", nil))); st != `[{"pathInProject":"b.txt","type":"ADDITION"}]` {
		t.Errorf("status after committing a.txt only = %s", st)
	}
	hist := jsonOf(t, e.ok("get_file_history", map[string]any{"pathInProject": "a.txt", "maxEntries": 10})).([]any)
	if len(hist) != 2 || hist[0].(map[string]any)["message"] != "just a" || hist[1].(map[string]any)["author"] != "Dev" {
		t.Errorf("history = %s", asJSON(hist))
	}
	diff := str(t, e.ok("get_file_diff", map[string]any{"pathInProject": "a.txt", "commit1": first, "commit2": "HEAD"}))
	if !containsAll(diff, "diff --git a/a.txt b/a.txt", "-v1", "+v2") {
		t.Errorf("diff = %q", diff)
	}
	e.put("a.txt", "v3\n")
	if diff := str(t, e.ok("get_file_diff", map[string]any{"pathInProject": "a.txt"})); !containsAll(diff, "-v2", "+v3") {
		t.Errorf("worktree diff = %q", diff)
	}
	e.refused(workspace.ErrPolicy, "get_file_diff", map[string]any{"pathInProject": "secret/k.txt", "commit1": first})
	d := jsonOf(t, e.ok("get_commit_details", map[string]any{"commitHash": first})).(map[string]any)
	if d["hash"] != first || d["message"] != "first commit: fix bug" || d["author"] != "Dev" || asJSON(d["files"]) != `["a.txt"]` {
		t.Errorf("commit details (denied file left out) = %s", asJSON(d))
	}
	e.refused(workspace.ErrInvalid, "get_commit_details", map[string]any{"commitHash": "--all"})

	if b := asJSON(jsonOf(t, e.ok("get_branch_info", nil))); b != `{"branches":["main"],"current":"main"}` {
		t.Errorf("branches = %s", b)
	}
	cb := asJSON(jsonOf(t, e.ok("create_branch", map[string]any{"branch": "feature/x", "checkout": false})))
	if cb != `{"branch":"feature/x","checkedOut":false,"success":true}` {
		t.Errorf("create branch = %s", cb)
	}
	e.ok("run_command_on_background", map[string]any{"command": "git stash -q"})
	if s := asJSON(jsonOf(t, e.ok("switch_branch", map[string]any{"branch": "feature/x"}))); s != `{"branch":"feature/x","success":true}` {
		t.Errorf("switch = %s", s)
	}
	e.ok("create_branch", map[string]any{"branch": "dev", "checkout": true})
	if b := asJSON(jsonOf(t, e.ok("get_branch_info", nil))); b != `{"branches":["dev","feature/x","main"],"current":"dev"}` {
		t.Errorf("branches after create+checkout = %s", b)
	}
	if f := e.failure("switch_branch", map[string]any{"branch": "nope"}); f.Code != "git_failed" {
		t.Errorf("switch to a missing branch: %+v", f)
	}
}

func TestVSCodePull(t *testing.T) {
	e := newTestEnv(t, "")
	// A remote repository and a bundle inside the workspace, and a clone of it.
	e.ok("run_command_on_background", map[string]any{"command": "git init -q -b main remote && cd remote && git config user.email a@b && git config user.name R && echo one > f && git add f && git commit -qm one"})
	e.ok("run_command_on_background", map[string]any{"command": "git clone -q remote clone"})
	e.ok("run_command_on_background", map[string]any{"command": "cd remote && echo two > f && git commit -qam two"})
	e.ok("run_command_on_background", map[string]any{"command": "git -C remote bundle create ../r.bundle main"})

	// The clone's repository is the workspace's: move it to the root.
	if err := os.Rename(e.path("clone/.git"), e.path(".git")); err != nil {
		t.Fatal(err)
	}
	e.ok("run_command_on_background", map[string]any{"command": "git checkout -q -- . && git remote set-url origin ./remote"}) // /workspace/remote in a container
	p := jsonOf(t, e.ok("pull_changes", map[string]any{"remote": "origin", "branch": "main"})).(map[string]any)
	if p["success"] != true || !strings.HasPrefix(p["message"].(string), "Updated ") || e.get("f") != "two\n" {
		t.Fatalf("pull = %v, f = %q", p, e.get("f"))
	}
	if p := jsonOf(t, e.ok("pull_changes", nil)).(map[string]any); p["message"] != "Already up to date." {
		t.Errorf("pull again = %v", p)
	}
	if p := jsonOf(t, e.ok("pull_changes", map[string]any{"remote": "r.bundle", "branch": "main"})).(map[string]any); p["message"] != "Already up to date." {
		t.Errorf("pull bundle = %v", p)
	}
	e.refused(workspace.ErrTraversal, "pull_changes", map[string]any{"remote": "../elsewhere"})
	if f := e.failure("pull_changes", map[string]any{"remote": "nosuchremote"}); f.Code != "git_failed" {
		t.Errorf("unknown remote: %+v", f)
	}
}
