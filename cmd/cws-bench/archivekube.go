package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox/kube"
	"github.com/cwsdev/cws/version"
)

// The archivekube section: the archive section's wake on the Kubernetes driver
// (KUBECONFIG, namespace cws-bench), pods on emptyDirs (so a suspend archives) with a
// warm pool of one. The pods never reach the S3 server: cws reads the archive and
// streams it to the pod's agent, so weed stays on loopback.

func init() {
	sections = append(sections, section{
		Name:  "archivekube",
		Order: 98,
		Doc:   "archived wake of the 17 MB / 2,000-file workspace from S3 on the Kubernetes driver (KUBECONFIG): first readFile",
		Run:   benchArchiveKube,
	})
	goals = append(goals,
		goal{Order: 85, Figure: "archived wake of 17 MB / 2,000 files from S3, local cluster, first readFile p50", Row: rowWakeKube, Anchor: rowTarXKube, MaxP50: time.Second},
	)
}

const (
	rowWakeKube    = "kube: wake archived from S3, 17 MB / 2,000 files: first readFile"
	rowRestoreKube = "kube: that wake's restore alone (the service's log)"
	rowTarXKube    = "kube: tar -x of the same tree into the pod's emptyDir"
)

func benchArchiveKube(ctx context.Context, e *env) ([]bench.Row, error) {
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
	rig, err := startS3Rig(ctx, e)
	if err != nil {
		return nil, err
	}
	defer rig.close()
	image := version.WorkspaceImage
	hits := &countHits{}
	log, restores := newRestoreLog(e)
	log, driverLog, closeLog, err := wakeDebugLog(log)
	if err != nil {
		return nil, err
	}
	defer closeLog()
	d, err := kube.New(ctx, kube.Config{Kubeconfig: kc, Namespace: kubeBenchNamespace, AgentImage: "cws:" + version.Version,
		AgentBinary: e.agentBin, Transport: kube.TransportDirect, Instance: "bench-archive", PoolOwner: "bench-archive",
		RequestPercent: 1, Pool: []kube.PoolSize{{Image: image, Size: 1}}, PoolObserver: hits, Log: driverLog})
	if err != nil {
		return nil, err
	}
	defer d.Close()
	pctx, stopPool := context.WithCancel(ctx)
	poolDone := make(chan struct{})
	go func() { defer close(poolDone); d.RunPool(pctx) }()
	kubectl := filepath.Join(filepath.Dir(kc), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		kubectl = "kubectl"
	}
	defer func() { stopPool(); <-poolDone; removeKubePooled(context.WithoutCancel(ctx), d, kc, kubectl) }()
	poolReady := func() error {
		for d.PoolReady(image) < 1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	}
	a := newArchSvc(e, d, rig.store, image, log, 0)
	defer a.close(ctx)

	if err := poolReady(); err != nil {
		return nil, err
	}
	id, err := a.create(ctx)
	if err != nil {
		return nil, err
	}
	e.logf("archivekube: 10 MB / 1,000 files and their git commit…")
	if err := a.fill17MB(ctx, id); err != nil {
		return nil, err
	}
	hits.hits.Store(0) // the wakes' alone
	n := e.iterations(3)
	var wakes, restored []time.Duration
	var snap string
	for i := range n {
		e.logf("archivekube: archive and wake %d/%d…", i+1, n)
		s, err := a.archive(ctx, id)
		if err != nil {
			return nil, err
		}
		snap = size(s)
		if err := poolReady(); err != nil {
			return nil, err
		}
		logged := restores.count()
		t0 := time.Now()
		if err := a.read(ctx, id, "d00/f00000.bin"); err != nil {
			return nil, err
		}
		wakes = append(wakes, time.Since(t0))
		if _, r, ok := restores.last(); ok && restores.count() > logged {
			restored = append(restored, r)
		}
	}
	restore := "the service logged no restore timing"
	if len(restored) > 0 {
		restore = "the restore's own part " + bench.Format(bench.Summarize("", restored).P50) + " (p50, the service's log)"
	}
	rows := []bench.Row{note(bench.Summarize(rowWakeKube, wakes), fmt.Sprintf("%s; pods on emptyDirs (a suspend archives), %d of %d from the warm pool of 1, direct transport; %s",
		snap, hits.hits.Load(), n, restore))}
	if len(restored) > 0 {
		rows = append(rows, note(bench.Summarize(rowRestoreKube, restored), "the store's read streamed into the agent's tar.in over the direct transport"))
	}
	box, err := a.sandbox(ctx, id)
	if err != nil {
		return rows, err
	}
	x, err := kubeTarX(ctx, d, box, n)
	if err != nil {
		return rows, err
	}
	return append(rows, note(bench.Summarize(rowTarXKube, x), "GNU tar in the woken pod (kubectl exec's path, as its user), from a tar file in /workspace (page-cached) into a new directory of it; timed inside (date +%s%N)")), nil
}

// kubeTarX times tar -x of pod box's whole tree into its workspace emptyDir, n times
// (the Docker sections' tarX, through the API server's exec).
func kubeTarX(ctx context.Context, d *kube.Driver, box string, n int) ([]time.Duration, error) {
	if _, err := timeInPod(ctx, d, box, anchorTar); err != nil {
		return nil, err
	}
	defer func() { _, _ = timeInPod(context.WithoutCancel(ctx), d, box, anchorClean) }()
	var out []time.Duration
	for range n {
		t, err := timeInPod(ctx, d, box, anchorX)
		if err != nil {
			return out, err
		}
		out = append(out, t)
	}
	return out, nil
}

// timeInPod runs script with sh in pod box and returns the nanoseconds it prints last.
func timeInPod(ctx context.Context, d *kube.Driver, box, script string) (time.Duration, error) {
	out, code, err := d.Exec(ctx, box, []string{"sh", "-c", script})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d", code)
	}
	if err != nil {
		return 0, fmt.Errorf("exec %s in %s: %v: %s", script, box, err, tail(string(out), 10))
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return 0, fmt.Errorf("exec %s in %s: no time printed", script, box)
	}
	ns, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("exec %s in %s: %q", script, box, out)
	}
	return time.Duration(ns), nil
}

// wakeDebugLog adds to log a Debug-level copy of its records in the file named by
// $CWS_BENCH_WAKE_LOG, and returns it with the driver's logger (Debug to the same
// file): the wake's breakdown (the pool's bind, the agent's dial, the store's read and
// the tar.in, the pool's refill). Without the variable it returns log and no driver
// logger.
func wakeDebugLog(log *slog.Logger) (svc, driver *slog.Logger, closeLog func(), err error) {
	path := os.Getenv("CWS_BENCH_WAKE_LOG")
	if path == "" {
		return log, nil, func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, nil, err
	}
	file := slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(slog.NewMultiHandler(log.Handler(), file)), slog.New(file), func() { f.Close() }, nil
}
