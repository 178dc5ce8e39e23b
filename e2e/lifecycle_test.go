package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox"
)

// lifecycleArgs are the flags of a cws whose sessions keep their disk when suspended:
// on Kubernetes a claim of the local cluster's storage class (an emptyDir would archive).
func lifecycleArgs(store string, extra ...string) []string {
	args := []string{"--snapshot-store", store}
	if onKube() {
		args = append(args, "--kube-storage-class", "cws-local")
	}
	return append(args, extra...)
}

// boxRunning reports whether session id's sandbox runs: a running container, or a pod.
func boxRunning(t *testing.T, id string) bool {
	t.Helper()
	if onKube() {
		out, err := kubectl("get", "pods", "-n", kubeNamespace, "-o",
			`jsonpath={range .items[*]}{.metadata.annotations.cws\.session}{"\n"}{end}`)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains("\n"+string(out), "\n"+id+"\n")
	}
	out, err := exec.Command("docker", "ps", "-q", "--filter", "label="+sandbox.LabelSession+"="+id).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out)) != ""
}

// volumeExists reports whether session id's workspace volume (claim) exists.
func volumeExists(t *testing.T, id string) bool {
	t.Helper()
	if onKube() {
		_, err := kubectl("get", "pvc", "-n", kubeNamespace, "cws-ws-"+id)
		return err == nil
	}
	out, err := exec.Command("docker", "volume", "ls", "-q", "--filter", "label="+sandbox.LabelSession+"="+id).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out)) != ""
}

type lifeView struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

func (p *cwsProc) post(t *testing.T, tok, path string, body any) rest {
	t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	return do(t, nil, p.url, http.MethodPost, path, tok, b, map[string]string{"Content-Type": "application/json"})
}

// restRead reads path through the REST tool endpoint.
func (p *cwsProc) restRead(t *testing.T, tok, id, path string) (int, string) {
	t.Helper()
	r := p.post(t, tok, "/v1/sessions/"+id+"/tools/readFile", map[string]any{"path": path})
	var v struct{ Result struct{ Content string } }
	_ = json.Unmarshal(r.body, &v)
	return r.status, v.Result.Content
}

// TestSuspendWakeE2E: an explicit suspend stops the sandbox and keeps its disk; a call
// over MCP or REST wakes it and answers as if nothing happened (50 at once: one wake,
// 50 answers); background processes are reported ended by the suspend; resume and
// suspend are idempotent; another tenant's or an unknown id is 404.
func TestSuspendWakeE2E(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), lifecycleArgs("file://"+t.TempDir())...)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantOpen) })
	tok := fx.token(t, tenantOpen, "life", "")
	r := p.post(t, tok, "/v1/sessions", map[string]any{"labels": map[string]string{"app": "life"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "notes.txt", "contents": "before the nap"})
	proc := c.call(t, "startProcess", map[string]any{"command": "sh", "args": []string{"-c", "echo started; sleep 600"}})
	procID := fmt.Sprint(proc["id"])
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if o := c.call(t, "readProcessOutput", map[string]any{"id": procID}); o["stdout"] == "started\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the background process printed nothing")
		}
	}

	for i := range 2 { // idempotent
		r := p.post(t, tok, "/v1/sessions/"+id+"/suspend", nil)
		if r.status != http.StatusOK || decode[lifeView](t, r).State != "suspended" {
			t.Fatalf("suspend #%d: %d %s", i+1, r.status, r.body)
		}
	}
	if boxRunning(t, id) {
		t.Error("a suspended session's sandbox still runs")
	}
	if !volumeExists(t, id) {
		t.Error("a suspended session's volume is gone")
	}
	if g := decode[lifeView](t, do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, tok, nil, nil)); g.State != "suspended" {
		t.Errorf("GET of a suspended session: state %q", g.State)
	}

	// MCP wakes it.
	if got := c.call(t, "readFile", map[string]any{"path": "notes.txt"}); got["content"] != "before the nap" {
		t.Errorf("readFile over MCP after the suspend = %v", got)
	}
	if g := decode[lifeView](t, do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, tok, nil, nil)); g.State != "ready" || !boxRunning(t, id) {
		t.Errorf("after the call: state %q, running %v", g.State, boxRunning(t, id))
	}
	out := c.call(t, "readProcessOutput", map[string]any{"id": procID})
	if pr, _ := out["process"].(map[string]any); out["stdout"] != "started\n" || pr["running"] != false || pr["endReason"] != "suspended" {
		t.Errorf("readProcessOutput of a process the suspend ended = %v", out)
	}
	if l := c.call(t, "listProcesses", map[string]any{}); !strings.Contains(asText(l), `"endReason":"suspended"`) {
		t.Errorf("listProcesses after the wake = %v", l)
	}

	// REST wakes it, 50 calls at once: all answer.
	if r := p.post(t, tok, "/v1/sessions/"+id+"/suspend", nil); r.status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	bad := map[string]int{}
	for range 50 {
		wg.Go(func() {
			status, content := p.restRead(t, tok, id, "notes.txt")
			if status != http.StatusOK || content != "before the nap" {
				mu.Lock()
				bad[fmt.Sprintf("%d %q", status, content)]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("50 REST calls on a suspended session: failures %v", bad)
	}
	// The log comes through a pipe: give the second wake's line a moment to arrive.
	wakes := func() int { return strings.Count(p.logs.String(), `msg="session woke"`) }
	for deadline := time.Now().Add(5 * time.Second); wakes() < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	if n := wakes(); n != 2 {
		t.Errorf("the log says %d wakes, want 2 (one per suspend)", n)
	}
	if n := strings.Count(p.logs.String(), "starting it again"); n != 0 {
		t.Errorf("calls during the wake started the sandbox themselves %d times; they should wait for the wake's start", n)
	}
	if r := p.post(t, tok, "/v1/sessions/"+id+"/resume", nil); r.status != http.StatusOK || decode[lifeView](t, r).State != "ready" {
		t.Errorf("resume of a ready session: %d %s", r.status, r.body)
	}

	// Bad input.
	other := fx.token(t, tenantAcme, "eve", "")
	for _, tc := range []struct{ tok, path string }{
		{other, "/v1/sessions/" + id + "/suspend"}, {other, "/v1/sessions/" + id + "/resume"},
		{tok, "/v1/sessions/s-nosuchsession0000000/suspend"}, {tok, "/v1/sessions/s-nosuchsession0000000/resume"},
	} {
		if r := p.post(t, tc.tok, tc.path, nil); r.status != http.StatusNotFound {
			t.Errorf("POST %s: %d %s, want 404", tc.path, r.status, r.body)
		}
	}
	noScope, err := fx.tenants.Get(tenantOpen).Mint("life", time.Hour, "", []string{"tools:read"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if r := p.post(t, noScope, "/v1/sessions/"+id+"/suspend", nil); r.status != http.StatusForbidden {
		t.Errorf("suspend without the sessions scope: %d %s, want 403", r.status, r.body)
	}

	// Deleting a suspended session removes its volume.
	if r := p.post(t, tok, "/v1/sessions/"+id+"/suspend", nil); r.status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	if d := do(t, nil, p.url, http.MethodDelete, "/v1/sessions/"+id, tok, nil, nil); d.status != http.StatusNoContent {
		t.Fatalf("delete a suspended session: %d %s", d.status, d.body)
	}
	for deadline := time.Now().Add(30 * time.Second); volumeExists(t, id); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("a deleted suspended session's volume is still there")
			break
		}
	}
}

// TestIdleArchiveE2E: a session idle past --suspend-after is suspended, then archived
// past --archive-after (no sandbox, no volume: only the snapshot store, here a real
// S3 server), and the next call wakes it with its files, .git and denied paths included.
func TestIdleArchiveE2E(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	srv, bucket := testenv.S3(t)
	var env []string
	for k, v := range srv.Env() {
		env = append(env, k+"="+v)
	}
	p := startCWSEnv(t, fx, testenv.Redis(t), freeAddr(t), env,
		lifecycleArgs("s3://"+bucket+"/cws", "--suspend-after", "3s", "--archive-after", "3s", "--reap-every", "1s")...)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantVSCode) })
	tok := fx.token(t, tenantVSCode, "idle", "")
	r := p.post(t, tok, "/v1/sessions", nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "src/app.py", "contents": "print('hi')\n"})
	c.call(t, "runCommand", map[string]any{"command": "git", "args": []string{"init", "-q"}})
	c.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"-c",
		"import os; os.makedirs('secret'); open('secret/key', 'w').write('k\\n'); open('.env', 'w').write('SECRET=1\\n')"}})

	waitState := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			g := decode[lifeView](t, do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, tok, nil, nil))
			if g.State == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the session is %q after 90 s, want %q", g.State, want)
			}
		}
	}
	waitState("suspended")
	waitState("archived")
	for deadline := time.Now().Add(30 * time.Second); boxRunning(t, id); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) { // a pod takes its grace period to go
			t.Error("an archived session's sandbox still runs")
			break
		}
	}
	for deadline := time.Now().Add(30 * time.Second); volumeExists(t, id); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Error("an archived session's volume is still there")
			break
		}
	}
	if got := c.call(t, "readFile", map[string]any{"path": "src/app.py"}); got["content"] != "print('hi')\n" {
		t.Errorf("readFile after the archive = %v", got)
	}
	run := c.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"-c",
		"import os; print(open('.env').read() + open('secret/key').read() + str(os.path.isdir('.git')), end='')"}})
	if run["stdout"] != "SECRET=1\nk\nTrue" {
		t.Errorf("denied paths and .git after the archive: %v", run)
	}
}

// TestSnapshotsForkE2E: snapshots create/list/get/delete, a session made from one
// (files, image, labels), forks with independence, and every bad input named.
func TestSnapshotsForkE2E(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), lifecycleArgs("file://"+t.TempDir())...)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantVSCode) })
	tok := fx.token(t, tenantVSCode, "snap", "")
	r := p.post(t, tok, "/v1/sessions", map[string]any{"labels": map[string]string{"team": "blue"}})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	src := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+src+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "app.txt", "contents": "v1"})
	c.call(t, "runCommand", map[string]any{"command": "sh", "args": []string{"-c", "echo SECRET=1 > .env"}})

	r = p.post(t, tok, "/v1/sessions/"+src+"/snapshots", map[string]any{"name": "before-refactor"})
	if r.status != http.StatusCreated {
		t.Fatalf("snapshot: %d %s", r.status, r.body)
	}
	snap := decode[map[string]any](t, r)
	snapID := fmt.Sprint(snap["id"])
	if snap["session"] != src || snap["name"] != "before-refactor" || snap["files"] != 2.0 || snap["bytes"] == 0.0 || snap["createdAt"] == nil {
		t.Errorf("snapshot = %v", snap)
	}
	c.call(t, "writeFile", map[string]any{"path": "app.txt", "contents": "v2"})
	list := decode[struct{ Snapshots []map[string]any }](t, do(t, nil, p.url, http.MethodGet, "/v1/snapshots", tok, nil, nil))
	if len(list.Snapshots) != 1 || list.Snapshots[0]["id"] != snapID {
		t.Errorf("GET /v1/snapshots = %v", list)
	}
	if g := do(t, nil, p.url, http.MethodGet, "/v1/snapshots/"+snapID, tok, nil, nil); g.status != http.StatusOK {
		t.Errorf("GET the snapshot: %d %s", g.status, g.body)
	}

	r = p.post(t, tok, "/v1/sessions", map[string]any{"snapshot": snapID})
	if r.status != http.StatusCreated {
		t.Fatalf("create from the snapshot: %d %s", r.status, r.body)
	}
	from := decode[map[string]any](t, r)
	if l, _ := from["labels"].(map[string]any); l["team"] != "blue" {
		t.Errorf("the session from the snapshot has labels %v", from["labels"])
	}
	fc := connect(t, p.url+"/v1/sessions/"+fmt.Sprint(from["id"])+"/mcp", tok, "")
	if run := fc.call(t, "runCommand", map[string]any{"command": "cat", "args": []string{"app.txt", ".env"}}); run["stdout"] != "v1SECRET=1\n" {
		t.Errorf("the session from the snapshot holds %v", run)
	}

	// Bad snapshot input.
	other := fx.token(t, tenantAcme, "eve", "")
	if g := do(t, nil, p.url, http.MethodGet, "/v1/snapshots/"+snapID, other, nil, nil); g.status != http.StatusNotFound {
		t.Errorf("another tenant's GET of the snapshot: %d, want 404", g.status)
	}
	if r := p.post(t, other, "/v1/sessions", map[string]any{"snapshot": snapID}); r.status != http.StatusNotFound {
		t.Errorf("another tenant's create from the snapshot: %d, want 404", r.status)
	}
	for _, bad := range []string{"..%2F..%2Fetc", "snap-" + strings.Repeat("a", 10_000)} {
		if g := do(t, nil, p.url, http.MethodGet, "/v1/snapshots/"+bad, tok, nil, nil); g.status != http.StatusBadRequest {
			t.Errorf("GET /v1/snapshots/%.30s: %d, want 400", bad, g.status)
		}
	}
	if d := do(t, nil, p.url, http.MethodDelete, "/v1/snapshots/"+snapID, tok, nil, nil); d.status != http.StatusNoContent {
		t.Errorf("DELETE the snapshot: %d %s", d.status, d.body)
	}
	if r := p.post(t, tok, "/v1/sessions", map[string]any{"snapshot": snapID}); r.status != http.StatusNotFound {
		t.Errorf("create from a deleted snapshot: %d %s, want 404", r.status, r.body)
	}

	// Fork.
	for _, bad := range []string{`{"count": 0}`, `{"count": 17}`, `{"count": "two"}`, `{"count": 1.5}`} {
		r := do(t, nil, p.url, http.MethodPost, "/v1/sessions/"+src+"/fork", tok, []byte(bad), map[string]string{"Content-Type": "application/json"})
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "count") {
			t.Errorf("fork %s: %d %s, want 400 naming count", bad, r.status, r.body)
		}
	}
	r = p.post(t, tok, "/v1/sessions/"+src+"/fork", map[string]any{"count": 2})
	if r.status != http.StatusCreated {
		t.Fatalf("fork: %d %s", r.status, r.body)
	}
	forks := decode[struct {
		Sessions []lifeView
		Errors   []any
	}](t, r)
	if len(forks.Sessions) != 2 || len(forks.Errors) != 0 {
		t.Fatalf("fork of 2 = %+v", forks)
	}
	for i, f := range forks.Sessions {
		fc := connect(t, p.url+"/v1/sessions/"+f.ID+"/mcp", tok, "")
		if got := fc.call(t, "readFile", map[string]any{"path": "app.txt"}); got["content"] != "v2" {
			t.Errorf("fork %d reads app.txt %v, want the source's v2", i, got["content"])
		}
		fc.call(t, "writeFile", map[string]any{"path": "mine.txt", "contents": f.ID})
	}
	for i, f := range forks.Sessions {
		fc := connect(t, p.url+"/v1/sessions/"+f.ID+"/mcp", tok, "")
		if got := fc.call(t, "readFile", map[string]any{"path": "mine.txt"}); got["content"] != f.ID {
			t.Errorf("fork %d sees %v, want only its own write", i, got["content"])
		}
	}
	if res, err := c.callRaw("readFile", map[string]any{"path": "mine.txt"}, nil); err == nil && !res.IsError {
		t.Error("the source sees a fork's write")
	}
}

// TestLifecycleFaultsE2E: cws killed (SIGKILL) with a session suspended and another
// archived, and the store flushed: the next cws finds each in exactly its state (the
// suspended one from its stopped container or marked claim, the archived one from the
// snapshot store) with its files whole, and a call wakes each.
func TestLifecycleFaultsE2E(t *testing.T) {
	requireRealDeps(t)
	fx := newFixture(t)
	redisURL := testenv.Redis(t)
	store := "file://" + t.TempDir()
	tok := fx.token(t, tenantOpen, "faults", "")
	mk := func(p *cwsProc, content string) string {
		t.Helper()
		r := p.post(t, tok, "/v1/sessions", nil)
		if r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		id := decode[lifeView](t, r).ID
		connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "").call(t, "writeFile", map[string]any{"path": "f.txt", "contents": content})
		return id
	}
	state := func(p *cwsProc, id string) string {
		r := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, tok, nil, nil)
		if r.status != http.StatusOK {
			return fmt.Sprint(r.status)
		}
		return decode[lifeView](t, r).State
	}
	waitFor := func(p *cwsProc, id, want string) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); state(p, id) != want; time.Sleep(250 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("session %s is %s after 90 s, want %s", id, state(p, id), want)
			}
		}
	}

	// One cws archives B, and is killed.
	p1 := startCWSWith(t, fx, redisURL, freeAddr(t), lifecycleArgs(store, "--archive-after", "1s", "--reap-every", "1s")...)
	b := mk(p1, "archived work")
	if r := p1.post(t, tok, "/v1/sessions/"+b+"/suspend", nil); r.status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	waitFor(p1, b, "archived")
	p1.kill()

	// Another suspends A, and is killed; then the store loses everything.
	p2 := startCWSWith(t, fx, redisURL, freeAddr(t), lifecycleArgs(store, "--archive-after", "0")...)
	a := mk(p2, "suspended work")
	if r := p2.post(t, tok, "/v1/sessions/"+a+"/suspend", nil); r.status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.status, r.body)
	}
	p2.kill()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	if err := rc.FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}

	// A third cws adopts both, each in its state, and a call wakes each whole.
	p3 := startCWSWith(t, fx, redisURL, freeAddr(t), lifecycleArgs(store, "--archive-after", "0", "--reap-every", "1s")...)
	t.Cleanup(func() { p3.deleteAll(t, fx, tenantOpen) })
	waitFor(p3, a, "suspended")
	waitFor(p3, b, "archived")
	if boxRunning(t, a) {
		t.Error("the adopted suspended session's sandbox runs before any call")
	}
	for id, want := range map[string]string{a: "suspended work", b: "archived work"} {
		if status, got := p3.restRead(t, tok, id, "f.txt"); status != http.StatusOK || got != want {
			t.Errorf("readFile on %s after the flush: %d %q, want %q", id, status, got, want)
		}
		if s := state(p3, id); s != "ready" {
			t.Errorf("session %s after the call: %s, want ready", id, s)
		}
	}
}

// TestSuspendEphemeralKube: on Kubernetes without a storage class a workspace is an
// emptyDir, which dies with its pod: a suspend archives it instead, and a call wakes
// it whole.
func TestSuspendEphemeralKube(t *testing.T) {
	if !onKube() {
		t.Skip("kubernetes driver only: Docker's volumes always outlive their container")
	}
	requireRealDeps(t)
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), "--snapshot-store", "file://"+t.TempDir())
	t.Cleanup(func() { p.deleteAll(t, fx, tenantOpen) })
	tok := fx.token(t, tenantOpen, "ephemeral", "")
	r := p.post(t, tok, "/v1/sessions", nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "f.txt", "contents": "kept in the store"})
	r = p.post(t, tok, "/v1/sessions/"+id+"/suspend", nil)
	if r.status != http.StatusOK || decode[lifeView](t, r).State != "archived" {
		t.Fatalf("suspend of an emptyDir session: %d %s, want archived", r.status, r.body)
	}
	if got := c.call(t, "readFile", map[string]any{"path": "f.txt"}); got["content"] != "kept in the store" {
		t.Errorf("readFile after the archive = %v", got)
	}
}
