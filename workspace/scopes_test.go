package workspace_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/sandbox/sandboxtest"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

// TestToolScopes pins the scope each tool needs. It comes from the tool's kind in its
// one catalogue entry: read-only tools need tools:read, file and repository changes
// tools:write, commands and background processes tools:exec.
func TestToolScopes(t *testing.T) {
	want := map[string][]string{
		auth.ScopeToolsRead: {"readFile", "listFiles", "searchFiles", "findFiles", "gitStatus", "gitDiff", "gitLog", "gitShow",
			"get_hover", "get_definition", "get_references", "get_diagnostics", "get_completions", "get_document_symbols",
			"format_document", "workspace_symbol_search", "get_code_actions", "prepare_call_hierarchy", "get_incoming_calls",
			"get_outgoing_calls", "get_cached_diagnostics", "get_server_logs", "get_server_messages",
			// vscode: reads of files, editor state, analysis, git, project, actions
			"get_open_in_editor_file_text", "get_open_in_editor_file_path", "get_file_text_by_path", "list_files_in_folder",
			"search_in_files_content", "find_files_by_name_substring", "get_symbols_in_file", "find_references",
			"get_debugger_breakpoints", "get_run_configurations", "get_project_vcs_status", "find_commit_by_message",
			"get_file_history", "get_file_diff", "get_branch_info", "get_commit_details", "get_project_modules",
			"get_project_dependencies", "list_available_actions", "get_progress_indicators"},
		auth.ScopeToolsWrite: {"writeFile", "editFile", "applyPatch", "deleteFile", "moveFile",
			"gitCommit", "gitBranch", "gitCheckout", "rename_symbol",
			// vscode: editor state and file changes, breakpoints, repository changes
			"replace_selected_text", "replace_current_file_text", "open_file_in_editor", "rewrite_file_content",
			"create_new_file_with_text", "replace_file_content_at_position", "append_file_content", "replace_specific_text",
			"refactor_code_at_location", "toggle_debugger_breakpoint", "commit_changes", "pull_changes", "switch_branch",
			"create_branch"},
		auth.ScopeToolsExec: {"runCommand", "startProcess", "readProcessOutput", "listProcesses", "killProcess",
			// vscode: the terminal, run configurations and actions that run tasks
			"execute_terminal_command", "run_command_on_background", "wait", "get_terminal_info",
			"execute_os_specific_command", "run_configuration", "execute_action_by_id",
			// terminal: a program on a PTY, typed into and read back
			"terminalOpen", "terminalSend", "terminalScreen", "terminalClose", "terminalList"},
	}
	got := map[string][]string{}
	for _, tl := range workspace.NewCatalog(toolset.All()...).Tools() {
		got[tl.Scope] = append(got[tl.Scope], tl.Name)
		if !slices.Contains(auth.ToolScopes(), tl.Scope) {
			t.Errorf("%s needs %q, not a tools scope", tl.Name, tl.Scope)
		}
		// The annotations and the scope agree: whatever is not read-only is not
		// callable with tools:read.
		if !tl.Annotations.ReadOnly && tl.Scope == auth.ScopeToolsRead {
			t.Errorf("%s is not read-only but needs only tools:read", tl.Name)
		}
		if tl.Annotations.OpenWorld && tl.Scope != auth.ScopeToolsExec {
			t.Errorf("%s runs programs but needs %s", tl.Name, tl.Scope)
		}
	}
	for scope, names := range want {
		g := slices.Clone(got[scope])
		slices.Sort(g)
		w := slices.Clone(names)
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Errorf("%s: tools %q, want %q", scope, g, w)
		}
	}
}

// withScopes is the env's caller holding only scopes.
func withScopes(c workspace.Caller, scopes ...string) workspace.Caller {
	c.Scopes = scopes
	return c
}

// allBut returns every scope except the given one.
func allBut(scope string) []string {
	return slices.DeleteFunc(auth.AllScopes(), func(s string) bool { return s == scope })
}

// wantScopeError checks that err refuses for want of scope: a *ScopeError that is
// ErrForbidden (so -32002 over MCP, 403 over REST) and names the scope.
func wantScopeError(t *testing.T, what string, err error, scope string) {
	t.Helper()
	se := workspace.AsScopeError(err)
	switch {
	case se == nil:
		t.Fatalf("%s: got %v, want a scope refusal", what, err)
	case se.Scope != scope:
		t.Fatalf("%s: refused for scope %q, want %q", what, se.Scope, scope)
	case !errors.Is(err, workspace.ErrForbidden):
		t.Fatalf("%s: %v is not ErrForbidden", what, err)
	case !strings.Contains(err.Error(), "needs scope "+scope):
		t.Fatalf("%s: message %q does not name the scope", what, err)
	}
}

// TestCallScopes: every tool is refused to a token that lacks its scope (and holds all
// the others), before anything reaches the sandbox; each scope alone is enough for its
// tools.
func TestCallScopes(t *testing.T) {
	obs := &denials{}
	e := newTestEnvObserved(t, `{"allowedCommands": ["echo"]}`, obs)
	e.put("a.txt", "hello\n")
	ctx := context.Background()
	for _, tl := range workspace.NewCatalog(toolset.All()...).Tools() {
		t.Run("without "+tl.Scope+": "+tl.Name, func(t *testing.T) {
			_, err := e.svc.Call(ctx, withScopes(e.caller, allBut(tl.Scope)...), e.id, tl.Name, nil, workspace.CallOptions{})
			wantScopeError(t, tl.Name, err, tl.Scope)
		})
	}
	if n := obs.count("scope"); n != len(workspace.NewCatalog(toolset.All()...).Tools()) {
		t.Errorf("%d denials counted under rule scope, want one per refused call", n)
	}
	// A scope refusal comes before the session lookup: an unknown id is refused the same.
	_, err := e.svc.Call(ctx, withScopes(e.caller, auth.ScopeToolsRead), "s-nosuch", "runCommand", nil, workspace.CallOptions{})
	wantScopeError(t, "runCommand on an unknown session", err, auth.ScopeToolsExec)

	for _, tc := range []struct {
		scope, tool, args string
	}{
		{auth.ScopeToolsRead, "readFile", `{"path":"a.txt"}`},
		{auth.ScopeToolsRead, "searchFiles", `{"query":"hello"}`},
		{auth.ScopeToolsWrite, "writeFile", `{"path":"b.txt","contents":"x"}`},
		{auth.ScopeToolsWrite, "editFile", `{"path":"a.txt","oldText":"hello","newText":"bye"}`},
		{auth.ScopeToolsExec, "runCommand", `{"command":"echo","args":["hi"]}`},
		{auth.ScopeToolsExec, "listProcesses", `{}`},
	} {
		t.Run(tc.scope+" alone: "+tc.tool, func(t *testing.T) {
			res, err := e.svc.Call(ctx, withScopes(e.caller, tc.scope), e.id, tc.tool, []byte(tc.args), workspace.CallOptions{})
			if err != nil || res.IsError {
				t.Fatalf("%s with %s: %v %+v", tc.tool, tc.scope, err, res)
			}
		})
	}
	// Unknown scope names grant nothing.
	_, err = e.svc.Call(ctx, withScopes(e.caller, "tools:*", "admin"), e.id, "readFile", []byte(`{"path":"a.txt"}`), workspace.CallOptions{})
	wantScopeError(t, "readFile with unknown scopes", err, auth.ScopeToolsRead)
}

// TestSessionScopes: the session operations need sessions; the /mcp default session is
// created by a tool call with only the tool's scope, and a refused call creates none.
func TestSessionScopes(t *testing.T) {
	e := newTestEnv(t, "")
	ctx := context.Background()
	tools := withScopes(e.caller, auth.ToolScopes()...)
	ops := []struct {
		name string
		do   func(workspace.Caller) error
	}{
		{"create", func(c workspace.Caller) error {
			s, err := e.svc.CreateSession(ctx, c, workspace.CreateRequest{})
			if err == nil {
				_ = e.svc.DeleteSession(ctx, e.caller, s.ID)
			}
			return err
		}},
		{"list", func(c workspace.Caller) error { _, err := e.svc.ListSessions(ctx, c); return err }},
		{"get", func(c workspace.Caller) error { _, err := e.svc.GetSession(ctx, c, e.id); return err }},
		{"renew", func(c workspace.Caller) error { _, err := e.svc.RenewSession(ctx, c, e.id); return err }},
		{"delete", func(c workspace.Caller) error { return e.svc.DeleteSession(ctx, c, e.id) }}, // last: it succeeds
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			wantScopeError(t, op.name+" with tools scopes", op.do(tools), auth.ScopeSessions)
			wantScopeError(t, op.name+" with no scopes", op.do(workspace.Caller{Tenant: e.caller.Tenant, Subject: "bob"}), auth.ScopeSessions)
			if err := op.do(withScopes(e.caller, auth.ScopeSessions)); err != nil {
				t.Fatalf("%s with sessions: %v", op.name, err)
			}
		})
	}
	// The bound endpoint's check needs no scope.
	if _, err := e.svc.SessionFor(ctx, workspace.Caller{Tenant: e.caller.Tenant}, e.id); !errors.Is(err, workspace.ErrNotFound) {
		t.Errorf("SessionFor a deleted session: %v, want not found", err)
	}

	agent := withScopes(workspace.Caller{Tenant: e.caller.Tenant, Subject: "agent-7"}, auth.ScopeToolsRead)
	count := func() int {
		t.Helper()
		all, err := e.svc.ListSessions(ctx, e.caller)
		if err != nil {
			t.Fatal(err)
		}
		return len(all)
	}
	before := count()
	_, err := e.svc.CallDefault(ctx, agent, "writeFile", []byte(`{"path":"x","contents":"y"}`), workspace.CallOptions{})
	wantScopeError(t, "CallDefault writeFile with tools:read", err, auth.ScopeToolsWrite)
	if n := count(); n != before {
		t.Fatalf("a refused call created a default session: %d sessions, want %d", n, before)
	}
	res, err := e.svc.CallDefault(ctx, agent, "listFiles", nil, workspace.CallOptions{})
	if err != nil || res.IsError {
		t.Fatalf("CallDefault listFiles with tools:read: %v %+v", err, res)
	}
	if n := count(); n != before+1 {
		t.Fatalf("%d sessions after the first default call, want %d", n, before+1)
	}
	if _, err := e.svc.CallDefault(ctx, agent, "readFile", []byte(`{"path":"nope"}`), workspace.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != before+1 {
		t.Fatalf("the second default call made another session: %d", n)
	}
}

// TestArchiveScope: upload and download need archive and move the whole tree — denied
// paths, .git and the workspace policy file included — while the agent's tools stay
// under the path policy. Traversal is still refused.
func TestArchiveScope(t *testing.T) {
	e := newTestEnv(t, `{"deniedPaths": [".git/**", ".env", "secret/**"]}`)
	ctx := context.Background()
	archive := tarOf(t, map[string]string{
		"main.py":          "print('hi')\n",
		".env":             "TOKEN=1\n",
		".git/config":      "[core]\n\tbare = false\n",
		".git/HEAD":        "ref: refs/heads/main\n",
		"secret/key.pem":   "KEY\n",
		".cws-policy.json": `{"deniedPaths": ["main.py"]}`,
	})
	noArchive := withScopes(e.caller, allBut(auth.ScopeArchive)...)
	_, err := e.svc.Upload(ctx, noArchive, e.id, bytes.NewReader(archive))
	wantScopeError(t, "upload without archive", err, auth.ScopeArchive)
	var sink bytes.Buffer
	err = e.svc.Download(ctx, noArchive, e.id, &sink)
	wantScopeError(t, "download without archive", err, auth.ScopeArchive)
	if sink.Len() != 0 {
		t.Errorf("a refused download wrote %d bytes", sink.Len())
	}
	if e.exists(".env") {
		t.Fatal("a refused upload wrote files")
	}

	ci := withScopes(e.caller, auth.ScopeArchive)
	res, err := e.svc.Upload(ctx, ci, e.id, bytes.NewReader(archive))
	if err != nil {
		t.Fatalf("upload with archive: %v", err)
	}
	if res.Files != 6 {
		t.Errorf("uploaded %+v, want 6 files", res)
	}
	for rel, want := range map[string]string{".env": "TOKEN=1\n", ".git/config": "[core]\n\tbare = false\n", "secret/key.pem": "KEY\n"} {
		if got := e.get(rel); got != want {
			t.Errorf("%s = %q after upload, want %q", rel, got, want)
		}
	}
	var out bytes.Buffer
	if err := e.svc.Download(ctx, ci, e.id, &out); err != nil {
		t.Fatalf("download with archive: %v", err)
	}
	got := tarNames(t, out.Bytes())
	for _, name := range []string{".env", ".git/config", "secret/key.pem", ".cws-policy.json", "main.py"} {
		if !slices.Contains(got, name) {
			t.Errorf("download lacks %s: %q", name, got)
		}
	}

	// The agent's tools: the tenant's deniedPaths and the uploaded workspace policy.
	e.refused(workspace.ErrPolicy, "readFile", map[string]any{"path": ".env"})
	e.refused(workspace.ErrPolicy, "readFile", map[string]any{"path": ".git/config"})
	e.refused(workspace.ErrPolicy, "readFile", map[string]any{"path": "main.py"})

	// Traversal: an entry through a symlink that leads out is refused.
	_, err = e.svc.Upload(ctx, ci, e.id, bytes.NewReader(tarOf(t, nil, tar.Header{Name: "out", Typeflag: tar.TypeSymlink, Linkname: "/tmp"},
		tar.Header{Name: "out/cws-escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})))
	if !errors.Is(err, workspace.ErrTraversal) {
		t.Errorf("upload through a symlink out of the workspace: %v, want traversal", err)
	}
}

// TestDiffScope: the REST diff is a read, like gitDiff.
func TestDiffScope(t *testing.T) {
	e := newTestEnv(t, "")
	_, err := e.svc.Diff(context.Background(), withScopes(e.caller, auth.ScopeArchive, auth.ScopeSessions, auth.ScopeToolsWrite), e.id)
	wantScopeError(t, "diff", err, auth.ScopeToolsRead)
}

// tarOf builds a tar archive of files (sorted) followed by extra headers, whose
// regular files get Size bytes of "x".
func tarOf(t *testing.T, files map[string]string, extra ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[n]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, files[n]); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range extra {
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			_, _ = io.WriteString(tw, strings.Repeat("x", int(h.Size)))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tarNames(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, strings.TrimSuffix(h.Name, "/"))
	}
}

// denials is an Observer that counts policy denials by rule.
type denials struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *denials) PolicyDenial(rule string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[rule]++
}

func (d *denials) count(rule string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[rule]
}

func (*denials) ToolCall(string, string, time.Duration) {}
func (*denials) SessionCreated(time.Duration)           {}
func (*denials) SessionsActive(int)                     {}
func (*denials) Reaped(string)                          {}
func (*denials) ExecUnenforced()                        {}

// newTestEnvObserved is newTestEnv with an Observer.
func newTestEnvObserved(t *testing.T, tenantPolicyJSON string, obs workspace.Observer) *env {
	t.Helper()
	tp, err := policy.Parse([]byte(tenantPolicyJSON))
	if err != nil {
		t.Fatalf("tenant policy: %v", err)
	}
	local := sandboxtest.New(t)
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: local, Tenants: tenants{testTenant: tp},
		Observer: obs, DefaultImage: "test-image", PolicyTTL: time.Nanosecond})
	t.Cleanup(svc.Close)
	caller := workspace.Caller{Tenant: testTenant, Subject: "alice", Scopes: auth.AllScopes()}
	sess, err := svc.CreateSession(context.Background(), caller, workspace.CreateRequest{})
	if err != nil {
		t.Fatalf("create session: %v", err)
	}
	return &env{t: t, svc: svc, caller: caller, id: sess.ID, local: local, dir: local.Dir(sess.Sandbox)}
}
