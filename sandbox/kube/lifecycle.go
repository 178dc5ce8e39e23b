package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/pool"
)

// createTimeout bounds how long Create waits for a new pod to run: scheduling, the
// image (pulled if not present), the agent's init container.
const createTimeout = 2 * time.Minute

// Create makes the session's workspace claim (with a storage class) and pod, or binds
// a pooled pod when one fits, and returns once the pod runs. It does not wait for the
// agent (the agent client pings with retry). If a step after the claim fails, Create
// removes what it made. A session whose pod or claim exists already is ErrExists.
func (d *Driver) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if err := validate(spec); err != nil {
		return sandbox.Info{}, err
	}
	t0 := time.Now()
	if info, ok, err := d.fromPool(ctx, spec); ok {
		return info, err
	}
	name, claim := podName(spec.Session), ""
	log := d.log.With("session", spec.Session, "tenant", spec.Tenant, "image", spec.Image, "pod", name)
	if d.cfg.StorageClass != "" {
		claim = claimName(spec.Session)
		c := d.claim(claim, d.podLabels(spec), sandbox.Labels(spec, d.instance))
		_, err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Create(ctx, c, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) && d.claimGoing(ctx, claim) {
			// The session's claim of before (an archive removed it) is still going.
			_, err = d.cs.CoreV1().PersistentVolumeClaims(d.ns).Create(ctx, c, metav1.CreateOptions{})
		}
		if err != nil {
			if apierrors.IsAlreadyExists(err) {
				return sandbox.Info{}, fmt.Errorf("create sandbox %s: claim %s: %w", spec.Session, claim, sandbox.ErrExists)
			}
			return sandbox.Info{}, fmt.Errorf("create sandbox %s: create claim: %w", spec.Session, err)
		}
	}
	p, err := d.cs.CoreV1().Pods(d.ns).Create(ctx, d.pod(name, claim, spec, newSecret()), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// The session's pod of before (an archive, a suspend of an emptyDir) may still
		// be going: wait for it, then make this one.
		if old, gerr := d.pods.Get(name); gerr == nil && old.DeletionTimestamp != nil {
			if werr := d.waitGone(ctx, name, old.UID); werr == nil {
				p, err = d.cs.CoreV1().Pods(d.ns).Create(ctx, d.pod(name, claim, spec, newSecret()), metav1.CreateOptions{})
			}
		}
	}
	if err != nil {
		d.deleteClaim(ctx, claim)
		if apierrors.IsAlreadyExists(err) {
			return sandbox.Info{}, fmt.Errorf("create sandbox %s: pod %s: %w", spec.Session, name, sandbox.ErrExists)
		}
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: create pod: %w", spec.Session, err)
	}
	made := time.Now()
	if err := d.waitRunning(ctx, name); err != nil {
		d.cleanup(ctx, name, claim)
		return sandbox.Info{}, fmt.Errorf("create sandbox %s: %w", spec.Session, err)
	}
	log.Info("sandbox created", "uid", p.UID, "claim", claim, "create", made.Sub(t0).Round(time.Millisecond),
		"running_after", time.Since(made).Round(time.Millisecond))
	info := sandbox.InfoFrom(name, p.Annotations, true)
	info.Volume = cmpOr(claim, name)
	return info, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// waitRunning waits until pod name runs, and fails early on what will never run: an
// image that isn't there, a failed init container, a pod that ended.
func (d *Driver) waitRunning(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	_, err := d.waitPod(ctx, name, func(p *corev1.Pod) (bool, error) {
		if p == nil {
			return false, nil // not in the cache yet
		}
		if p.DeletionTimestamp != nil {
			return false, fmt.Errorf("%w: pod %s is being deleted", sandbox.ErrNotFound, name)
		}
		running, stopped := podState(p)
		if running {
			return true, nil
		}
		if stopped {
			return false, fmt.Errorf("pod %s ended before it ran: %s %s", name, p.Status.Reason, p.Status.Message)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				switch w.Reason {
				case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
					return false, fmt.Errorf("%w: container %s: %s: %s", sandbox.ErrInvalid, cs.Name, w.Reason, w.Message)
				case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
					return false, fmt.Errorf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
				}
			}
			if t := cs.State.Terminated; t != nil && cs.Name == ctrInstall && t.ExitCode != 0 {
				return false, fmt.Errorf("installing the agent failed (exit %d): %s", t.ExitCode, t.Message)
			}
		}
		return false, nil
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pod %s did not run within %s", name, createTimeout)
	}
	return err
}

// claimGoing waits (up to a minute) for a claim that is being deleted to be gone, and
// reports whether it went; false for a claim that stays.
func (d *Driver) claimGoing(ctx context.Context, claim string) bool {
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Get(ctx, claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true
		}
		if err != nil || c.DeletionTimestamp == nil || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// cleanup removes a half-made sandbox, even when ctx is already cancelled.
func (d *Driver) cleanup(ctx context.Context, name, claim string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	zero := int64(0)
	if err := d.cs.CoreV1().Pods(d.ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		d.log.Warn("cleanup: delete pod", "pod", name, "err", err)
	}
	d.deleteClaim(ctx, claim)
}

func (d *Driver) deleteClaim(ctx context.Context, claim string) {
	if claim == "" {
		return
	}
	if err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Delete(context.WithoutCancel(ctx), claim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		d.log.Warn("delete workspace claim", "claim", claim, "err", err)
	}
}

// get is pod id from the cache, or ErrNotFound.
func (d *Driver) get(id string) (*corev1.Pod, error) {
	p, err := d.pods.Get(id)
	if err != nil || p.Labels[sandbox.LabelManaged] != "true" {
		return nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	return p, nil
}

// Remove deletes a sandbox's pod and its workspace claim. A missing pod is not an
// error. The pod's deletion is what marks it: from then on List reports it Deleted.
func (d *Driver) Remove(ctx context.Context, id string) error {
	d.pool.DropStream(id)
	claim := ""
	if p, err := d.pods.Get(id); err == nil {
		claim = claimOf(p)
	} else if c, err := d.suspendedClaim(ctx, id); err == nil {
		claim = c.Name // suspended: no pod, its claim goes
	}
	grace := int64(1)
	err := d.cs.CoreV1().Pods(d.ns).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove sandbox %s: %w", id, err)
	}
	// The claim goes once no pod uses it (its protection finalizer waits for the pod).
	d.deleteClaim(ctx, claim)
	d.log.Info("sandbox removed", "pod", id, "claim", claim)
	return nil
}

// claimOf is the workspace claim of a (cached) pod, or "".
func claimOf(p *corev1.Pod) string {
	for _, v := range p.Spec.Volumes {
		if v.Name == volWorkspace && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// Start brings a stopped sandbox back: a pod that ended or was evicted is made again,
// with the same name, labels and workspace claim (its files come back; an emptyDir's
// do not). A running one is left alone; a missing one is ErrNotFound.
func (d *Driver) Start(ctx context.Context, id string) error {
	p, err := d.get(id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return d.resume(ctx, id) // suspended: its claim keeps the pod (suspend.go)
	}
	if err != nil {
		return err
	}
	if p.DeletionTimestamp != nil {
		if _, err := d.suspendedClaim(ctx, id); err == nil {
			return d.resume(ctx, id) // a suspend's pod still going
		}
		return fmt.Errorf("start sandbox %s: %w: it is being removed", id, sandbox.ErrNotFound)
	}
	running, stopped := podState(p)
	if running {
		return nil
	}
	if !stopped {
		return d.waitRunning(ctx, id)
	}
	return d.recreate(ctx, id, "it stopped")
}

// recreate replaces pod id by a fresh one of the same spec (and claim).
func (d *Driver) recreate(ctx context.Context, id, why string) error {
	full, err := d.cs.CoreV1().Pods(d.ns).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("restart sandbox %s: %w", id, sandbox.ErrNotFound)
		}
		return fmt.Errorf("restart sandbox %s: %w", id, err)
	}
	if full.Annotations[annDeleted] == "true" || full.DeletionTimestamp != nil {
		return fmt.Errorf("restart sandbox %s: %w: it is being removed", id, sandbox.ErrNotFound)
	}
	next := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: full.Name, Namespace: full.Namespace, Labels: full.Labels,
		Annotations: full.Annotations}, Spec: full.Spec}
	next.Spec.NodeName = "" // the scheduler picks again: the old node may be gone
	zero := int64(0)
	uid := full.UID
	if err := d.cs.CoreV1().Pods(d.ns).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &zero,
		Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("restart sandbox %s: delete the old pod: %w", id, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err = d.waitPod(wctx, id, func(p *corev1.Pod) (bool, error) { return p == nil || p.UID != uid, nil })
	cancel()
	if err != nil {
		return fmt.Errorf("restart sandbox %s: the old pod did not go: %w", id, err)
	}
	if _, err := d.cs.CoreV1().Pods(d.ns).Create(ctx, next, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("restart sandbox %s: %w", id, err)
	}
	d.log.Warn("sandbox pod made again", "pod", id, "why", why, "claim", claimOf(next))
	return d.waitRunning(ctx, id)
}

// sessionAnnotations are the sandbox labels a pod stands for; ok is false for a
// pooled pod bound to no session.
func sessionAnnotations(p *corev1.Pod) (map[string]string, bool) {
	a := p.Annotations
	if a[sandbox.LabelSession] == "" {
		return nil, false
	}
	return a, true
}

// infoOf is a cached pod's Info.
func infoOf(p *corev1.Pod) (sandbox.Info, bool) {
	a, ok := sessionAnnotations(p)
	if !ok {
		return sandbox.Info{}, false
	}
	running, _ := podState(p)
	info := sandbox.InfoFrom(p.Name, a, running)
	info.Volume = cmpOr(claimOf(p), p.Name)
	// A pod a suspend deletes is going, its session is not: stopped, not Deleted.
	info.Deleted = p.DeletionTimestamp != nil && a[annSuspending] != "true" || a[annDeleted] == "true"
	return info, true
}

// List reports every session pod (running or not) of this instance that carries all
// of the given labels, sorted by session, from the cache. Pooled pods are reported
// once bound to a session.
func (d *Driver) List(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	ps, err := d.pods.List(everything)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	out := make([]sandbox.Info, 0, len(ps))
	for _, p := range ps {
		info, ok := infoOf(p)
		if !ok || !sandbox.Matches(p.Annotations, labels) {
			continue
		}
		out = append(out, info)
	}
	if labels == nil || labels[sandbox.LabelSession] != "" {
		// Suspended sandboxes are claims without a pod: the reconciler and adoption
		// must see them (a probe with other labels costs no API request).
		sus, err := d.suspendedInfos(ctx, labels)
		if err != nil {
			return nil, err
		}
		out = append(out, sus...)
	}
	slices.SortFunc(out, func(a, b sandbox.Info) int { return strings.Compare(a.Session, b.Session) })
	return out, nil
}

// Inspect reports one sandbox by pod name, from the cache.
func (d *Driver) Inspect(ctx context.Context, id string) (sandbox.Info, error) {
	p, err := d.get(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	info, ok := infoOf(p)
	if !ok {
		return sandbox.Info{}, fmt.Errorf("inspect sandbox %s: %w: a pooled pod bound to no session", id, sandbox.ErrNotFound)
	}
	return info, nil
}

// fromPool binds a pooled pod to spec's session when one fits (pool.Serve): one merge
// patch of its annotations, made conditional on the pod's resourceVersion so that no
// two binds take one pod.
func (d *Driver) fromPool(ctx context.Context, spec sandbox.Spec) (sandbox.Info, bool, error) {
	return d.pool.Serve(ctx, spec, d.fits(spec),
		func(ctx context.Context, b pool.Box) (sandbox.Info, error) { return d.bind(ctx, b, spec) }, d.Remove)
}

// fits: a pooled pod serves a spec of its class whose cpu and memory are the
// defaults too (a pod's resources do not change once it runs).
func (d *Driver) fits(spec sandbox.Spec) bool {
	c, ok := pool.ClassOf(spec, d.defaults)
	want, _ := pool.ClassOf(sandbox.Spec{Image: spec.Image}, d.defaults)
	lim := sandbox.WithDefaults(spec.Limits, d.defaults)
	return ok && c == want && lim.NanoCPUs == d.defaults.NanoCPUs && lim.MemoryBytes == d.defaults.MemoryBytes
}

func (d *Driver) bind(ctx context.Context, b pool.Box, spec sandbox.Spec) (sandbox.Info, error) {
	p, err := d.pods.Get(b.ID)
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("bind sandbox %s: pooled pod %s is gone", spec.Session, b.ID)
	}
	t0 := time.Now()
	ann := sandbox.Labels(spec, d.instance)
	patch := map[string]any{"metadata": map[string]any{"resourceVersion": p.ResourceVersion, "annotations": ann}}
	body, _ := json.Marshal(patch)
	np, err := d.cs.CoreV1().Pods(d.ns).Patch(ctx, b.ID, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil {
		return sandbox.Info{}, fmt.Errorf("bind sandbox %s: %w", spec.Session, err)
	}
	d.log.Info("sandbox created from the pool", "session", spec.Session, "tenant", spec.Tenant, "image", spec.Image, "pod", b.ID,
		"bind", time.Since(t0).Round(time.Millisecond), "preopened", b.Stream != nil)
	info := sandbox.InfoFrom(b.ID, np.Annotations, true)
	info.Volume = cmpOr(b.Volume, b.ID)
	return info, nil
}

// ensureEgressPolicy makes the namespace's default-deny egress NetworkPolicy for this
// instance's pods that are not labelled cws.egress=true: one object for every session.
// The cluster's CNI must enforce NetworkPolicy for it to mean anything.
func (d *Driver) ensureEgressPolicy(ctx context.Context) error {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "cws-deny-egress-" + d.instance, Namespace: d.ns,
			Labels: map[string]string{sandbox.LabelManaged: "true", sandbox.LabelInstance: d.instance}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{
				MatchLabels:      map[string]string{sandbox.LabelManaged: "true", sandbox.LabelInstance: d.instance},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: labelEgress, Operator: metav1.LabelSelectorOpDoesNotExist}},
			},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      nil, // nothing may leave
		},
	}
	_, err := d.cs.NetworkingV1().NetworkPolicies(d.ns).Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
