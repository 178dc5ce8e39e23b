package e2e_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
)

// The vscode toolset on a real container: every one of its 41 tools through the go-sdk
// client, the legacy REST surface with both body formats, and the editor state and
// breakpoints across a cws restart on Redis.

// vsText calls a tool and returns its text content, failing on any error.
func (c *mcpClient) vsText(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	if args == nil {
		args = map[string]any{}
	}
	res, err := c.callRaw(tool, args, nil)
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	if res.IsError {
		t.Fatalf("%s %v: tool error: %s", tool, args, text(res))
	}
	return text(res)
}

// vsJSON calls a tool and decodes its text content.
func vsJSON[T any](t *testing.T, c *mcpClient, tool string, args map[string]any) T {
	t.Helper()
	var v T
	s := c.vsText(t, tool, args)
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: %v: %s", tool, err, s)
	}
	return v
}

// vsFailure calls a tool that must report an execution failure and returns its text.
func (c *mcpClient) vsFailure(t *testing.T, tool string, args map[string]any) string {
	t.Helper()
	res, err := c.callRaw(tool, args, nil)
	if err != nil {
		t.Fatalf("%s %v: %v", tool, args, err)
	}
	if !res.IsError {
		t.Fatalf("%s %v: want an error result, got %s", tool, args, text(res))
	}
	return text(res)
}

func TestVSCodeTools(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantVSCode) })
	tok := fx.token(t, tenantVSCode, "vs-agent", "")
	endpoint := srv.url + "/mcp?toolsets=vscode"
	c := connect(t, endpoint, tok, "")
	called := map[string]bool{}
	ctx := t.Context()
	list, err := c.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	if len(names) != 41 {
		t.Fatalf("tools/list with toolsets=vscode: %d tools %v", len(names), names)
	}
	track := func(tool string) string { called[tool] = true; return tool }

	// Files.
	c.vsText(t, track("create_new_file_with_text"), map[string]any{"pathInProject": "src/a.js", "text": "console.log('a');\n"})
	if s := vsJSON[map[string]any](t, c, track("get_file_text_by_path"), map[string]any{"pathInProject": "src/a.js"}); s["path"] != "/workspace/src/a.js" || s["relativePath"] != "src/a.js" {
		t.Errorf("get_file_text_by_path = %v", s)
	}
	c.vsText(t, track("rewrite_file_content"), map[string]any{"pathInProject": "src/a.js", "text": "one\ntwo\nthree\n"})
	if s := c.vsText(t, track("replace_file_content_at_position"), map[string]any{"pathInProject": "src/a.js", "startLine": 2, "endLine": 2, "content": "TWO"}); s != "ok" {
		t.Errorf("replace_file_content_at_position = %q", s)
	}
	c.vsText(t, track("append_file_content"), map[string]any{"pathInProject": "src/a.js", "text": "four\n"})
	if r := vsJSON[map[string]any](t, c, track("replace_specific_text"), map[string]any{"pathInProject": "src/a.js", "searchText": "o", "replaceText": "0", "replaceAll": true}); r["replacements"] != 2.0 { // 0ne, f0ur
		t.Errorf("replace_specific_text = %v", r)
	}
	if l := c.vsText(t, track("list_files_in_folder"), map[string]any{"pathInProject": "/"}); !strings.Contains(l, `{"name":"src","type":"directory","path":"src"}`) {
		t.Errorf("list_files_in_folder = %s", l)
	}
	if s := c.vsText(t, track("search_in_files_content"), map[string]any{"searchText": "f0ur"}); s != `[{"path":"src/a.js","absolutePath":"/workspace/src/a.js"}]` {
		t.Errorf("search_in_files_content = %s", s)
	}
	if s := c.vsText(t, track("find_files_by_name_substring"), map[string]any{"nameSubstring": "a.j"}); !strings.Contains(s, `"directory":"src"`) {
		t.Errorf("find_files_by_name_substring = %s", s)
	}
	if w := rawToolCall(t, endpoint, tok, "get_file_text_by_path", map[string]any{"pathInProject": "secret/k"}); w == nil || w.Code != -32002 {
		t.Errorf("denied path: %+v", w)
	}

	// Editor.
	if s := c.vsText(t, track("get_open_in_editor_file_path"), nil); s != "" {
		t.Errorf("no active file: %q", s)
	}
	if s := c.vsText(t, track("open_file_in_editor"), map[string]any{"pathInProject": "src/a.js", "line": 1, "character": 1, "endLine": 1, "endCharacter": 4}); s != "file is opened" {
		t.Errorf("open_file_in_editor = %q", s)
	}
	if s := c.vsText(t, track("replace_selected_text"), map[string]any{"text": "ONE"}); s != "ok" {
		t.Errorf("replace_selected_text = %q", s)
	}
	if s := c.vsText(t, track("get_open_in_editor_file_text"), nil); s != "ONE\nTWO\nthree\nf0ur\n" {
		t.Errorf("get_open_in_editor_file_text = %q", s)
	}
	c.vsText(t, track("replace_current_file_text"), map[string]any{"text": "console.log('b');\n"})

	// Code analysis through gopls.
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": "go.mod", "text": "module example.com/m\n\ngo 1.22\n"})
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": "main.go", "text": "package main\n\nimport \"fmt\"\n\nfunc helper() int { return 1 + 2 }\n\nfunc main() {\n\tfmt.Println(helper())\n}\n"})
	syms := vsJSON[struct{ Symbols []map[string]any }](t, c, track("get_symbols_in_file"), map[string]any{"pathInProject": "main.go"})
	if !slices.ContainsFunc(syms.Symbols, func(s map[string]any) bool { return s["name"] == "helper" && s["kind"] == "Function" }) {
		t.Errorf("get_symbols_in_file = %v", syms)
	}
	refs := vsJSON[struct{ References []map[string]any }](t, c, track("find_references"), map[string]any{"pathInProject": "main.go", "line": 4, "character": 6})
	if len(refs.References) != 2 || refs.References[0]["path"] != "main.go" {
		t.Errorf("find_references = %v", refs)
	}
	r := vsJSON[map[string]any](t, c, track("refactor_code_at_location"), map[string]any{"pathInProject": "main.go", "line": 4, "character": 6, "refactorType": "rename", "options": map[string]any{"newName": "compute"}})
	if r["success"] != true || r["message"] != "Successfully renamed to compute" {
		t.Errorf("rename = %v", r)
	}
	if s := c.vsText(t, "get_file_text_by_path", map[string]any{"pathInProject": "main.go"}); strings.Contains(s, "helper") || !strings.Contains(s, "compute()") {
		t.Errorf("after rename: %s", s)
	}
	// extract_variable applies gopls's refactoring of the selected expression.
	r = vsJSON[map[string]any](t, c, "refactor_code_at_location", map[string]any{"pathInProject": "main.go", "line": 7, "character": 1, "refactorType": "extract_variable",
		"options": map[string]any{"endLine": 7, "endCharacter": 23}})
	if r["success"] != true || !strings.Contains(c.vsText(t, "get_file_text_by_path", map[string]any{"pathInProject": "main.go"}), "newVar") {
		t.Errorf("extract_variable = %v", r)
	}
	// extract_function where the server offers none is a clear error.
	if s := c.vsFailure(t, "refactor_code_at_location", map[string]any{"pathInProject": "main.go", "line": 0, "character": 0, "refactorType": "extract_function"}); !strings.Contains(s, "no extract function refactoring") {
		t.Errorf("extract_function without one = %s", s)
	}
	// Actions on the active file through the language server.
	c.vsText(t, "replace_current_file_text", map[string]any{"text": "x"}) // src/a.js is active
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": "fmt.go", "text": "package main\nimport \"os\"\nfunc  f( ) {   }\n"})
	c.vsText(t, "open_file_in_editor", map[string]any{"pathInProject": "fmt.go"})
	for _, id := range []string{"editor.action.organizeImports", "editor.action.formatDocument"} {
		if s := c.vsText(t, track("execute_action_by_id"), map[string]any{"actionId": id}); s != "ok" {
			t.Errorf("%s = %q", id, s)
		}
	}
	if s := c.vsText(t, "get_open_in_editor_file_text", nil); s != "package main\n\nfunc f() {}\n" {
		t.Errorf("after organize imports and format: %q", s)
	}

	// Debug: breakpoints and run configurations from all four sources.
	if s := c.vsText(t, track("toggle_debugger_breakpoint"), map[string]any{"pathInProject": "main.go", "line": 8}); s != "Breakpoint added" {
		t.Errorf("toggle = %q", s)
	}
	c.vsText(t, "toggle_debugger_breakpoint", map[string]any{"pathInProject": "main.go", "line": 5})
	if s := c.vsText(t, "toggle_debugger_breakpoint", map[string]any{"pathInProject": "main.go", "line": 8}); s != "Breakpoint removed" {
		t.Errorf("toggle again = %q", s)
	}
	if s := c.vsText(t, track("get_debugger_breakpoints"), nil); s != `[{"path":"/workspace/main.go","line":5}]` {
		t.Errorf("breakpoints = %s", s)
	}
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": ".vscode/launch.json", "text": `{
  // comments and trailing commas, as VS Code accepts them
  "configurations": [
    {"name": "Py", "type": "python", "request": "launch", "program": "${workspaceFolder}/mark.py", "args": ["py.marker"],},
    {"name": "Node", "type": "node", "request": "launch", "program": "${workspaceFolder}/mark.js"},
    {"name": "Shell", "type": "shell", "request": "launch", "program": "mark.sh"},
  ],
}`})
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": ".vscode/tasks.json", "text": `{"tasks": [{"label": "Task Py", "type": "process", "command": "python3", "args": ["mark.py", "task.marker"], "group": "test"},]}`})
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": "Makefile", "text": "build:\n\techo built\n"})
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": "package.json", "text": `{"scripts": {"start": "node mark.js"}, "dependencies": {"express": "^4.18.2"}}`})
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": "mark.py", "text": "import sys, time\nopen(sys.argv[1], 'w').write('x')\ntime.sleep(30)\n"})
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": "mark.js", "text": "require('fs').writeFileSync('node.marker', 'x')\n"})
	c.vsText(t, "create_new_file_with_text", map[string]any{"pathInProject": "mark.sh", "text": "echo x > shell.marker\n"})
	if s := c.vsText(t, track("get_run_configurations"), nil); s != `["Py","Node","Shell","Task Py","make build","npm run start"]` {
		t.Errorf("get_run_configurations = %s", s)
	}
	for _, name := range []string{"Py", "Node", "Shell", "Task Py"} {
		if s := c.vsText(t, track("run_configuration"), map[string]any{"configName": name}); s != "Run configuration started" {
			t.Errorf("run_configuration %s = %q", name, s)
		}
	}
	waitFiles(t, c, "py.marker", "node.marker", "shell.marker", "task.marker")
	prog := vsJSON[[]map[string]any](t, c, track("get_progress_indicators"), nil)
	if !slices.ContainsFunc(prog, func(p map[string]any) bool { return p["title"] == "Py" && p["source"] == "launch.json" }) {
		t.Errorf("get_progress_indicators = %v", prog)
	}
	procs := connect(t, srv.url+"/mcp?toolsets=core", tok, "").call(t, "listProcesses", map[string]any{}) // core, same session
	if !strings.Contains(asText(procs), `"command":"python3"`) {
		t.Errorf("listProcesses = %v", procs)
	}

	// Terminal: a persistent shell, and refusals wherever a program hides.
	run := vsJSON[map[string]any](t, c, track("execute_terminal_command"), map[string]any{"command": "cd src && export V=kept && f() { echo \"fn $V\"; }"})
	if run["status"] != "executed" || run["cwd"] != "src" {
		t.Errorf("execute_terminal_command = %v", run)
	}
	if run := vsJSON[map[string]any](t, c, "execute_terminal_command", map[string]any{"command": "f; pwd"}); run["output"] != "fn kept\n/workspace/src\n" {
		t.Errorf("persistent shell: %v", run)
	}
	info := vsJSON[map[string]any](t, c, track("get_terminal_info"), nil)
	if info["osType"] != "Linux" || !strings.Contains(info["osVersion"].(string), "Debian") || !strings.Contains(info["scrollback"].(string), "fn kept") {
		t.Errorf("get_terminal_info = %v", info)
	}
	bg := vsJSON[map[string]any](t, c, track("run_command_on_background"), map[string]any{"command": "echo out; echo err >&2", "timeout": 10000})
	if bg["stdout"] != "out\n" || bg["stderr"] != "err\n" || bg["exitCode"] != 0.0 {
		t.Errorf("run_command_on_background = %v", bg)
	}
	if o := vsJSON[map[string]any](t, c, track("execute_os_specific_command"), map[string]any{"windowsCommand": "dir", "unixCommand": "echo unix"}); o["command"] != "echo unix" || o["output"] != "unix\n" {
		t.Errorf("execute_os_specific_command = %v", o)
	}
	if w := vsJSON[map[string]any](t, c, track("wait"), map[string]any{"milliseconds": 10}); w["status"] != "completed" {
		t.Errorf("wait = %v", w)
	}
	for i, cmd := range []string{"echo $(touch /workspace/m1)", "echo `touch /workspace/m2`", "sh -c 'touch /workspace/m3'", "env X=1 touch /workspace/m4",
		"echo /workspace/m5 | xargs touch", "find /workspace -maxdepth 0 -exec touch /workspace/m6 \\;"} {
		for _, tool := range []string{"execute_terminal_command", "run_command_on_background"} {
			if w := rawToolCall(t, endpoint, tok, tool, map[string]any{"command": cmd}); w == nil || w.Code != -32004 {
				t.Errorf("%s %q: %+v, want -32004", tool, cmd, w)
			}
		}
		if s := c.vsText(t, "find_files_by_name_substring", map[string]any{"nameSubstring": "m" + string(rune('1'+i))}); strings.Contains(s, `"name":"m`+string(rune('1'+i))+`"`) {
			t.Errorf("%q created its marker: %s", cmd, s)
		}
	}

	// Git, with a pull from a local remote.
	c.vsText(t, "execute_terminal_command", map[string]any{"command": "cd /workspace && git init -q -b main && git config user.email d@e && git config user.name Dev && " +
		"git init -q --bare -b main /tmp/remote.git"})
	c.vsText(t, "execute_terminal_command", map[string]any{"command": "cd /workspace && python3 -c \"import os; os.makedirs('secret'); open('secret/k.txt', 'w').write('k')\""})
	if s := c.vsText(t, track("commit_changes"), map[string]any{"message": "first: fix bug", "files": []string{"main.go", "go.mod"}}); !strings.Contains(s, `"success":true`) {
		t.Errorf("commit_changes = %s", s)
	}
	if s := c.vsText(t, track("get_project_vcs_status"), nil); !strings.Contains(s, `{"pathInProject":"mark.py","type":"ADDITION"}`) || strings.Contains(s, "secret") {
		t.Errorf("get_project_vcs_status = %s", s)
	}
	hashes := vsJSON[[]string](t, c, track("find_commit_by_message"), map[string]any{"text": "fix bug"})
	if len(hashes) != 1 {
		t.Fatalf("find_commit_by_message = %v", hashes)
	}
	if d := vsJSON[map[string]any](t, c, track("get_commit_details"), map[string]any{"commitHash": hashes[0]}); d["message"] != "first: fix bug" || asText(d["files"]) != `["go.mod","main.go"]` {
		t.Errorf("get_commit_details = %v", d)
	}
	if h := vsJSON[[]map[string]any](t, c, track("get_file_history"), map[string]any{"pathInProject": "main.go"}); len(h) != 1 || h[0]["author"] != "Dev" {
		t.Errorf("get_file_history = %v", h)
	}
	c.vsText(t, "append_file_content", map[string]any{"pathInProject": "main.go", "text": "// more\n"})
	if d := c.vsText(t, track("get_file_diff"), map[string]any{"pathInProject": "main.go"}); !strings.Contains(d, "+// more") {
		t.Errorf("get_file_diff = %s", d)
	}
	if s := c.vsText(t, track("create_branch"), map[string]any{"branch": "feature", "checkout": false}); s != `{"success":true,"branch":"feature","checkedOut":false}` {
		t.Errorf("create_branch = %s", s)
	}
	c.vsText(t, "execute_terminal_command", map[string]any{"command": "cd /workspace && git stash -q"})
	if s := c.vsText(t, track("switch_branch"), map[string]any{"branch": "feature"}); s != `{"success":true,"branch":"feature"}` {
		t.Errorf("switch_branch = %s", s)
	}
	if s := c.vsText(t, track("get_branch_info"), nil); s != `{"current":"feature","branches":["feature","main"]}` {
		t.Errorf("get_branch_info = %s", s)
	}
	// A local remote: a repository with one more commit, fetched as a bundle and a path.
	up := vsJSON[map[string]any](t, c, "execute_terminal_command", map[string]any{"command": "cd /workspace && git push -q /tmp/remote.git feature:main && " +
		"git clone -q /tmp/remote.git /tmp/work && W='git -C /tmp/work' && $W config user.email r@e && $W config user.name R && echo new > /tmp/work/new.txt && " +
		"$W add new.txt && $W commit -qm upstream && $W bundle create -q /workspace/up.bundle main"})
	if up["exitCode"] != 0.0 {
		t.Fatalf("making the remote: %v", up)
	}
	p := vsJSON[map[string]any](t, c, track("pull_changes"), map[string]any{"remote": "up.bundle", "branch": "main"})
	if p["success"] != true || !strings.HasPrefix(p["message"].(string), "Updated ") {
		t.Errorf("pull_changes = %v", p)
	}
	if s := c.vsText(t, "get_file_text_by_path", map[string]any{"pathInProject": "new.txt"}); !strings.Contains(s, `"content":"new\n"`) {
		t.Errorf("pulled file = %s", s)
	}

	// Project.
	if m := c.vsText(t, track("get_project_modules"), nil); m != `{"types":["node","go"],"extensions":[]}` {
		t.Errorf("get_project_modules = %s", m)
	}
	if d := vsJSON[map[string]any](t, c, track("get_project_dependencies"), nil); d["type"] != "node" || asText(d["dependencies"]) != `{"express":"^4.18.2"}` {
		t.Errorf("get_project_dependencies = %v", d)
	}

	// Actions.
	if s := c.vsText(t, track("list_available_actions"), nil); !strings.Contains(s, `{"id":"workbench.action.debug.start","text":"Start Debugging"}`) {
		t.Errorf("list_available_actions = %s", s)
	}
	if s := c.vsText(t, "execute_action_by_id", map[string]any{"actionId": "nope"}); s != "action not found" {
		t.Errorf("unknown action = %q", s)
	}

	for _, n := range names {
		if !called[n] {
			t.Errorf("tool %s was not exercised", n)
		}
	}
}

func asText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// waitFiles waits until the workspace has every file.
func waitFiles(t *testing.T, c *mcpClient, files ...string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for _, f := range files {
		for {
			res, err := c.callRaw("get_file_text_by_path", map[string]any{"pathInProject": f}, nil)
			if err == nil && !res.IsError {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never appeared", f)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// TestVSCodeLegacyREST is the plugin's REST surface on a real container, with both body
// formats, and the editor state and breakpoints surviving a cws restart on Redis.
func TestVSCodeLegacyREST(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	redisURL, addr := testenv.Redis(t), freeAddr(t)
	srv := startCWS(t, fx, redisURL, addr)
	tok := fx.token(t, tenantVSCode, "legacy", "")
	post := func(path, body string) (int, map[string]json.RawMessage) {
		t.Helper()
		r := do(t, nil, srv.url, http.MethodPost, path, tok, []byte(body), map[string]string{"Content-Type": "application/json"})
		var env map[string]json.RawMessage
		if err := json.Unmarshal(r.body, &env); err != nil {
			t.Fatalf("POST %s: %d %s", path, r.status, r.body)
		}
		return r.status, env
	}
	if st, env := post("/mcp/create_new_file_with_text", `{"pathInProject": "src/x.py", "text": "print(1)\n"}`); st != 200 || string(env["error"]) != "null" {
		t.Fatalf("direct format: %d %v", st, env)
	}
	if st, env := post("/mcp/open_file_in_editor", `{"jsonrpc": "2.0", "id": 1, "params": {"arguments": {"pathInProject": "src/x.py", "line": 1, "character": 7}}}`); st != 200 || string(env["status"]) != `"file is opened"` {
		t.Fatalf("JSON-RPC format: %d %v", st, env)
	}
	if st, env := post("/mcp/toggle_debugger_breakpoint", `{"pathInProject": "src/x.py", "line": 1}`); st != 200 || string(env["status"]) != `"Breakpoint added"` {
		t.Fatalf("breakpoint: %d %v", st, env)
	}
	if st, env := post("/mcp/execute_terminal_command", `{"command": "echo $(touch m)"}`); st != 403 || string(env["status"]) != "null" || !strings.Contains(string(env["error"]), "touch") {
		t.Errorf("refused command: %d %v", st, env)
	}
	if st, env := post("/mcp/get_file_text_by_path", `{"pathInProject": "nope"}`); st != 200 || string(env["status"]) != "null" || string(env["error"]) == "null" {
		t.Errorf("missing file: %d %v", st, env)
	}
	r := do(t, nil, srv.url, http.MethodGet, "/mcp/list_tools", tok, nil, nil)
	var tools []map[string]any
	if err := json.Unmarshal(r.body, &tools); err != nil || len(tools) != 41 {
		t.Errorf("list_tools: %d %v", len(tools), err)
	}
	// POST /mcp with a JSON-RPC body is still MCP.
	if w := rawToolCall(t, srv.url+"/mcp?toolsets=vscode", tok, "get_open_in_editor_file_path", map[string]any{}); w != nil {
		t.Errorf("MCP on /mcp: %+v", w)
	}

	// The editor state and breakpoints live in Redis: a restarted cws sees them.
	srv.kill()
	srv = startCWS(t, fx, redisURL, addr)
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantVSCode) })
	r = do(t, nil, srv.url, http.MethodGet, "/mcp/status", tok, nil, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"activeFile":"/workspace/src/x.py"`) || !strings.Contains(string(r.body), `"openFiles":["/workspace/src/x.py"]`) {
		t.Errorf("status after the restart: %d %s", r.status, r.body)
	}
	if st, env := post("/mcp/replace_selected_text", `{"text": "2"}`); st != 200 || string(env["status"]) != `"ok"` {
		t.Errorf("replace at the cursor after the restart: %d %v", st, env)
	}
	if _, env := post("/mcp/get_open_in_editor_file_text", `{}`); string(env["status"]) != `"print(21)\n"` {
		t.Errorf("text after the restart: %s", env["status"])
	}
	if _, env := post("/mcp/get_debugger_breakpoints", `{"jsonrpc": "2.0", "id": 2, "params": {}}`); string(env["status"]) != `[{"path":"/workspace/src/x.py","line":1}]` {
		t.Errorf("breakpoints after the restart: %s", env["status"])
	}
}
