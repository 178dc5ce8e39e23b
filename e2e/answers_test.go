package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
)

// TestNoAnswerTooBig drives the real `cws serve` on real Docker: a workspace of 250,000
// files with long names, listed and searched with default and large limits, over MCP and
// REST. Every answer that grows is cut to fit and says truncated, with how much it left
// out; a request that can never fit fails as too large naming the limit. Nothing says
// "retry": retrying would meet the same limit.
func TestNoAnswerTooBig(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv := startCWS(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { srv.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "big", "")
	r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions", tok, nil, nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[sessionView](t, r).ID
	c := connect(t, srv.url+"/v1/sessions/"+id+"/mcp", tok, "")

	// 50 directories of 5,000 empty files, each name 190 bytes: a listing of the first
	// 10,000 entries is about 4 MiB of JSON, four times what one agent answer may hold.
	const dirs, perDir = 50, 5000
	const total = dirs*perDir + dirs // the files and their directories
	prefix := strings.Repeat("0", 180)
	for d := range dirs { // the directories (mkdir is not an allowed command)
		c.call(t, "writeFile", map[string]any{"path": fmt.Sprintf("big/dir%d/%s-0.txt", d, prefix), "contents": ""})
	}
	script := `p=$(printf '%0180d' 0); d=0
while [ $d -lt ` + strconv.Itoa(dirs) + ` ]; do
  i=0
  while [ $i -lt ` + strconv.Itoa(perDir) + ` ]; do : > "big/dir$d/$p-$i.txt"; i=$((i+1)); done
  d=$((d+1))
done
echo done`
	run := c.call(t, "runCommand", map[string]any{"command": "sh", "args": []string{"-c", script}, "options": map[string]any{"timeout": 600}})
	if run["exitCode"] != float64(0) || !strings.Contains(fmt.Sprint(run["stdout"]), "done") {
		t.Fatalf("creating the files: %v", run)
	}

	// cut checks a truncated answer: at most max items, and count + omitted = all (or,
	// where counting stopped, at least 100,000 omitted).
	cut := func(t *testing.T, res map[string]any, items string, max, all int) {
		t.Helper()
		list, _ := res[items].([]any)
		count, _ := res["count"].(float64)
		omitted, _ := res["omitted"].(float64)
		if res["truncated"] != true || len(list) == 0 || len(list) > max || int(count) != len(list) {
			t.Fatalf("truncated = %v with %d %s (count %v), want a truncated answer of 1..%d", res["truncated"], len(list), items, res["count"], max)
		}
		if rest := all - int(count); all > 0 && int(omitted) != rest && (rest <= 100000 || omitted < 99000 || int(omitted) > rest) {
			t.Errorf("%v %s + %v omitted = %v, want all %d (or, past 100,000 left out, at least about 100,000 omitted)", count, items, omitted, count+omitted, all)
		}
		t.Logf("%v %s, %v omitted", count, items, omitted)
	}

	t.Run("listFiles recursive, default options", func(t *testing.T) {
		res := c.call(t, "listFiles", map[string]any{"path": "big", "options": map[string]any{"recursive": true}})
		cut(t, res, "entries", 10000, total)
	})
	t.Run("listFiles recursive, maxEntries 100000", func(t *testing.T) {
		res := c.call(t, "listFiles", map[string]any{"path": ".", "options": map[string]any{"recursive": true, "maxEntries": 100000}})
		cut(t, res, "entries", 100000, 0) // "." holds more than big/
	})
	t.Run("findFiles maxResults 100000", func(t *testing.T) {
		res := c.call(t, "findFiles", map[string]any{"pattern": "*.txt", "path": "big", "maxResults": 100000})
		cut(t, res, "files", 100000, dirs*perDir)
	})
	t.Run("findFiles default options", func(t *testing.T) {
		res := c.call(t, "findFiles", map[string]any{"pattern": "**/*-1*.txt"})
		cut(t, res, "files", 1000, 0)
	})
	t.Run("vscode find_files_by_name_substring", func(t *testing.T) {
		r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions/"+id+"/tools/find_files_by_name_substring", tok, []byte(`{"nameSubstring":"-4999.TXT"}`), nil)
		var body struct {
			Result []map[string]any `json:"result"`
		}
		if r.status != http.StatusOK || json.Unmarshal(r.body, &body) != nil {
			t.Fatalf("find_files_by_name_substring: %d %.300s", r.status, r.body)
		}
		if len(body.Result) != dirs {
			t.Errorf("found %d files named *-4999.txt, want %d (one per directory)", len(body.Result), dirs)
		}
	})
	t.Run("searchFiles maxResults 100000", func(t *testing.T) {
		line := strings.Repeat("needle ", 57) + "\n" // 400 bytes
		c.call(t, "writeFile", map[string]any{"path": "hay/lines.txt", "contents": strings.Repeat(line, 5000)})
		res := c.call(t, "searchFiles", map[string]any{"query": "needle", "options": map[string]any{"maxResults": 100000}})
		cut(t, res, "results", 100000, 5000)
	})
	t.Run("gitStatus of 250,000 untracked files", func(t *testing.T) {
		if r := c.call(t, "runCommand", map[string]any{"command": "git", "args": []string{"init", "-q"}}); r["exitCode"] != float64(0) {
			t.Fatalf("git init: %v", r)
		}
		res := c.call(t, "gitStatus", map[string]any{})
		files, _ := res["files"].([]any)
		if res["truncated"] != true || len(files) == 0 || len(files) >= dirs*perDir {
			t.Errorf("gitStatus: truncated %v with %d files, want a truncated, non-empty answer", res["truncated"], len(files))
		}
		t.Logf("gitStatus: %d files", len(files))
	})
	t.Run("REST listFiles", func(t *testing.T) {
		r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions/"+id+"/tools/listFiles", tok, []byte(`{"path":"big","options":{"recursive":true}}`), nil)
		if r.status != http.StatusOK {
			t.Fatalf("REST listFiles: %d %.300s", r.status, r.body)
		}
		var body struct {
			Result map[string]any `json:"result"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		cut(t, body.Result, "entries", 10000, total)
	})

	// A request that can never travel to the agent (over its 8 MiB frame body, under the
	// policy's 10 MiB file limit; MCP takes bodies up to 4 MiB, REST larger) is too
	// large, naming the limit: never "retry".
	big := strings.Repeat("x", 9<<20)
	t.Run("REST request over the frame limit", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{"path": "big.txt", "contents": big})
		r := do(t, nil, srv.url, http.MethodPost, "/v1/sessions/"+id+"/tools/writeFile", tok, body, nil)
		if r.status != http.StatusRequestEntityTooLarge || r.header.Get("Retry-After") != "" || !strings.Contains(string(r.body), "8388608") {
			t.Errorf("REST writeFile of 9 MiB: %d %s (Retry-After %q), want 413 naming the limit", r.status, r.body, r.header.Get("Retry-After"))
		}
	})
	// The session is fine afterwards.
	c.call(t, "readFile", map[string]any{"path": "big/dir0/" + prefix + "-0.txt"})
}
