package e2e_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
)

// leakSecret is the content of acme's denied .env in TestDeniedPathsDocker.
const leakSecret = "S3CRET-e2e"

// containerOf finds the sandbox of a session: its container, or its pod.
func containerOf(t *testing.T, session string) string {
	t.Helper()
	return boxOf(t, session)
}

// inContainer runs a command in the workspace container as the workspace user, the way a
// process an allowed command left behind would (ln is not one of acme's commands).
func inContainer(t *testing.T, id string, args ...string) string {
	t.Helper()
	out, err := boxExec(id, "/workspace", args...)
	if err != nil {
		t.Fatalf("exec %v in the sandbox: %v: %s", args, err, out)
	}
	return string(out)
}

// TestDeniedPathsDocker: through the real service and container, a denied file's
// contents never leave through git tools, the REST diff, hard links or swapped links.
func TestDeniedPathsDocker(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "leaker", "")
	r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions", tok, nil, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[sessionView](t, r).ID
	c := connect(t, srv.url+"/v1/sessions/"+id+"/mcp", tok, "")
	sh := func(script string) map[string]any {
		t.Helper()
		return c.call(t, "runCommand", map[string]any{"command": "sh", "args": []string{"-c", script}})
	}
	sh(`git init -q -b main && git config user.email t@x && git config user.name t &&
		echo "` + leakSecret + ` v1" > .env && echo "readme v1" > README.md && git add -A && git commit -qm root &&
		echo "` + leakSecret + ` v2" > .env && echo "readme v2" > README.md && git commit -qam second &&
		echo "` + leakSecret + ` v3" > .env && echo "readme v3" > README.md`)
	blob := strings.TrimSpace(c.call(t, "runCommand", map[string]any{"command": "git", "args": []string{"rev-parse", "HEAD:.env"}})["stdout"].(string))
	root := strings.TrimSpace(c.call(t, "runCommand", map[string]any{"command": "git", "args": []string{"rev-list", "--max-parents=0", "HEAD"}})["stdout"].(string))

	t.Run("git outputs", func(t *testing.T) {
		for _, tc := range []struct {
			tool string
			args map[string]any
		}{
			{"gitShow", map[string]any{}},
			{"gitShow", map[string]any{"ref": root}},
			{"gitDiff", map[string]any{}},
			{"gitDiff", map[string]any{"ref": "HEAD~1"}},
			{"gitDiff", map[string]any{"ref": root + "..HEAD"}},
		} {
			res, err := c.callRaw(tc.tool, tc.args, nil)
			if err != nil {
				t.Fatalf("%s %v: %v", tc.tool, tc.args, err)
			}
			if out := text(res); strings.Contains(out, leakSecret) || !strings.Contains(out, "readme") {
				t.Errorf("%s %v = %s", tc.tool, tc.args, out)
			}
		}
	})
	t.Run("REF:path and object ids", func(t *testing.T) {
		if we := rawToolCall(t, srv.url+"/v1/sessions/"+id+"/mcp", tok, "gitShow", map[string]any{"ref": "HEAD:.env"}); we == nil || we.Code != -32002 {
			t.Errorf("gitShow HEAD:.env: %+v, want -32002", we)
		}
		res, err := c.callRaw("gitShow", map[string]any{"ref": blob}, nil)
		if err != nil || !res.IsError || strings.Contains(text(res), leakSecret) {
			t.Errorf("gitShow <blob id>: %v %s", err, text(res))
		}
	})

	ctr := containerOf(t, id)
	inContainer(t, ctr, "ln", ".env", "notes.txt")
	t.Run("hard link", func(t *testing.T) {
		if we := rawToolCall(t, srv.url+"/v1/sessions/"+id+"/mcp", tok, "readFile", map[string]any{"path": "notes.txt"}); we == nil || we.Code != -32002 {
			t.Errorf("readFile of a hard link to .env: %+v, want -32002", we)
		}
		if we := rawToolCall(t, srv.url+"/v1/sessions/"+id+"/mcp", tok, "writeFile",
			map[string]any{"path": "notes.txt", "contents": "pwned", "options": map[string]any{"atomic": false}}); we == nil || we.Code != -32002 {
			t.Errorf("in-place writeFile of a hard link to .env: %+v, want -32002", we)
		}
		s := c.call(t, "searchFiles", map[string]any{"query": leakSecret, "options": map[string]any{"caseSensitive": true}})
		if s["count"] != float64(0) {
			t.Errorf("searchFiles found the denied content: %v", s)
		}
		d := do(t, nil, srv.url, http.MethodGet, "/v1/sessions/"+id+"/diff", tok, nil, nil)
		if d.status != http.StatusOK || strings.Contains(string(d.body), leakSecret) || !strings.Contains(string(d.body), "readme v3") {
			t.Errorf("REST diff: %d %s", d.status, d.body)
		}
		if got := inContainer(t, ctr, "cat", ".env"); got != leakSecret+" v3\n" {
			t.Errorf(".env = %q", got)
		}
	})

	t.Run("swapped links", func(t *testing.T) {
		// A loop in the container flips x between a file and a symlink to .env.
		flip := boxCommand(ctr, "/workspace", "sh", "-c",
			`end=$(($(date +%s)+20)); while [ $(date +%s) -lt $end ] && [ ! -e stop ]; do
				rm -f x; echo public > x; rm -f x; ln -s .env x; done`)
		if err := flip.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			inContainer(t, ctr, "touch", "stop")
			_ = flip.Wait()
			inContainer(t, ctr, "rm", "-f", "stop", "x")
		}()
		var wg sync.WaitGroup
		var mu sync.Mutex
		leaks, reads := 0, 0
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					res, err := c.callRaw("readFile", map[string]any{"path": "x"}, nil)
					mu.Lock()
					reads++
					if err == nil && strings.Contains(text(res), leakSecret) {
						leaks++
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if leaks > 0 {
			t.Errorf("readFile of a flipping link leaked .env %d times in %d", leaks, reads)
		}
	})
}
