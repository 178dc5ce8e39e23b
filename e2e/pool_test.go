package e2e_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/redis/go-redis/v9"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/version"
)

// TestPool runs cws with a warm pool of one: a session is served by the pooled
// container, survives the loss of the store (re-adopted from the engine with its
// tenant and subject), and the next tenant's session from the pool is another
// container, without the first one's files, while the first container is gone.
func TestPool(t *testing.T) {
	dockerOnly(t, "reads Docker's pool records (sandbox/kube's pool is tested in kube_test.go)")
	requireRealDeps(t)
	fx := newFixture(t)
	redisURL := testenv.Redis(t)
	owner := "e2e-pool-" + runID
	t.Cleanup(func() { removePoolOf(t, owner) })
	p := startCWSWith(t, fx, redisURL, freeAddr(t), "--pool", version.WorkspaceImage+"=1", "--pool-owner", owner)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantAcme, tenantBeta) })
	cli := engine(t)
	ctx := context.Background()

	metric := func(name string) float64 {
		v, _ := metricValue(p.metrics(t), name, map[string]string{"image": version.WorkspaceImage})
		return v
	}
	pooled := func() string {
		waitFor(t, 2*time.Minute, "a ready pooled container", func() bool { return metric("cws_pool_ready") >= 1 })
		cs, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", docker.LabelPoolOwner+"="+owner))})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if strings.HasPrefix(c.Names[0], "/cws-pool-") {
				return c.ID
			}
		}
		t.Fatal("no unbound pooled container on the engine")
		return ""
	}

	first := pooled()
	alice := fx.token(t, tenantAcme, "alice", "")
	r := do(t, nil, p.url, http.MethodPost, "/v1/sessions", alice, []byte(`{}`), nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	aliceID := decode[sessionView](t, r).ID
	if hits := metric("cws_pool_hits_total"); hits != 1 {
		t.Errorf("cws_pool_hits_total = %v, want 1", hits)
	}
	if c, err := cli.ContainerInspect(ctx, first); err != nil || c.Name != "/cws-"+aliceID {
		t.Errorf("the pooled container is %q (%v), want it renamed cws-%s", c.Name, err, aliceID)
	}
	ca := connect(t, p.url+"/v1/sessions/"+aliceID+"/mcp", alice, "")
	ca.call(t, "writeFile", map[string]any{"path": "secret.txt", "contents": "alice's secret\n"})

	// The store loses everything: the session is found again from the engine alone.
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got := ca.call(t, "readFile", map[string]any{"path": "secret.txt"}); got["content"] != "alice's secret\n" {
		t.Errorf("after FLUSHALL: readFile = %v", got)
	}
	if g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+aliceID, alice, nil, nil); g.status != http.StatusOK || decode[sessionView](t, g).Sub != "alice" {
		t.Errorf("GET after FLUSHALL: %d %s", g.status, g.body)
	}
	bobBeta := fx.token(t, tenantBeta, "bob", "")
	if g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+aliceID, bobBeta, nil, nil); g.status != http.StatusNotFound {
		t.Errorf("another tenant's GET of alice's session: %d %s, want 404", g.status, g.body)
	}

	if d := do(t, nil, p.url, http.MethodDelete, "/v1/sessions/"+aliceID, alice, nil, nil); d.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	second := pooled()
	r = do(t, nil, p.url, http.MethodPost, "/v1/sessions", bobBeta, []byte(`{}`), nil)
	if r.status != http.StatusCreated {
		t.Fatalf("create bob's: %d %s", r.status, r.body)
	}
	bobID := decode[sessionView](t, r).ID
	if hits := metric("cws_pool_hits_total"); hits != 2 {
		t.Errorf("cws_pool_hits_total = %v, want 2", hits)
	}
	if second == first {
		t.Fatal("the pool handed out alice's container again")
	}
	if c, err := cli.ContainerInspect(ctx, second); err != nil || c.Name != "/cws-"+bobID {
		t.Errorf("bob's container is %q (%v), want the second pooled one", c.Name, err)
	}
	if _, err := cli.ContainerInspect(ctx, first); !cerrdefs.IsNotFound(err) {
		t.Errorf("alice's container after delete: %v, want gone", err)
	}
	cb := connect(t, p.url+"/v1/sessions/"+bobID+"/mcp", bobBeta, "")
	if got, err := cb.callRaw("readFile", map[string]any{"path": "secret.txt"}, nil); err != nil || !got.IsError {
		t.Errorf("bob reads alice's file: %v %v", text(got), err)
	}
}

// removePoolOf removes what a killed cws's pool left: the containers and volumes of
// the e2e instance made by owner.
func removePoolOf(t *testing.T, owner string) {
	cli := engine(t)
	ctx := context.Background()
	cs, _ := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelPoolOwner+"="+owner))})
	for _, c := range cs {
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup: %v", err)
		}
		for _, m := range c.Mounts {
			if m.Destination == "/workspace" && m.Name != "" {
				_ = cli.VolumeRemove(ctx, m.Name, true)
			}
		}
	}
	vs, _ := cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", docker.LabelPool), filters.Arg("label", "cws.instance="+instance))})
	for _, v := range vs.Volumes {
		_ = cli.VolumeRemove(ctx, v.Name, false) // in use: another test's
	}
}
