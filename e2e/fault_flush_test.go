package e2e_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox"
)

// TestFaultFlushAll empties Redis (FLUSHALL) under live sessions, with two replicas
// sharing Redis and the engine: the default session's token reaches the same session
// and files, a session reached by id does too, each session is adopted exactly once
// across the replicas, and a session whose deletion was cut short after its container
// was marked never comes back.
func TestFaultFlushAll(t *testing.T) {
	dockerOnly(t, "reads Docker's containers behind cws")
	requireRealDeps(t)
	fx := newFixture(t)
	redisURL := testenv.Redis(t)
	a := startCWSWith(t, fx, redisURL, freeAddr(t), "--reap-every", "1s")
	b := startCWSWith(t, fx, redisURL, freeAddr(t), "--reap-every", "1s")
	t.Cleanup(func() { a.deleteAll(t, fx, tenantAcme) })

	alice := fx.token(t, tenantAcme, "alice", "")
	ca := connect(t, a.url+"/mcp", alice, "")
	ca.call(t, "writeFile", map[string]any{"path": "notes.txt", "contents": "alice's work\n"})
	aliceID := onlySession(t, a, alice, "alice").ID

	bob := fx.token(t, tenantAcme, "bob", "")
	r := do(t, nil, a.url, http.MethodPost, "/v1/sessions", bob, []byte(`{}`), nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create bob's session: %d %s", r.status, r.body)
	}
	bobID := decode[sessionView](t, r).ID
	cb := connect(t, a.url+"/v1/sessions/"+bobID+"/mcp", bob, "")
	cb.call(t, "writeFile", map[string]any{"path": "bob.txt", "contents": "bob's work\n"})

	// carol's deletion is cut short right after the container was marked: the mark
	// alone must keep it from coming back.
	carol := fx.token(t, tenantAcme, "carol", "")
	cc := connect(t, a.url+"/mcp", carol, "")
	cc.call(t, "writeFile", map[string]any{"path": "gone.txt", "contents": "deleted\n"})
	carolID := onlySession(t, a, carol, "carol").ID
	cli := engine(t)
	ctx := context.Background()
	carolBox := containerOf(t, carolID)
	if err := cli.ContainerRename(ctx, carolBox, "cws-deleted-"+carolBox[:12]); err != nil {
		t.Fatal(err)
	}

	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// The very next calls, before or after a reconcile pass: same sessions, same files.
	if got := ca.call(t, "readFile", map[string]any{"path": "notes.txt"}); got["content"] != "alice's work\n" {
		t.Errorf("alice after FLUSHALL: readFile = %v", got)
	}
	if id := onlySession(t, b, alice, "alice").ID; id != aliceID {
		t.Errorf("alice's default session after FLUSHALL is %s, want %s", id, aliceID)
	}
	if got := cb.call(t, "readFile", map[string]any{"path": "bob.txt"}); got["content"] != "bob's work\n" {
		t.Errorf("bob after FLUSHALL: readFile = %v", got)
	}

	// Let both replicas reconcile a few times.
	waitFor(t, 60*time.Second, "carol's marked container to be removed", func() bool {
		cs, _ := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+carolID))})
		return len(cs) == 0
	})
	time.Sleep(3 * time.Second)
	if ids := sessionIDs(t, a, alice); len(ids) != 2 || !ids[aliceID] || !ids[bobID] {
		t.Errorf("acme's sessions after FLUSHALL: %v, want exactly %s and %s", ids, aliceID, bobID)
	}
	if got := ca.call(t, "readFile", map[string]any{"path": "notes.txt"}); got["content"] != "alice's work\n" {
		t.Errorf("alice after reconcile: readFile = %v", got)
	}
	// carol's token gets a new, empty session, never the deleted one.
	if got, err := cc.callRaw("readFile", map[string]any{"path": "gone.txt"}, nil); err != nil || !got.IsError {
		t.Errorf("carol's deleted file is readable again: %v %v", text(got), err)
	}
	if id := onlySession(t, a, carol, "carol").ID; id == carolID {
		t.Errorf("carol's deleted session %s came back", carolID)
	}
	adopted := 0.0
	for _, p := range []*cwsProc{a, b} {
		n, _ := metricValue(p.metrics(t), "cws_sessions_adopted_total", nil)
		adopted += n
	}
	if adopted != 2 {
		t.Errorf("cws_sessions_adopted_total over both replicas = %v, want 2 (alice's and bob's, once each)", adopted)
	}
}

// onlySession returns the one session the token's subject has, listing through p.
func onlySession(t testing.TB, p *cwsProc, tok, sub string) sessionView {
	t.Helper()
	r := do(t, nil, p.url, http.MethodGet, "/v1/sessions", tok, nil, nil)
	var mine []sessionView
	for _, s := range decode[struct{ Sessions []sessionView }](t, r).Sessions {
		if s.Sub == sub {
			mine = append(mine, s)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("sessions of %s: %s, want exactly one", sub, r.body)
	}
	return mine[0]
}

// sessionIDs lists the ids of the token's tenant's sessions.
func sessionIDs(t testing.TB, p *cwsProc, tok string) map[string]bool {
	t.Helper()
	r := do(t, nil, p.url, http.MethodGet, "/v1/sessions", tok, nil, nil)
	ids := map[string]bool{}
	for _, s := range decode[struct{ Sessions []sessionView }](t, r).Sessions {
		ids[s.ID] = true
	}
	return ids
}

// waitFor polls cond until it holds; limit is a hang guard, not a timing assertion.
func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %s", what, limit)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
