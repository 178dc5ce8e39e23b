package e2e_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/testenv"
)

// tenantCI runs the README's CI flow under the README's own example policy.
var tenantCI = "ci-" + runID

// TestCIFlow is the README's CI job, end to end on real Docker and Redis, with the
// README's example policy (which denies .git/** and .env): the platform's token (no
// scope claim, so the tenant's default: every scope) creates a session and uploads a
// repository with its .git; the agent's token (tools scopes only, bound to the session)
// works over MCP under the path policy and is refused the archive and the session
// endpoints; the platform collects the diff and the whole tree and deletes the session.
// Tokens are minted and the platform's steps run with the cws CLI itself.
func TestCIFlow(t *testing.T) {
	requireRealDeps(t)
	if _, err := exec.LookPath("git"); err != nil {
		testenv.RequireCI(t, "git", err)
	}
	fx := ciFixture(t, readmePolicy(t))
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantCI) })

	cws := func(token string, args ...string) string {
		t.Helper()
		cmd := exec.Command(cwsBinary, args...)
		cmd.Env = append(os.Environ(), "CWS_SERVER="+srv.url, "CWS_TOKEN="+token, "CWS_TENANTS="+fx.path)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("cws %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return strings.TrimSpace(stdout.String())
	}
	ciTok := cws("", "token", "--tenant", tenantCI, "--sub", "ci-job-42")
	id := cws(ciTok, "sessions", "create")
	if !strings.HasPrefix(id, "s-") {
		t.Fatalf("sessions create printed %q, want an id", id)
	}

	repo := gitRepo(t, map[string]string{
		"app.py":    "print('hello')\n",
		"README.md": "# demo\n",
		".env":      "API_KEY=hunter2\n",
	})
	if out := cws(ciTok, "upload", id, repo); !strings.HasPrefix(out, "uploaded ") {
		t.Fatalf("upload: %s", out)
	}

	agentTok := cws("", "token", "--tenant", tenantCI, "--sub", "agent-7", "--session", id,
		"--scope", "tools:read tools:write", "--scope", "tools:exec")
	agent := connect(t, srv.url+"/mcp", agentTok, "")

	t.Run("the agent works under the path policy", func(t *testing.T) {
		if r := agent.call(t, "readFile", map[string]any{"path": "app.py"}); r["content"] != "print('hello')\n" {
			t.Errorf("readFile app.py = %v", r)
		}
		for _, p := range []string{".env", ".git/config", ".git/HEAD"} {
			we := rawToolCall(t, srv.url+"/mcp", agentTok, "readFile", map[string]any{"path": p})
			if we == nil || we.Code != -32002 || !strings.Contains(string(we.Data), `"rule":"deniedPaths`) {
				t.Errorf("readFile %s: %+v (data %s), want -32002 by deniedPaths", p, we, dataOf(we))
			}
		}
		we := rawToolCall(t, srv.url+"/mcp", agentTok, "writeFile", map[string]any{"path": ".git/hooks/pre-commit", "contents": "#!/bin/sh\n"})
		if we == nil || we.Code != -32002 {
			t.Errorf("writeFile .git/hooks/pre-commit: %+v, want -32002", we)
		}
		agent.call(t, "editFile", map[string]any{"path": "app.py", "oldText": "hello", "newText": "bye"})
		// The README's policy wants runCommand confirmed.
		if we := rawToolCall(t, srv.url+"/mcp", agentTok, "runCommand", map[string]any{"command": "python3", "args": []string{"app.py"}}); we == nil || we.Code != -32005 {
			t.Errorf("unconfirmed runCommand: %+v, want -32005", we)
		}
		r := agent.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"app.py"}, "options": map[string]any{"confirmed": true}})
		if r["stdout"] != "bye\n" || r["exitCode"] != float64(0) {
			t.Errorf("runCommand python3 app.py = %v", r)
		}
		st := agent.call(t, "gitStatus", map[string]any{})
		if b, _ := json.Marshal(st); !strings.Contains(string(b), "app.py") {
			t.Errorf("gitStatus = %s, want app.py changed", b)
		}
		tools, err := agent.ListTools(t.Context(), nil)
		if err != nil || len(tools.Tools) != 21 {
			t.Errorf("tools/list with every tools scope: %d tools, %v", len(tools.Tools), err)
		}
	})

	t.Run("the agent's token is refused the archive and the sessions", func(t *testing.T) {
		for _, p := range []struct {
			method, path, scope string
			body                []byte
		}{
			{http.MethodGet, "/v1/sessions/" + id + "/archive", auth.ScopeArchive, nil},
			{http.MethodPut, "/v1/sessions/" + id + "/archive", auth.ScopeArchive, make([]byte, 1024)},
			{http.MethodPost, "/v1/sessions", auth.ScopeSessions, nil},
			{http.MethodGet, "/v1/sessions", auth.ScopeSessions, nil},
			{http.MethodDelete, "/v1/sessions/" + id, auth.ScopeSessions, nil},
		} {
			r := do(t, nil, srv.url, p.method, p.path, agentTok, p.body, nil)
			e := decode[struct {
				Error struct{ Code, Scope, Rule string }
			}](t, r)
			if r.status != http.StatusForbidden || e.Error.Code != "forbidden" || e.Error.Scope != p.scope || e.Error.Rule != "scope" {
				t.Errorf("%s %s with the agent's token: %d %s, want 403 naming %s", p.method, p.path, r.status, r.body, p.scope)
			}
		}
	})

	t.Run("the platform collects the diff and the whole tree", func(t *testing.T) {
		d := cws(ciTok, "diff", id)
		if !strings.Contains(d, "-print('hello')") || !strings.Contains(d, "+print('bye')") || strings.Contains(d, "hunter2") {
			t.Errorf("diff:\n%s", d)
		}
		out := filepath.Join(t.TempDir(), "ws.tar")
		cws(ciTok, "download", id, "-O", out)
		files := untar(t, out)
		for name, want := range map[string]string{
			"app.py": "print('bye')\n", ".env": "API_KEY=hunter2\n", ".git/HEAD": "ref: refs/heads/main\n",
		} {
			if got, ok := files[name]; !ok || got != want {
				t.Errorf("download: %s = %q (present %v), want %q", name, got, ok, want)
			}
		}
		if _, ok := files[".git/config"]; !ok {
			t.Errorf("download lacks .git/config")
		}
		if !slices.ContainsFunc(mapKeys(files), func(n string) bool { return strings.HasPrefix(n, ".git/objects/") }) {
			t.Errorf("download lacks .git/objects")
		}
	})

	cws(ciTok, "sessions", "delete", id)
	if r := do(t, nil, srv.url, http.MethodGet, "/v1/sessions/"+id, ciTok, nil, nil); r.status != http.StatusNotFound {
		t.Errorf("after delete: %d %s", r.status, r.body)
	}
}

// readmePolicy returns the example .cws-policy.json of README.md, byte for byte, so
// that this test keeps the README true.
func readmePolicy(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "### Policy (`.cws-policy.json`)")
	if ok {
		_, rest, ok = strings.Cut(rest, "```json\n")
	}
	pol, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 || !json.Valid([]byte(pol)) {
		t.Fatalf("README.md has no JSON example policy under ### Policy")
	}
	return pol
}

// ciFixture is a tenants file with one HS256 tenant, tenantCI, whose policy is pol.
func ciFixture(t *testing.T, pol string) *fixture {
	t.Helper()
	dir := t.TempDir()
	secret := randomHex(32)
	fx := &fixture{path: filepath.Join(dir, "tenants.yaml"), secrets: map[string][]byte{tenantCI: []byte(secret)},
		kids: map[string]string{tenantCI: tenantCI + "-k1"}}
	if err := os.WriteFile(filepath.Join(dir, "ci.cws-policy.json"), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf("tenants:\n  - id: %s\n    issuer: ci-platform\n    keys:\n      - {kid: %s, alg: HS256, secret: %q}\n    policy: ci.cws-policy.json\n",
		tenantCI, fx.kids[tenantCI], secret)
	if err := os.WriteFile(fx.path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if fx.tenants, err = auth.LoadTenants(fx.path); err != nil {
		t.Fatal(err)
	}
	return fx
}

// gitRepo makes a git repository of files with one commit on main.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"add", "-A"},
		{"-c", "user.name=ci", "-c", "user.email=ci@example.com", "-c", "commit.gpgsign=false", "commit", "-q", "-m", "baseline"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return dir
}

// untar reads a tar file's regular files (name → content) and directories (name → "").
func untar(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(tr)
		out[strings.TrimPrefix(strings.TrimSuffix(h.Name, "/"), "./")] = string(b)
	}
}

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func dataOf(we *wireError) string {
	if we == nil {
		return ""
	}
	return string(we.Data)
}
