package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/kube"
	"github.com/cwsdev/cws/version"
)

// The kube section measures the Kubernetes driver on the cluster KUBECONFIG names
// (`make kube` starts one and prints it), in namespace cws-bench: creates (cold and
// from the pool, one at a time and 50 at once), a 4 KiB read over each transport
// beside `kubectl exec cat` on the same pod and the Docker socket path in the same
// run, and the API requests one session's whole life costs.

func init() {
	sections = append(sections, section{
		Name:  "kube",
		Order: 95,
		Doc:   "the Kubernetes driver (KUBECONFIG): creates cold/pooled/50 at once, a read over the direct and exec paths vs kubectl exec and the Docker socket path, API requests per session",
		Run:   benchKube,
	})
	ratios = append(ratios, ratio{Num: "kubectl exec cat 4 KiB", Den: "kube read 4 KiB, direct", Target: 20})
	goals = append(goals,
		goal{Order: 60, Figure: "kube session create from the pool, p50", Row: "kube driver.Create from the pool", MaxP50: 50 * time.Millisecond},
		goal{Order: 61, Figure: "kube read 4 KiB, direct path vs the Docker socket path", Row: "kube read 4 KiB, direct", Anchor: "docker read 4 KiB, same run", Slower: 1.5},
		goal{Order: 62, Figure: "kube read 4 KiB, direct path vs kubectl exec cat", Row: "kube read 4 KiB, direct", Anchor: "kubectl exec cat 4 KiB", Faster: 20},
		goal{Order: 63, Figure: "kube read 4 KiB, exec stream vs the direct path", Row: "kube read 4 KiB, exec stream", Anchor: "kube read 4 KiB, direct"},
		goal{Order: 64, Figure: "kube session create→ready, cold, p50", Row: "kube create→ready, cold"},
		goal{Order: 66, Figure: "kube exec true (same-uid launcher) vs true in the pod", Row: "kube exec true, direct", Anchor: "true in the pod", MaxOver: 3 * time.Millisecond},
		goal{Order: 65, Figure: fmt.Sprintf("%d kube session creates at once (wall)", parallelCreates), Row: fmt.Sprintf("%d kube creates at once: wall", parallelCreates)},
	)
}

const kubeBenchNamespace = "cws-bench"

func benchKube(ctx context.Context, e *env) ([]bench.Row, error) {
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		return nil, errors.New("no cluster: set KUBECONFIG (run `make kube`, which prints it)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kubeBenchNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	image := version.WorkspaceImage
	newDriver := func(transport string, pool int) (*kube.Driver, error) {
		cfg := kube.Config{Kubeconfig: kc, Namespace: kubeBenchNamespace, AgentImage: "cws:" + version.Version, AgentBinary: e.agentBin,
			Transport: transport, Instance: "bench", PoolOwner: "bench",
			// 1% of 1 CPU: 50 idle sessions fit the bench's 2-core node.
			RequestPercent: 1}
		if pool > 0 { // its own instance: the others' informers never see its pods
			cfg.Pool, cfg.Instance = []kube.PoolSize{{Image: image, Size: pool}}, "bench-pool"
		}
		return kube.New(ctx, cfg)
	}
	var rows []bench.Row

	// Creates, cold, one at a time; the last box stays for the calls.
	d, err := newDriver(kube.TransportDirect, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	n := e.iterations(5)
	e.logf("kube: %d cold creates…", n)
	var cold []time.Duration
	var boxes []*box
	defer func() {
		for _, b := range boxes {
			b.Client.Close()
			_ = d.Remove(context.WithoutCancel(ctx), b.ID)
		}
	}()
	r0 := d.Requests()
	for range n {
		start := time.Now()
		b, err := kubeBox(ctx, d, image)
		if err != nil {
			return rows, err
		}
		cold = append(cold, time.Since(start))
		boxes = append(boxes, b)
	}
	createReqs := float64(d.Requests()-r0) / float64(n)
	row := bench.Summarize("kube create→ready, cold", cold)
	row.Note = "pod (init container installs the agent) + first Ping over the pod IP"
	rows = append(rows, row)

	// Calls on one pod: direct, exec stream, kubectl exec; and the Docker socket path.
	b := boxes[len(boxes)-1]
	content := make([]byte, 4<<10)
	_, _ = rand.Read(content)
	if _, err := b.Client.WriteFile(ctx, agent.WriteArgs{Path: "bench/f4k", Create: true, Mkdirs: true}, content); err != nil {
		return rows, err
	}
	read := func(c *agent.Client) func(context.Context) error {
		return func(ctx context.Context) error {
			got, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "bench/f4k"})
			if err == nil && len(got) != len(content) {
				err = fmt.Errorf("read %d bytes, want %d", len(got), len(content))
			}
			return err
		}
	}
	calls := e.iterations(300)
	r1 := d.Requests()
	var callReqs int64
	if s, err := bench.Run(ctx, 20, calls, read(b.Client)); err == nil {
		callReqs = d.Requests() - r1
		row := bench.Summarize("kube read 4 KiB, direct", s)
		row.Note = fmt.Sprintf("TCP to the pod IP, secret handshake once; %d API requests for %d calls", callReqs, calls)
		rows = append(rows, row)
	} else {
		return rows, err
	}
	de, err := newDriver(kube.TransportExec, 0)
	if err != nil {
		return rows, err
	}
	defer de.Close()
	viaExec := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return de.Attach(ctx, b.ID) }, version.Version, nil)
	defer viaExec.Close()
	if s, err := bench.Run(ctx, 20, calls, read(viaExec)); err == nil {
		row := bench.Summarize("kube read 4 KiB, exec stream", s)
		row.Note = "the API server's exec stream into cws-agent attach, opened once"
		rows = append(rows, row)
	} else {
		return rows, err
	}
	kubectl := filepath.Join(filepath.Dir(kc), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		kubectl = "kubectl"
	}
	kexec := func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "exec", "-n", kubeBenchNamespace, b.ID, "-c", "workspace", "--",
			"cat", "/workspace/bench/f4k").Output()
		if err == nil && len(out) != len(content) {
			err = fmt.Errorf("kubectl exec cat: %d bytes", len(out))
		}
		return err
	}
	if s, err := bench.Run(ctx, 2, e.iterations(20), kexec); err == nil {
		rows = append(rows, bench.Summarize("kubectl exec cat 4 KiB", s))
	} else {
		return rows, err
	}
	// A command's start: in a pod every tool process starts through the launcher
	// in a scoped Landlock domain of its own (same-uid mode), beside `true` in a loop in
	// the pod and the Docker agent's start below.
	execTrue := func(c *agent.Client) func(context.Context) error {
		return func(ctx context.Context) error {
			r, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"true"}}, nil, nil)
			if err == nil && r.ExitCode != 0 {
				err = fmt.Errorf("exec true: exit %d %s", r.ExitCode, r.StartError)
			}
			return err
		}
	}
	if s, err := bench.Run(ctx, 10, e.iterations(200), execTrue(b.Client)); err == nil {
		row := bench.Summarize("kube exec true, direct", s)
		row.Note = "the agent's exec op in a pod: through the native launcher /.cws/cws-launch (same-uid mode)"
		rows = append(rows, row)
	} else {
		return rows, err
	}
	var inPod []time.Duration
	for range e.iterations(5) {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "exec", "-n", kubeBenchNamespace, b.ID, "-c", "workspace", "--",
			"sh", "-c", loopScript("/usr/bin/true")).Output()
		ns, perr := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil || perr != nil {
			return rows, fmt.Errorf("true in the pod: %v %q", err, out)
		}
		inPod = append(inPod, time.Duration(ns/anchorBatch))
	}
	pod := bench.Summarize("true in the pod", inPod)
	pod.Note = fmt.Sprintf("/usr/bin/true in a sh loop in the pod (kubectl exec), the mean of %d runs per sample", anchorBatch)
	rows = append(rows, pod)
	if db, err := e.sandbox(ctx); err == nil {
		if s, err := bench.Run(ctx, 10, e.iterations(200), execTrue(db.Client)); err == nil {
			row := bench.Summarize("docker exec true, same run", s)
			row.Note = "the Docker driver's agent exec op (root mode: no launcher), for the comparison"
			rows = append(rows, row)
		}
		if _, err := db.Client.WriteFile(ctx, agent.WriteArgs{Path: "bench/k4k", Create: true, Mkdirs: true}, content); err == nil {
			if s, err := bench.Run(ctx, 20, calls, func(ctx context.Context) error {
				_, _, err := db.Client.ReadFile(ctx, agent.ReadArgs{Path: "bench/k4k"})
				return err
			}); err == nil {
				row := bench.Summarize("docker read 4 KiB, same run", s)
				row.Note = "the Docker driver's agent path (" + e.transport + "), for the ratio"
				rows = append(rows, row)
			}
		}
	}

	// A whole session's API requests: create, the calls above, delete.
	r2 := d.Requests()
	last := boxes[len(boxes)-1]
	last.Client.Close()
	_ = d.Remove(ctx, last.ID)
	boxes = boxes[:len(boxes)-1]
	deleteReqs := float64(d.Requests() - r2)
	life := bench.Row{Name: "kube API requests per session", N: 1,
		Note: fmt.Sprintf("create %.0f, %d calls on the direct path %d, delete %.0f (the informer's one watch is not per session)", createReqs, calls+20, callReqs, deleteReqs),
		Rate: createReqs + float64(callReqs) + deleteReqs}
	rows = append(rows, life)
	e.logf("kube: a session's life costs %.0f API requests (create %.0f, delete %.0f); the calls cost none", createReqs+deleteReqs, createReqs, deleteReqs)

	// From the pool.
	size := e.iterations(4)
	dp, err := newDriver(kube.TransportDirect, size)
	if err != nil {
		return rows, err
	}
	defer dp.Close()
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); dp.RunPool(pctx) }()
	defer func() { stop(); <-done; removeKubePooled(context.WithoutCancel(ctx), dp, kc, kubectl) }()
	waitPool := func() error {
		for dp.PoolReady(image) < size {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	}
	e.logf("kube: filling a pool of %d…", size)
	if err := waitPool(); err != nil {
		return rows, err
	}
	var binds, pooled []time.Duration
	for range e.iterations(6) {
		start := time.Now()
		info, err := dp.Create(ctx, sandbox.Spec{Session: kubeSession(), Tenant: "cws-bench", Image: image})
		if err != nil {
			return rows, err
		}
		binds = append(binds, time.Since(start))
		c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return dp.Attach(ctx, info.ID) }, version.Version, nil)
		if err := ready(ctx, c); err != nil {
			return rows, err
		}
		pooled = append(pooled, time.Since(start))
		c.Close()
		_ = dp.Remove(ctx, info.ID)
		if err := waitPool(); err != nil {
			return rows, err
		}
	}
	row = bench.Summarize("kube driver.Create from the pool", binds)
	row.Note = "one conditional patch of the pooled pod's annotations"
	rows = append(rows, row, bench.Summarize("kube create→ready from the pool", pooled))

	// 50 at once, cold (the cluster's one node schedules them all).
	m := parallelCreates
	e.logf("kube: %d cold creates at once…", m)
	var mu sync.Mutex
	var each []time.Duration
	var wg sync.WaitGroup
	var firstErr error
	start := time.Now()
	for range m {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			bx, err := kubeBox(ctx, d, image)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmpErr(firstErr, err)
				return
			}
			each = append(each, time.Since(t0))
			boxes = append(boxes, bx)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	row = bench.Summarize(fmt.Sprintf("%d kube creates at once", m), each)
	row.Note = fmt.Sprintf("%d of %d ready", len(each), m)
	rows = append(rows, row, bench.Row{Name: fmt.Sprintf("%d kube creates at once: wall", m), N: 1, Mean: wall, P50: wall, P99: wall, Min: wall, Max: wall})
	return rows, firstErr
}

// kubeBox creates a session pod and waits for its agent.
func kubeBox(ctx context.Context, d *kube.Driver, image string) (*box, error) {
	info, err := d.Create(ctx, sandbox.Spec{Session: kubeSession(), Tenant: "cws-bench", Image: image})
	if err != nil {
		return nil, err
	}
	b := &box{ID: info.ID, Client: agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		return d.Attach(ctx, info.ID)
	}, version.Version, nil)}
	if err := ready(ctx, b.Client); err != nil {
		b.Client.Close()
		_ = d.Remove(context.WithoutCancel(ctx), info.ID)
		return nil, err
	}
	return b, nil
}

// kubeSession is a session id that is a DNS label, as cws's own are.
func kubeSession() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "b-" + hex.EncodeToString(b[:])
}

// removeKubePooled deletes the pooled pods a bench driver left.
func removeKubePooled(ctx context.Context, d *kube.Driver, kc, kubectl string) {
	_ = exec.CommandContext(ctx, kubectl, "--kubeconfig", kc, "delete", "pods", "-n", kubeBenchNamespace,
		"-l", "cws.pool=true", "--grace-period=1", "--wait=false").Run()
}
