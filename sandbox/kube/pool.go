package kube

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/pool"
)

// The warm pool on Kubernetes: pooled pods are made like a session's, in the pool
// class (the policy defaults, no egress), labelled cws.pool=true and annotated with
// the image, class and owner, with no session annotations. Binding one is a single
// conditional patch of its annotations (lifecycle.go), so there is no half-bound pod.

// poolEngine is the Driver as its pool's pool.Engine.
type poolEngine struct{ *Driver }

// Make creates one pooled pod of image (and its claim), waits for it to run and for
// its agent to answer, and pre-opens a stream for its session's first call.
func (e poolEngine) Make(ctx context.Context, image string) (pool.Box, error) {
	d := e.Driver
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	t0 := time.Now()
	rnd := randomName()
	name, claim := podName(rnd), ""
	spec := sandbox.Spec{Session: rnd, Image: image}
	class, _ := pool.ClassOf(spec, d.defaults)
	labels := d.podLabels(spec)
	labels[labelPooled] = "true"
	ann := map[string]string{pool.LabelPool: image, pool.LabelPoolClass: class.Key(), pool.LabelPoolOwner: d.pool.Owner(),
		sandbox.LabelManaged: "true", sandbox.LabelInstance: d.instance, sandbox.LabelImage: image}
	if d.cfg.StorageClass != "" {
		claim = claimName(rnd)
		if _, err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Create(ctx, d.claim(claim, labels, ann), metav1.CreateOptions{}); err != nil {
			return pool.Box{}, fmt.Errorf("pool %s: create claim: %w", image, err)
		}
	}
	p := d.pod(name, claim, spec, newSecret())
	p.Labels = labels
	for _, k := range sandbox.SessionKeys {
		delete(p.Annotations, k)
	}
	for k, v := range ann {
		p.Annotations[k] = v
	}
	if _, err := d.cs.CoreV1().Pods(d.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		d.deleteClaim(ctx, claim)
		return pool.Box{}, fmt.Errorf("pool %s: create pod: %w", image, err)
	}
	made := time.Now()
	if err := d.waitRunning(ctx, name); err != nil {
		d.cleanup(ctx, name, claim)
		return pool.Box{}, fmt.Errorf("pool %s: %w", image, err)
	}
	running := time.Now()
	if err := d.pingAgent(ctx, name); err != nil {
		d.cleanup(ctx, name, claim)
		return pool.Box{}, fmt.Errorf("pool %s: %w", image, err)
	}
	b := pool.Box{ID: name, Volume: claim, Limits: d.defaults, Made: time.Now(), Stream: d.preopen(ctx, name)}
	d.log.Debug("pooled pod made", "pod", name, "create", made.Sub(t0).Round(time.Millisecond),
		"running_after", running.Sub(made).Round(time.Millisecond), "agent_after", b.Made.Sub(running).Round(time.Millisecond),
		"preopened", b.Stream != nil)
	return b, nil
}

// pingAgent waits until the agent in pod id answers a ping (at most a minute).
func (d *Driver) pingAgent(ctx context.Context, id string) error {
	return agent.WaitReady(ctx, d.dialer(id), time.Minute)
}

// preopen opens an agent stream to a pooled pod for its session's first Attach; nil
// when it can't (the session dials as usual).
func (d *Driver) preopen(ctx context.Context, id string) io.ReadWriteCloser {
	return agent.Preopen(ctx, d.dialer(id))
}

// dialer dials pod id's agent.
func (d *Driver) dialer(id string) agent.DialFunc {
	return func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, id) }
}

// Sweep looks at the cached pooled pods (see pool.Engine).
func (e poolEngine) Sweep(ctx context.Context, starting bool) error {
	d := e.Driver
	ps, err := d.pods.List(everything)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Labels[labelPooled] != "true" || p.Annotations[sandbox.LabelSession] != "" || p.DeletionTimestamp != nil {
			continue // not pooled, a session's, or going
		}
		age := time.Since(p.CreationTimestamp.Time)
		if p.Annotations[pool.LabelPoolOwner] != d.pool.Owner() {
			if age > 2*d.pool.MaxAge() {
				d.log.Info("removing another owner's old pooled pod", "pod", p.Name, "owner", p.Annotations[pool.LabelPoolOwner])
				_ = d.Remove(ctx, p.Name)
			}
			continue
		}
		running, stopped := podState(p)
		switch {
		case !starting && stopped:
			if b, ok := d.pool.Unready(p.Name); ok {
				b.Close()
				d.pool.Signal()
				_ = d.Remove(ctx, p.Name)
			}
			continue
		case !starting:
			continue // in the pool, or being made
		case running && d.adoptable(p) && d.adopt(ctx, p):
			continue
		}
		d.log.Info("removing pooled pod", "pod", p.Name)
		if err := d.Remove(ctx, p.Name); err != nil {
			d.log.Warn("remove pooled pod", "pod", p.Name, "err", err)
		}
	}
	return nil
}

// adoptable: a pooled pod of a configured pool, in its class, with this agent.
func (d *Driver) adoptable(p *corev1.Pod) bool {
	image := p.Annotations[pool.LabelPool]
	want, _ := pool.ClassOf(sandbox.Spec{Image: image}, d.defaults)
	return d.pool.Serves(image) && p.Annotations[pool.LabelPoolClass] == want.Key() && p.Annotations[annAgent] == d.agentHash
}

func (d *Driver) adopt(ctx context.Context, p *corev1.Pod) bool {
	image := p.Annotations[pool.LabelPool]
	if !d.pool.Room(image) || d.pingAgent(ctx, p.Name) != nil {
		return false
	}
	b := pool.Box{ID: p.Name, Volume: claimOf(p), Limits: d.defaults, Made: p.CreationTimestamp.Time, Stream: d.preopen(ctx, p.Name)}
	if !d.pool.Adopt(image, b) {
		b.Close()
		return false
	}
	d.log.Info("pooled pod adopted", "pod", p.Name, "image", image)
	return true
}

// RemoveOrphanVolumes removes the workspace claims of this instance's sessions whose
// pod is gone (a pod deleted behind cws's back leaves its claim, which no session can
// reach again), and of pooled pods that are gone. Only claims older than olderThan, of
// tenants serves says yes to (pooled ones: of no tenant), used by no pod, go.
func (d *Driver) RemoveOrphanVolumes(ctx context.Context, olderThan time.Duration, serves func(tenant string) bool) ([]string, error) {
	if d.cfg.StorageClass == "" {
		return nil, nil
	}
	ps, err := d.pods.List(everything)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, p := range ps {
		used[claimOf(p)] = true
	}
	cl, err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).List(ctx, metav1.ListOptions{
		LabelSelector: sandbox.LabelManaged + "=true," + sandbox.LabelInstance + "=" + d.instance})
	if err != nil {
		return nil, fmt.Errorf("orphan claims: %w", err)
	}
	var removed []string
	for _, c := range cl.Items {
		a := c.Annotations
		pooled := a[pool.LabelPool] != "" && a[sandbox.LabelSession] == ""
		if used[c.Name] || c.DeletionTimestamp != nil || time.Since(c.CreationTimestamp.Time) < olderThan || c.Labels[labelSuspended] == "true" ||
			(!pooled && !serves(a[sandbox.LabelTenant])) {
			continue
		}
		if _, err := d.pods.Get(podName(strings.TrimPrefix(c.Name, "cws-ws-"))); err == nil {
			continue // its pod is back (a restart) since the listing
		}
		if err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			d.log.Warn("remove orphan workspace claim", "claim", c.Name, "err", err)
			continue
		}
		removed = append(removed, c.Name)
		d.log.Info("orphan workspace claim removed", "claim", c.Name, "session", a[sandbox.LabelSession])
	}
	return removed, nil
}
