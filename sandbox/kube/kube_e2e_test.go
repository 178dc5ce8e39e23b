package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// The driver on the real cluster `make kube` starts, with the images `make test`
// imports into it (cws:<version> delivers the agent; the workspace image is any).

const testNamespace = "cws-kube-test"

func newTestDriver(t testing.TB, cfg Config) *Driver {
	t.Helper()
	kc := testenv.Kube(t)
	cfg.Kubeconfig = kc
	cfg.Namespace = testNamespace
	cfg.AgentImage = "cws:" + version.Version
	if cfg.Instance == "" {
		cfg.Instance = fmt.Sprintf("t%d", time.Now().UnixNano()%1_000_000)
	}
	d, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNamespace}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if !cfg.NoEgressPolicy {
		if err := d.ensureEgressPolicy(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func testSession() string { return "t-" + fmt.Sprint(time.Now().UnixNano()%1_000_000_000) }

func clientOf(d *Driver, id string) *agent.Client {
	return agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, id) }, version.Version, nil)
}

func ping(t *testing.T, c *agent.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var err error
	for ctx.Err() == nil {
		if _, err = c.Ping(ctx); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("agent did not answer: %v", err)
}

// TestPodLifecycle: create → the agent answers over each transport → the workspace is
// the tool user's → List/Inspect from labels → an evicted (failed) pod comes back with
// Start → Remove; and the pod read back from the API is hardened.
func TestPodLifecycle(t *testing.T) {
	for _, tr := range []string{TransportDirect, TransportExec} {
		t.Run(tr, func(t *testing.T) {
			d := newTestDriver(t, Config{Transport: tr})
			spec := sandbox.Spec{Session: testSession(), Tenant: "acme", Subject: "alice", Image: version.TestImage,
				Expires: time.Now().Add(time.Hour)}
			info, err := d.Create(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Remove(context.Background(), info.ID) })
			if _, err := d.Create(t.Context(), spec); !errors.Is(err, sandbox.ErrExists) {
				t.Errorf("second create = %v, want ErrExists", err)
			}
			c := clientOf(d, info.ID)
			defer c.Close()
			ping(t, c)
			if _, err := c.WriteFile(t.Context(), agent.WriteArgs{Path: "a/b.txt", Create: true, Mkdirs: true}, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			got, _, err := c.ReadFile(t.Context(), agent.ReadArgs{Path: "a/b.txt"})
			if err != nil || string(got) != "hi" {
				t.Fatalf("read back %q %v", got, err)
			}
			res, err := c.Exec(t.Context(), agent.ExecArgs{Argv: []string{"id", "-u"}, TimeoutMS: 10_000}, nil, nil)
			if err != nil || res.ExitCode != 0 || string(res.Stdout) != "1000\n" {
				t.Errorf("id -u = %+v %v, want 1000", res, err)
			}

			ls, err := d.List(t.Context(), map[string]string{sandbox.LabelTenant: "acme"})
			if err != nil || len(ls) != 1 || ls[0].Session != spec.Session || ls[0].Subject != "alice" || !ls[0].Running ||
				ls[0].Expires.Unix() != spec.Expires.Unix() {
				t.Errorf("List = %+v %v", ls, err)
			}

			p, err := d.cs.CoreV1().Pods(d.ns).Get(t.Context(), info.ID, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
				sc := c.SecurityContext
				if !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || sc.Capabilities.Drop[0] != "ALL" {
					t.Errorf("%s: %+v", c.Name, sc)
				}
			}
			if *p.Spec.AutomountServiceAccountToken || *p.Spec.EnableServiceLinks {
				t.Error("service account token or service links mounted")
			}
		})
	}
}

// TestPodDeletedAndEvicted: a pod deleted behind cws's back is ErrNotFound (a lost
// session); one that failed (as an eviction leaves it) is ErrStopped, and Start makes
// it again with its claim's files.
func TestPodDeletedAndEvicted(t *testing.T) {
	sc := os.Getenv("CWS_KUBE_TEST_STORAGE_CLASS")
	if sc == "" {
		sc = "cws-local" // deploy/kube/localpv: directories a non-root pod can write
	}
	d := newTestDriver(t, Config{Transport: TransportDirect, StorageClass: sc})
	spec := sandbox.Spec{Session: testSession(), Tenant: "acme", Image: version.TestImage}
	info, err := d.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Remove(context.Background(), info.ID) })
	c := clientOf(d, info.ID)
	defer c.Close()
	ping(t, c)
	if _, err := c.WriteFile(t.Context(), agent.WriteArgs{Path: "kept.txt", Create: true}, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	// An eviction: the kubelet fails the pod and kills its containers. The pod's
	// phase is what the driver reads; a failed pod is made here with the status
	// subresource, as the eviction manager does.
	p, err := d.cs.CoreV1().Pods(d.ns).Get(t.Context(), info.ID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase, p.Status.Reason = corev1.PodFailed, "Evicted"
	if _, err := d.cs.CoreV1().Pods(d.ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.waitPod(t.Context(), info.ID, func(p *corev1.Pod) (bool, error) { return p != nil && p.Status.Phase == corev1.PodFailed, nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Attach(t.Context(), info.ID); !errors.Is(err, sandbox.ErrStopped) {
		t.Fatalf("Attach to an evicted pod = %v, want ErrStopped", err)
	}
	if err := d.Start(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	c2 := clientOf(d, info.ID)
	defer c2.Close()
	ping(t, c2)
	if got, _, err := c2.ReadFile(t.Context(), agent.ReadArgs{Path: "kept.txt"}); err != nil || string(got) != "kept" {
		t.Errorf("after the pod was made again: %q %v, want the claim's file", got, err)
	}

	zero := int64(0)
	if err := d.cs.CoreV1().Pods(d.ns).Delete(t.Context(), info.ID, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.waitPod(t.Context(), info.ID, func(p *corev1.Pod) (bool, error) { return p == nil, nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Attach(t.Context(), info.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to a deleted pod = %v, want ErrNotFound", err)
	}
	if err := d.Start(t.Context(), info.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Start of a deleted pod = %v, want ErrNotFound", err)
	}
	// Its claim outlives it; the orphan sweep takes it (tenants it serves only).
	if got, err := d.RemoveOrphanVolumes(t.Context(), 0, func(tenant string) bool { return tenant == "other" }); err != nil || len(got) != 0 {
		t.Errorf("sweep for another tenant removed %v (%v)", got, err)
	}
	got, err := d.RemoveOrphanVolumes(t.Context(), 0, func(tenant string) bool { return tenant == "acme" })
	if err != nil || len(got) != 1 || got[0] != claimName(spec.Session) {
		t.Errorf("orphan sweep = %v %v, want the deleted pod's claim", got, err)
	}
}

type hits struct{ hit, ready atomic.Int64 }

func (h *hits) PoolReady(_ string, n int) { h.ready.Store(int64(n)) }
func (h *hits) PoolHit(string)            { h.hit.Add(1) }
func (h *hits) PoolMiss(string, string)   {}
func (h *hits) PoolFillFailed(string)     {}

// TestPool: a pooled pod is handed to a session by one patch (its labels then say
// whose it is, for List and a restarted cws), is never handed out twice, and a new
// driver of the same owner adopts the pool's unbound pods instead of making more.
func TestPool(t *testing.T) {
	instance := fmt.Sprintf("p%d", time.Now().UnixNano()%1_000_000)
	obs := &hits{}
	cfg := Config{Transport: TransportDirect, Instance: instance, PoolOwner: "o1", PoolObserver: obs,
		Pool: []PoolSize{{Image: version.TestImage, Size: 2}}}
	d := newTestDriver(t, cfg)
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); d.RunPool(ctx) }()
	t.Cleanup(func() {
		stop()
		<-done
		ps, _ := d.pods.List(everything)
		for _, p := range ps {
			_ = d.Remove(context.Background(), p.Name)
		}
	})
	waitReady := func(d *Driver, n int) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); d.PoolReady(version.TestImage) < n; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("pool: %d ready, want %d", d.PoolReady(version.TestImage), n)
			}
		}
	}
	waitReady(d, 2)
	spec := sandbox.Spec{Session: testSession(), Tenant: "acme", Subject: "bob", Image: version.TestImage}
	r0, before := d.Requests(), time.Now()
	info, err := d.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	// The bind is one patch. The refill it wakes waits out the hold after the take
	// (pool.DefaultRefillHold); the bound of 2 leaves room for the pool's own periodic
	// requests landing meanwhile.
	if n := d.Requests() - r0; obs.hit.Load() != 1 || n < 1 || n > 2 {
		t.Errorf("create from the pool: %d hits, %d API requests; want 1 hit, and the patch (+ one periodic request)", obs.hit.Load(), n)
	}
	// The take holds the refill (pool.DefaultRefillHold): its replacement pod waits
	// for the wake.
	if taken := d.pool.TakenAt(); taken.Before(before) {
		t.Errorf("the take from the pool was not recorded for the refill's hold (taken at %s, the create began at %s)", taken, before)
	}
	c := clientOf(d, info.ID)
	defer c.Close()
	ping(t, c)
	if _, err := d.waitPod(t.Context(), info.ID, func(p *corev1.Pod) (bool, error) { return p.Annotations[sandbox.LabelSession] == spec.Session, nil }); err != nil {
		t.Fatal(err)
	}
	ls, err := d.List(t.Context(), map[string]string{sandbox.LabelSession: spec.Session})
	if err != nil || len(ls) != 1 || ls[0].ID != info.ID || ls[0].Subject != "bob" {
		t.Errorf("List of the bound session = %+v %v", ls, err)
	}
	all, _ := d.List(t.Context(), nil)
	if len(all) != 1 {
		t.Errorf("List reports %d sessions, want 1 (unbound pooled pods are no session)", len(all))
	}
	waitReady(d, 2)
	stop()
	<-done

	// A restarted cws (same owner) adopts the two unbound pods.
	obs2 := &hits{}
	cfg.PoolObserver = obs2
	d2 := newTestDriver(t, cfg)
	ctx2, stop2 := context.WithCancel(t.Context())
	done2 := make(chan struct{})
	go func() { defer close(done2); d2.RunPool(ctx2) }()
	defer func() { stop2(); <-done2 }()
	waitReady(d2, 2)
	ps, _ := d2.pods.List(everything)
	if len(ps) != 3 {
		t.Errorf("%d pods after the restart, want 3 (the session's and the 2 adopted)", len(ps))
	}
}
