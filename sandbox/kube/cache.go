package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/cwsdev/cws/sandbox"
)

// The pod cache: one informer, scoped to this instance's pods by label, whose objects
// keep only what the driver reads (trim). At thousands of pods it holds a few hundred
// bytes each, and every Attach, List and Inspect is a map lookup.

// startCache starts the informer and waits for its first list.
func (d *Driver) startCache(ctx context.Context) error {
	sel := labels.Set{sandbox.LabelManaged: "true", sandbox.LabelInstance: d.instance}.String()
	d.factory = informers.NewSharedInformerFactoryWithOptions(d.cs, 0, informers.WithNamespace(d.ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }),
		informers.WithTransform(trim))
	inf := d.factory.Core().V1().Pods()
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { d.notify() },
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				d.conns.podChanged(p.Name, p)
			}
			d.notify()
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				d.conns.podChanged(p.Name, nil)
			}
			d.notify()
		},
	})
	d.pods = inf.Lister().Pods(d.ns)
	d.factory.Start(d.stop)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return waitCache(ctx, inf.Informer().HasSynced)
}

// notify wakes everyone waiting for a change in the cache.
func (d *Driver) notify() {
	d.chMu.Lock()
	close(d.changed)
	d.changed = make(chan struct{})
	d.chMu.Unlock()
}

// changes returns a channel closed at the cache's next change.
func (d *Driver) changes() <-chan struct{} {
	d.chMu.Lock()
	defer d.chMu.Unlock()
	return d.changed
}

// waitPod waits until cond holds for pod name in the cache (a nil pod: gone), or ctx
// ends. cond returns done, or an error that ends the wait.
func (d *Driver) waitPod(ctx context.Context, name string, cond func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	for {
		ch := d.changes()
		p, err := d.pods.Get(name)
		if err != nil {
			p = nil
		}
		if ok, err := cond(p); err != nil || ok {
			return p, err
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-ch:
		case <-time.After(time.Second): // a safety net; changes arrive as events
		}
	}
}

// trim keeps what the driver reads of a pod: its metadata without managed fields, its
// workspace claim, its node, and its phase, IP and container states.
func trim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
		Labels: p.Labels, Annotations: p.Annotations, CreationTimestamp: p.CreationTimestamp,
		DeletionTimestamp: p.DeletionTimestamp,
	}}
	out.Spec.NodeName = p.Spec.NodeName
	for _, v := range p.Spec.Volumes {
		if v.Name == volWorkspace && v.PersistentVolumeClaim != nil {
			out.Spec.Volumes = []corev1.Volume{{Name: v.Name, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.PersistentVolumeClaim.ClaimName}}}}
		}
	}
	out.Status = corev1.PodStatus{Phase: p.Status.Phase, Reason: p.Status.Reason, Message: p.Status.Message, PodIP: p.Status.PodIP}
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{Name: cs.Name, State: cs.State, RestartCount: cs.RestartCount})
	}
	return out, nil
}

// RequestCounter counts the API requests of a client.
type RequestCounter struct{ n atomic.Int64 }

// Load is the count so far.
func (c *RequestCounter) Load() int64 { return c.n.Load() }

func (c *RequestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.n.Add(1)
		return rt.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// agentHash is the first 12 hex of the agent binary's sha256.
func agentHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// podState says what a cached pod is: running (its workspace container runs), stopped
// (it ended, or was evicted: Start makes it again with its claim), or neither yet.
func podState(p *corev1.Pod) (running, stopped bool) {
	switch p.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		return false, true
	case corev1.PodRunning:
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == ctrWorkspace {
				if cs.State.Running != nil {
					return true, false
				}
				if cs.State.Terminated != nil {
					return false, true
				}
			}
		}
	}
	return false, false
}

// ready reports whether pod p may be dialled: running, not being deleted, with an IP.
func ready(p *corev1.Pod) error {
	if p.DeletionTimestamp != nil {
		return fmt.Errorf("%w: pod %s is being deleted", sandbox.ErrNotFound, p.Name)
	}
	running, _ := podState(p)
	if !running {
		return fmt.Errorf("%w: pod %s is %s", sandbox.ErrStopped, p.Name, p.Status.Phase)
	}
	return nil
}

// everything selects every cached pod (the informer is scoped already).
var everything = labels.Everything()
