package docker

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/version"
)

// poolObs records what the pool reports.
type poolObs struct {
	mu     sync.Mutex
	hits   int
	misses map[string]int
	fails  int
}

func (o *poolObs) PoolReady(string, int) {}
func (o *poolObs) PoolHit(string)        { o.mu.Lock(); o.hits++; o.mu.Unlock() }
func (o *poolObs) PoolMiss(_, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.misses == nil {
		o.misses = map[string]int{}
	}
	o.misses[reason]++
}
func (o *poolObs) PoolFillFailed(string) { o.mu.Lock(); o.fails++; o.mu.Unlock() }

func (o *poolObs) count() (hits int, misses map[string]int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits, maps.Clone(o.misses)
}

// poolEnv is a driver with a pool of size containers of the test image, on an
// instance of its own, and its refill loop running; everything of the instance is
// removed when the test ends.
type poolEnv struct {
	d        *Driver
	cli      *client.Client
	obs      *poolObs
	instance string
	stop     context.CancelFunc
	done     chan struct{}
}

func newPoolEnv(t *testing.T, size int) *poolEnv {
	t.Helper()
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	if agentErr != nil {
		skipOrFail(t, "%v", agentErr)
	}
	e := &poolEnv{cli: cli, obs: &poolObs{}, instance: uniq("test-pool")}
	t.Cleanup(func() { removeInstance(t, cli, e.instance) })
	e.d = e.driver(t, size)
	e.start(t)
	return e
}

// driver returns another driver of the env's instance (a restarted cws).
func (e *poolEnv) driver(t *testing.T, size int, opts ...func(*Config)) *Driver {
	w := &testWriter{t: t}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := Config{AgentBinary: agentBinary, StopTimeout: 2 * time.Second, Log: log, Instance: e.instance,
		Pool: []PoolSize{{Image: version.TestImage, Size: size}}, PoolObserver: e.obs}
	for _, o := range opts {
		o(&cfg)
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Close()
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return d
}

// start runs the refill loop until stopPool or the end of the test.
func (e *poolEnv) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	e.stop, e.done = cancel, make(chan struct{})
	go func() { defer close(e.done); e.d.RunPool(ctx) }()
	t.Cleanup(e.stopPool)
}

// stopPool ends the refill loop and waits for fills in flight.
func (e *poolEnv) stopPool() {
	e.stop()
	<-e.done
	for {
		if e.d.pool.Filling(version.TestImage) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readyIDs waits until d's pool holds n ready containers and returns their ids.
func readyIDs(t *testing.T, d *Driver, n int) []string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ids := d.pool.ReadyIDs(version.TestImage)
		if len(ids) >= n {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool holds %d ready containers, want %d", len(ids), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeInstance force-removes every container and volume of a test instance.
func removeInstance(t *testing.T, cli *client.Client, instance string) {
	ctx := context.WithoutCancel(t.Context())
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelInstance+"="+instance))
	cs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Errorf("cleanup list: %v", err)
	}
	for _, c := range cs {
		if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup container %s: %v", c.ID, err)
		}
	}
	vs, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		t.Errorf("cleanup volumes: %v", err)
		return
	}
	for _, v := range vs.Volumes {
		if err := cli.VolumeRemove(ctx, v.Name, true); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup volume %s: %v", v.Name, err)
		}
	}
}

func poolSpec(tenant string) sandbox.Spec {
	return sandbox.Spec{Session: uniq("s"), Tenant: tenant, Subject: "alice", Image: version.TestImage,
		Expires: time.Now().Add(time.Hour), Labels: map[string]string{"team": "qa"}}
}

// execOut runs argv in a sandbox as the tool user and returns stdout and the exit code.
func execOut(t *testing.T, d *Driver, id string, argv ...string) (string, int) {
	t.Helper()
	out, code, err := d.Exec(t.Context(), id, argv, "")
	if err != nil {
		t.Fatalf("Exec %v: %v", argv, err)
	}
	return string(out), code
}

// TestPoolHandOut: a create from the pool is a working, hardened session with the
// spec's limits, reported by List and Inspect exactly like a cold one; the pool refills.
func TestPoolHandOut(t *testing.T) {
	e := newPoolEnv(t, 1)
	pooled := readyIDs(t, e.d, 1)[0]

	spec := poolSpec(uniq("tenant"))
	spec.Default = true
	spec.Limits = sandbox.Limits{NanoCPUs: 500_000_000, MemoryBytes: 300 << 20, Pids: 77}
	info, err := e.d.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != pooled {
		t.Fatalf("Create gave %s, want the pooled %s", info.ID, pooled)
	}
	if hits, _ := e.obs.count(); hits != 1 {
		t.Errorf("hits = %d, want 1", hits)
	}
	want := sandbox.Info{ID: pooled, Session: spec.Session, Tenant: spec.Tenant, Subject: "alice", Image: version.TestImage,
		Expires: spec.Expires.UTC().Truncate(time.Second), Running: true, Volume: info.Volume, Default: true}
	if info != want || info.Volume == "" {
		t.Errorf("Create = %+v, want %+v", info, want)
	}

	t.Run("limits applied", func(t *testing.T) {
		c, err := e.cli.ContainerInspect(t.Context(), info.ID)
		if err != nil {
			t.Fatal(err)
		}
		r := c.HostConfig.Resources
		if r.Memory != 300<<20 || r.MemorySwap != 300<<20 || r.NanoCPUs != 500_000_000 || r.PidsLimit == nil || *r.PidsLimit != 77 {
			t.Errorf("resources = memory %d swap %d cpus %d pids %v", r.Memory, r.MemorySwap, r.NanoCPUs, r.PidsLimit)
		}
		// What the kernel enforces, seen from inside (cgroup v2, else v1).
		if out, _ := execOut(t, e.d, info.ID, "sh", "-c", "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max"); out != "77\n" {
			t.Errorf("pids.max in the container = %q, want 77", out)
		}
		if out, _ := execOut(t, e.d, info.ID, "sh", "-c", "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"); out != "314572800\n" {
			t.Errorf("memory limit in the container = %q, want 314572800", out)
		}
		hc := c.HostConfig
		if c.Name != "/"+containerName(spec.Session) || !hc.ReadonlyRootfs || hc.NetworkMode != "none" ||
			!slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(hc.SecurityOpt, []string{"no-new-privileges"}) {
			t.Errorf("name %s, hardening %+v", c.Name, hc)
		}
	})
	t.Run("working session", func(t *testing.T) {
		if !e.d.pool.HasStream(info.ID) {
			t.Error("no pre-opened agent stream for the session's first Attach")
		}
		checkPing(t, e.d, info.ID) // over the pre-opened stream
		if e.d.pool.HasStream(info.ID) {
			t.Error("the pre-opened stream was not used")
		}
		if out, code := execOut(t, e.d, info.ID, "sh", "-c", "echo hi > /workspace/f && cat /workspace/f && id -u"); code != 0 || out != "hi\n1000\n" {
			t.Errorf("exec = %q, %d", out, code)
		}
	})
	t.Run("list and inspect", func(t *testing.T) {
		for _, filter := range []map[string]string{nil, {sandbox.LabelSession: spec.Session, sandbox.LabelTenant: spec.Tenant}, {"team": "qa"}} {
			got, err := e.d.List(t.Context(), filter)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got[0] != want {
				t.Errorf("List(%v) = %+v, want [%+v]", filter, got, want)
			}
		}
		got, err := e.d.List(t.Context(), map[string]string{sandbox.LabelTenant: "someone-else"})
		if err != nil || len(got) != 0 {
			t.Errorf("List(other tenant) = %+v, %v; want none", got, err)
		}
		in, err := e.d.Inspect(t.Context(), containerName(spec.Session))
		if err != nil || in != want {
			t.Errorf("Inspect = %+v, %v; want %+v", in, err, want)
		}
	})
	t.Run("refill", func(t *testing.T) {
		next := readyIDs(t, e.d, 1)
		if slices.Contains(next, pooled) {
			t.Errorf("the handed-out container %s is back in the pool", pooled)
		}
	})
	t.Run("remove", func(t *testing.T) {
		if err := e.d.Remove(t.Context(), info.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := e.cli.ContainerInspect(t.Context(), info.ID); !cerrdefs.IsNotFound(err) {
			t.Errorf("container after Remove: %v", err)
		}
		for _, v := range []string{info.Volume, bindName(spec.Session)} {
			if _, err := e.cli.VolumeInspect(t.Context(), v); !cerrdefs.IsNotFound(err) {
				t.Errorf("volume %s after Remove: %v", v, err)
			}
		}
	})
}

// TestPoolNextTenant: a second tenant's create from the pool never gets the first
// tenant's container, nor sees its files.
func TestPoolNextTenant(t *testing.T) {
	e := newPoolEnv(t, 1)
	readyIDs(t, e.d, 1)
	a, err := e.d.Create(t.Context(), poolSpec("tenant-a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, code := execOut(t, e.d, a.ID, "sh", "-c", "echo secret > /workspace/secret && echo secret > /tmp/secret"); code != 0 {
		t.Fatal("write in A failed")
	}
	if err := e.d.Remove(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	readyIDs(t, e.d, 1)
	b, err := e.d.Create(t.Context(), poolSpec("tenant-b"))
	if err != nil {
		t.Fatal(err)
	}
	if hits, _ := e.obs.count(); hits != 2 {
		t.Errorf("hits = %d, want both creates from the pool", hits)
	}
	if b.ID == a.ID || b.Volume == a.Volume {
		t.Fatalf("B got A's container or volume: %+v, %+v", a, b)
	}
	if out, code := execOut(t, e.d, b.ID, "sh", "-c", "ls -A /workspace /tmp; cat /workspace/secret /tmp/secret"); code == 0 {
		t.Errorf("B sees A's files: %q", out)
	}
	if _, err := e.cli.ContainerInspect(t.Context(), a.ID); !cerrdefs.IsNotFound(err) {
		t.Errorf("A's container: %v, want gone", err)
	}
	got, err := e.d.List(t.Context(), map[string]string{sandbox.LabelTenant: "tenant-a"})
	if err != nil || len(got) != 0 {
		t.Errorf("List(tenant-a) = %+v, %v; want none", got, err)
	}
}

// TestPoolUnboundNotListed: a ready pooled container is never reported as a session.
func TestPoolUnboundNotListed(t *testing.T) {
	e := newPoolEnv(t, 1)
	pooled := readyIDs(t, e.d, 1)[0]
	if _, err := e.cli.ContainerInspect(t.Context(), pooled); err != nil {
		t.Fatal(err)
	}
	got, err := e.d.List(t.Context(), nil)
	if err != nil || len(got) != 0 {
		t.Errorf("List = %+v, %v; want no sessions", got, err)
	}
	if _, err := e.d.Inspect(t.Context(), pooled); !errors.Is(err, ErrNotFound) {
		t.Errorf("Inspect(pooled) = %v, want ErrNotFound", err)
	}
}

// TestPoolMiss: a spec whose immutable settings differ from the pool's class, or an
// image without a pool, is created cold and leaves the pool alone.
func TestPoolMiss(t *testing.T) {
	e := newPoolEnv(t, 1)
	pooled := readyIDs(t, e.d, 1)[0]
	other := poolSpec("tenant")
	other.Limits.NoFile = 1000
	env := poolSpec("tenant")
	env.Env = map[string]string{"FOO": "bar"}
	network := poolSpec("tenant")
	network.Network = true
	for _, spec := range []sandbox.Spec{other, env, network} {
		info := create(t, e.d, e.cli, spec)
		if info.ID == pooled || info.Volume != volumeName(spec.Session) {
			t.Errorf("Create(%+v) = %+v, want a cold container", spec, info)
		}
	}
	if ids := readyIDs(t, e.d, 1); !slices.Equal(ids, []string{pooled}) {
		t.Errorf("pool = %v, want [%s]", ids, pooled)
	}
	if _, misses := e.obs.count(); misses[MissClass] != 3 {
		t.Errorf("misses = %v, want 3 of class", misses)
	}
}

// TestPoolBindFails: a bind that fails removes the pooled container; it never goes
// back to the pool, and what made the bind fail is left alone.
func TestPoolBindFails(t *testing.T) {
	e := newPoolEnv(t, 1)
	ctx := t.Context()

	t.Run("name taken", func(t *testing.T) {
		pooled := readyIDs(t, e.d, 1)[0]
		spec := poolSpec("tenant")
		squatter, err := e.cli.ContainerCreate(ctx, &container.Config{Image: version.TestImage, Entrypoint: []string{"true"}},
			nil, nil, nil, containerName(spec.Session))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.cli.ContainerRemove(context.WithoutCancel(ctx), squatter.ID, container.RemoveOptions{Force: true})
		})
		if _, err := e.d.Create(ctx, spec); !errors.Is(err, ErrExists) {
			t.Errorf("Create = %v, want ErrExists", err)
		}
		checkGone(t, e, pooled)
		if _, err := e.cli.ContainerInspect(ctx, squatter.ID); err != nil {
			t.Errorf("the other container: %v", err)
		}
	})
	t.Run("bind record taken", func(t *testing.T) {
		pooled := readyIDs(t, e.d, 1)[0]
		spec := poolSpec("tenant")
		if _, err := e.cli.VolumeCreate(ctx, volume.CreateOptions{Name: bindName(spec.Session),
			Labels: map[string]string{sandbox.LabelInstance: e.instance, LabelBind: "someone-else"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.d.Create(ctx, spec); !errors.Is(err, ErrExists) {
			t.Errorf("Create = %v, want ErrExists", err)
		}
		checkGone(t, e, pooled)
		if _, err := e.cli.VolumeInspect(ctx, bindName(spec.Session)); err != nil {
			t.Errorf("the other bind record: %v", err)
		}
	})
}

// checkGone: the pooled container was removed and is not in the pool.
func checkGone(t *testing.T, e *poolEnv, id string) {
	t.Helper()
	if _, err := e.cli.ContainerInspect(t.Context(), id); !cerrdefs.IsNotFound(err) {
		t.Errorf("pooled container after a failed bind: %v, want removed", err)
	}
	for _, rid := range e.d.pool.ReadyIDs(version.TestImage) {
		if rid == id {
			t.Errorf("pooled container %s is back in the pool", id)
		}
	}
}

// TestPoolRestart: after the process (and its store) is gone, a new driver of the same
// instance reports the bound session with its tenant from the engine alone, takes the
// healthy unbound containers back into its pool, and removes a half-bound one.
func TestPoolRestart(t *testing.T) {
	e := newPoolEnv(t, 2)
	readyIDs(t, e.d, 2)
	spec := poolSpec(uniq("tenant"))
	spec.Default = true
	s, err := e.d.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// A bind cut short after the rename: no bind record.
	half, miss := e.d.pool.Take(version.TestImage, e.d.fits(poolSpec("tenant")))
	if miss != "" {
		t.Fatalf("take: %s", miss)
	}
	if err := e.cli.ContainerRename(t.Context(), half.ID, containerName(uniq("s"))); err != nil {
		t.Fatal(err)
	}
	// A bind cut short after the bind record, before the rename.
	e.d.pool.Signal()
	readyIDs(t, e.d, 1)
	recorded, miss := e.d.pool.Take(version.TestImage, e.d.fits(poolSpec("tenant")))
	if miss != "" {
		t.Fatalf("take: %s", miss)
	}
	rs := uniq("s")
	if _, err := e.cli.VolumeCreate(t.Context(), volume.CreateOptions{Name: bindName(rs), Labels: map[string]string{
		sandbox.LabelManaged: "true", sandbox.LabelInstance: e.instance, sandbox.LabelSession: rs, sandbox.LabelTenant: "tenant", LabelBind: recorded.ID,
	}}); err != nil {
		t.Fatal(err)
	}
	// A bound session whose bind record lost its labels (the engine's volume metadata
	// lost): whether it was bound can't be told, so it stays, with its workspace.
	e.d.pool.Signal()
	readyIDs(t, e.d, 1)
	lost, miss := e.d.pool.Take(version.TestImage, e.d.fits(poolSpec("tenant")))
	if miss != "" {
		t.Fatalf("take: %s", miss)
	}
	ls := uniq("s")
	if err := e.cli.ContainerRename(t.Context(), lost.ID, containerName(ls)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.VolumeCreate(t.Context(), volume.CreateOptions{Name: bindName(ls)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		_ = e.cli.ContainerRemove(ctx, lost.ID, container.RemoveOptions{Force: true})
		_ = e.cli.VolumeRemove(ctx, bindName(ls), true)
		_ = e.cli.VolumeRemove(ctx, lost.Volume, true)
	})
	e.d.pool.Signal()
	unbound := readyIDs(t, e.d, 2)
	e.stopPool()

	// The workspace volume of a fill cut short, its container never made.
	orphan := volumeName("pool-" + uniq("orphan"))
	if _, err := e.cli.VolumeCreate(t.Context(), volume.CreateOptions{Name: orphan,
		Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelInstance: e.instance, LabelPool: version.TestImage}}); err != nil {
		t.Fatal(err)
	}

	d2 := e.driver(t, 2)
	got, err := d2.List(t.Context(), map[string]string{sandbox.LabelSession: spec.Session, sandbox.LabelTenant: spec.Tenant})
	if err != nil || len(got) != 1 || got[0] != s {
		t.Errorf("List after restart = %+v, %v; want [%+v]", got, err, s)
	}
	if all, err := d2.List(t.Context(), nil); err != nil || len(all) != 1 {
		t.Errorf("List(nil) = %+v, %v; want the one session", all, err)
	}
	if err := d2.sweepPool(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	adopted := readyIDs(t, d2, 2)
	slices.Sort(adopted)
	slices.Sort(unbound)
	if !slices.Equal(adopted, unbound) {
		t.Errorf("adopted %v, want the unbound %v", adopted, unbound)
	}
	for _, id := range []string{half.ID, recorded.ID} {
		if _, err := e.cli.ContainerInspect(t.Context(), id); !cerrdefs.IsNotFound(err) {
			t.Errorf("half-bound container: %v, want removed", err)
		}
	}
	if _, err := e.cli.VolumeInspect(t.Context(), bindName(rs)); !cerrdefs.IsNotFound(err) {
		t.Errorf("bind record of the half-bound container: %v, want removed", err)
	}
	if _, err := e.cli.ContainerInspect(t.Context(), lost.ID); err != nil {
		t.Errorf("container whose bind record lost its labels: %v, want it left", err)
	}
	if _, err := e.cli.VolumeInspect(t.Context(), lost.Volume); err != nil {
		t.Errorf("workspace of the container whose bind record lost its labels: %v, want it left", err)
	}
	if _, err := e.cli.ContainerInspect(t.Context(), s.ID); err != nil {
		t.Errorf("the session's container: %v", err)
	}
	if _, err := e.cli.VolumeInspect(t.Context(), s.Volume); err != nil {
		t.Errorf("the session's volume: %v", err)
	}
	if _, err := e.cli.VolumeInspect(t.Context(), orphan); !cerrdefs.IsNotFound(err) {
		t.Errorf("orphan pool volume: %v, want removed", err)
	}
	// The adopted ones are handed out like fresh ones.
	n, err := d2.Create(t.Context(), poolSpec("tenant-c"))
	if err != nil || !slices.Contains(unbound, n.ID) {
		t.Errorf("Create after restart = %+v, %v; want one of %v", n, err, unbound)
	}
}

// TestPoolOtherOwner: another replica's unbound pooled containers are never adopted,
// and are removed only once too old for their owner to hand out; its sessions stay.
func TestPoolOtherOwner(t *testing.T) {
	e := newPoolEnv(t, 1)
	readyIDs(t, e.d, 1)
	s, err := e.d.Create(t.Context(), poolSpec("tenant"))
	if err != nil {
		t.Fatal(err)
	}
	unbound := readyIDs(t, e.d, 1)[0]
	e.stopPool()

	other := e.driver(t, 1, func(c *Config) { c.PoolOwner = "other-replica" })
	if err := other.sweepPool(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ContainerInspect(t.Context(), unbound); err != nil {
		t.Errorf("another owner's young pooled container: %v, want it left alone", err)
	}
	if other.pool.Ready(version.TestImage) != 0 {
		t.Errorf("another owner's pooled container was adopted")
	}

	time.Sleep(10 * time.Millisecond)
	late := e.driver(t, 1, func(c *Config) { c.PoolOwner = "other-replica"; c.PoolMaxAge = time.Millisecond })
	if err := late.sweepPool(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cli.ContainerInspect(t.Context(), unbound); !cerrdefs.IsNotFound(err) {
		t.Errorf("another owner's old pooled container: %v, want removed", err)
	}
	if got, err := late.List(t.Context(), nil); err != nil || len(got) != 1 || got[0].ID != s.ID {
		t.Errorf("List = %+v, %v; want the session %s untouched", got, err, s.ID)
	}
}

// TestPoolStopped: a ready pooled container that stopped is replaced, never handed out.
func TestPoolStopped(t *testing.T) {
	e := newPoolEnv(t, 1)
	stopped := readyIDs(t, e.d, 1)[0]
	timeout := 0
	if err := e.cli.ContainerStop(t.Context(), stopped, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if err := e.d.sweepPool(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	next := readyIDs(t, e.d, 1)[0]
	if next == stopped {
		t.Fatalf("the stopped container is still in the pool")
	}
	if _, err := e.cli.ContainerInspect(t.Context(), stopped); !cerrdefs.IsNotFound(err) {
		t.Errorf("stopped pooled container: %v, want removed", err)
	}
	info, err := e.d.Create(t.Context(), poolSpec("tenant"))
	if err != nil || info.ID != next {
		t.Errorf("Create = %+v, %v; want the new pooled %s", info, err, next)
	}
}
