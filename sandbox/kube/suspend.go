package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cwsdev/cws/sandbox"
)

// A suspended sandbox is a workspace claim without a pod: Suspend deletes the pod and
// keeps its claim, which it marks (label cws.suspended=true) and annotates with the
// pod as it was (annSuspendedPod) and the session's annotations. Start makes the pod
// again from that. The claim's labels and annotations are the ground truth a restarted
// cws adopts a suspended session from (List reports suspended claims as stopped
// sandboxes).
const (
	labelSuspended  = "cws.suspended"
	annSuspendedPod = "cws.suspended-pod"
	// annSuspending marks a pod that a suspend deletes: it is going, but its session
	// is not (List reports it stopped, never Deleted, so nothing removes its claim).
	annSuspending = "cws.suspending"
)

// KeepsDisk reports whether a sandbox's files outlive its pod: only on a claim
// (--kube-storage-class). An emptyDir dies with the pod, so a suspend archives.
func (d *Driver) KeepsDisk() bool { return d.cfg.StorageClass != "" }

// claimFor is the workspace claim named after pod id (podName ↔ claimName).
func claimFor(id string) string { return claimName(strings.TrimPrefix(id, "cws-")) }

// Suspend deletes pod id and keeps its workspace claim, annotated with the pod, so
// that Start makes it again with the same files. A pod without a claim can't be
// suspended (its files would die with it); a missing pod is ErrNotFound.
func (d *Driver) Suspend(ctx context.Context, id string) error {
	full, err := d.cs.CoreV1().Pods(d.ns).Get(ctx, id, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, serr := d.suspendedClaim(ctx, id); serr == nil {
			return nil // suspended already
		}
		return fmt.Errorf("suspend sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("suspend sandbox %s: %w", id, err)
	}
	claim := claimOf(full)
	if claim == "" {
		return fmt.Errorf("suspend sandbox %s: %w: its workspace is an emptyDir, which dies with the pod", id, sandbox.ErrInvalid)
	}
	next := corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: full.Name, Namespace: full.Namespace, Labels: full.Labels, Annotations: full.Annotations},
		Spec:       full.Spec}
	next.Spec.NodeName = "" // the scheduler picks again
	raw, err := json.Marshal(next)
	if err != nil {
		return err
	}
	ann := map[string]string{annSuspendedPod: string(raw)}
	for k, v := range full.Annotations {
		if strings.HasPrefix(k, "cws.") && k != annSecret {
			ann[k] = v // the session's: adoption reads them from the claim
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]string{labelSuspended: "true"}, "annotations": ann}})
	if _, err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Patch(ctx, claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("suspend sandbox %s: mark claim %s: %w", id, claim, err)
	}
	d.pool.DropStream(id)
	mark, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annSuspending: "true"}}})
	if _, err := d.cs.CoreV1().Pods(d.ns).Patch(ctx, id, types.MergePatchType, mark, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("suspend sandbox %s: mark the pod: %w", id, err)
	}
	grace := int64(1)
	uid := full.UID
	if err := d.cs.CoreV1().Pods(d.ns).Delete(ctx, id, metav1.DeleteOptions{GracePeriodSeconds: &grace,
		Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("suspend sandbox %s: delete the pod: %w", id, err)
	}
	if err := d.waitGone(ctx, id, uid); err != nil {
		return fmt.Errorf("suspend sandbox %s: %w", id, err)
	}
	d.log.Info("sandbox suspended: pod deleted, claim kept", "pod", id, "claim", claim)
	return nil
}

// waitGone waits until pod id of uid has left the cache: a suspend is done when
// nothing runs, and a resume can make the pod again only once the old one is gone.
func (d *Driver) waitGone(ctx context.Context, id string, uid types.UID) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := d.waitPod(wctx, id, func(p *corev1.Pod) (bool, error) { return p == nil || p.UID != uid, nil }); err != nil {
		return fmt.Errorf("the pod did not go: %w", err)
	}
	return nil
}

// suspendedClaim is pod id's claim when it is marked suspended.
func (d *Driver) suspendedClaim(ctx context.Context, id string) (*corev1.PersistentVolumeClaim, error) {
	c, err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Get(ctx, claimFor(id), metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
		}
		return nil, err
	}
	if c.Labels[labelSuspended] != "true" || c.Annotations[annSuspendedPod] == "" || c.DeletionTimestamp != nil {
		return nil, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrNotFound)
	}
	return c, nil
}

// resume makes a suspended sandbox's pod again from its claim, waits until it runs,
// and clears the claim's mark.
// Concurrent resumes of one pod (a wake, and a call that found it stopped) share one.
func (d *Driver) resume(ctx context.Context, id string) error {
	_, err, _ := d.resumes.Do(id, func() (any, error) { return nil, d.resumeOnce(ctx, id) })
	return err
}

func (d *Driver) resumeOnce(ctx context.Context, id string) error {
	c, err := d.suspendedClaim(ctx, id)
	if err != nil {
		if p, perr := d.get(id); perr == nil && p.DeletionTimestamp == nil && p.Annotations[annSuspending] != "true" {
			return d.waitRunning(ctx, id) // resumed already: its claim is unmarked
		}
		return err
	}
	if old, err := d.pods.Get(id); err == nil {
		if old.DeletionTimestamp == nil && old.Annotations[annSuspending] != "true" {
			// Made by a resume whose unmark of the claim has not landed yet: not going.
			if err := d.waitRunning(ctx, id); err != nil {
				return fmt.Errorf("resume sandbox %s: %w", id, err)
			}
			return nil
		}
		if err := d.waitGone(ctx, id, old.UID); err != nil { // a suspend's pod still going
			return fmt.Errorf("resume sandbox %s: %w", id, err)
		}
	}
	var p corev1.Pod
	if err := json.Unmarshal([]byte(c.Annotations[annSuspendedPod]), &p); err != nil {
		return fmt.Errorf("resume sandbox %s: the claim's pod: %w", id, err)
	}
	p.ResourceVersion, p.UID = "", ""
	if _, err := d.cs.CoreV1().Pods(d.ns).Create(ctx, &p, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	if err := d.waitRunning(ctx, id); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", id, err)
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"labels": map[string]any{labelSuspended: nil}, "annotations": map[string]any{annSuspendedPod: nil}}})
	if _, err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		d.log.Warn("resume: unmark the claim", "claim", c.Name, "err", err)
	}
	d.log.Info("sandbox resumed: pod made again on its claim", "pod", id, "claim", c.Name)
	return nil
}

// suspendedInfos lists this instance's suspended claims as stopped sandboxes (one API
// request), for List.
func (d *Driver) suspendedInfos(ctx context.Context, labels map[string]string) ([]sandbox.Info, error) {
	if d.cfg.StorageClass == "" {
		return nil, nil
	}
	cl, err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).List(ctx, metav1.ListOptions{
		LabelSelector: sandbox.LabelManaged + "=true," + sandbox.LabelInstance + "=" + d.instance + "," + labelSuspended + "=true"})
	if err != nil {
		return nil, fmt.Errorf("list suspended claims: %w", err)
	}
	var out []sandbox.Info
	for _, c := range cl.Items {
		a := maps.Clone(c.Annotations)
		if a[sandbox.LabelSession] == "" || !sandbox.Matches(a, labels) {
			continue
		}
		id := "cws-" + strings.TrimPrefix(c.Name, "cws-ws-")
		if _, err := d.pods.Get(id); err == nil {
			continue // its pod is back (a resume under way): List has it
		}
		info := sandbox.InfoFrom(id, a, false)
		info.Volume = c.Name
		info.Deleted = c.DeletionTimestamp != nil || a[annDeleted] == "true"
		out = append(out, info)
	}
	return out, nil
}

// RemoveSessionDisk removes a session's workspace claim that no pod uses (what an
// archive cut short left; workspace.SessionDiskRemover), and waits for it to go.
func (d *Driver) RemoveSessionDisk(ctx context.Context, session string) error {
	if d.cfg.StorageClass == "" {
		return nil
	}
	claim := claimName(session)
	if _, err := d.pods.Get(podName(session)); err == nil {
		return fmt.Errorf("claim %s: its pod is there", claim)
	}
	if err := d.cs.CoreV1().PersistentVolumeClaims(d.ns).Delete(ctx, claim, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove claim %s: %w", claim, err)
	}
	if !d.claimGoing(ctx, claim) {
		return fmt.Errorf("claim %s did not go", claim)
	}
	return nil
}
