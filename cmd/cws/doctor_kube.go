package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cwsdev/cws/sandbox/kube"
)

// kubernetes checks what the Kubernetes driver needs: a cluster that answers, the
// sessions' namespace, every verb the driver uses there, the storage class of the
// workspace claims, and the agent and workspace images on the nodes.
func (d *doctor) kubernetes(ctx context.Context, o doctorOptions) {
	const hint = "give --kubeconfig (or set KUBECONFIG) for a cluster that answers; `make kube` starts a local one"
	rc, err := kube.RESTConfig(o.kubeconfig)
	if err != nil {
		d.fail(hint, "Kubernetes cluster: %v", err)
		d.skip("namespace, permissions, storage class and images: not checked without a cluster")
		return
	}
	rc.Timeout = doctorTimeout
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		d.fail(hint, "Kubernetes cluster at %s: %v", rc.Host, err)
		return
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		d.fail(hint, "Kubernetes cluster at %s: %v", rc.Host, err)
		d.skip("namespace, permissions, storage class and images: not checked without a cluster")
		return
	}
	d.ok("Kubernetes cluster %s at %s", v.GitVersion, rc.Host)

	ns := o.kubeNamespace
	switch _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); {
	case err == nil:
		d.ok("namespace %s exists", ns)
	case apierrors.IsNotFound(err):
		d.fail(fmt.Sprintf("create it: `kubectl create namespace %s` (label it pod-security.kubernetes.io/enforce=restricted), or install the Helm chart, which makes it", ns),
			"namespace %s does not exist", ns)
	case apierrors.IsForbidden(err):
		d.warn("", "namespace %s: these credentials may not read namespaces, so it was not checked (a namespaced Role, as the Helm chart's, can't)", ns)
	default:
		d.fail("", "namespace %s: %v", ns, err)
	}

	d.kubePermissions(ctx, cs, ns)

	switch sc := o.kubeStorageClass; {
	case sc == "":
		d.skip("storage class: none given (--kube-storage-class): workspaces are emptyDirs, whose files die with their pod")
	default:
		switch _, err := cs.StorageV1().StorageClasses().Get(ctx, sc, metav1.GetOptions{}); {
		case err == nil:
			d.ok("storage class %s exists", sc)
		case apierrors.IsNotFound(err):
			d.fail("list the cluster's with `kubectl get storageclass` and give one with --kube-storage-class, or none for emptyDir workspaces",
				"storage class %s does not exist", sc)
		case apierrors.IsForbidden(err):
			d.warn("", "storage class %s: these credentials may not read storage classes, so it was not checked", sc)
		default:
			d.fail("", "storage class %s: %v", sc, err)
		}
	}

	d.kubeImages(ctx, cs, append([]string{o.kubeAgentImage}, o.images...))
}

// kubePermissions asks the API server, one SelfSubjectAccessReview a verb, whether these
// credentials may do in ns what the driver does.
func (d *doctor) kubePermissions(ctx context.Context, cs kubernetes.Interface, ns string) {
	var missing []string
	for _, p := range kube.Permissions {
		var denied []string
		for _, verb := range p.Verbs {
			resource, sub, _ := strings.Cut(p.Resource, "/")
			r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: p.Group, Resource: resource, Subresource: sub},
			}}, metav1.CreateOptions{})
			if err != nil {
				d.fail("", "permissions: can't ask the API server (SelfSubjectAccessReview): %v", err)
				return
			}
			if !r.Status.Allowed {
				denied = append(denied, verb)
			}
		}
		name := p.Resource
		if p.Group != "" {
			name += "." + p.Group
		}
		if len(denied) == 0 {
			d.ok("may %s %s in %s", strings.Join(p.Verbs, ", "), name, ns)
			continue
		}
		missing = append(missing, fmt.Sprintf("{apiGroups: [%q], resources: [%s], verbs: [%s]}", p.Group, p.Resource, strings.Join(p.Verbs, ", ")))
		d.fail("", "may not %s %s in %s, which the driver needs for %s", strings.Join(denied, ", "), name, ns, p.Why)
	}
	if len(missing) > 0 {
		fmt.Fprintf(d.w, "    → grant the driver's Role these rules in %s (the Helm chart's Role has them all):\n", ns)
		for _, m := range missing {
			fmt.Fprintf(d.w, "        - %s\n", m)
		}
	}
}

// kubeImages looks for each image among those the nodes report holding. An image no
// node holds must be pulled when a pod first needs it: from a registry the nodes can
// reach, or not at all on an air-gapped cluster.
func (d *doctor) kubeImages(ctx context.Context, cs kubernetes.Interface, images []string) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if apierrors.IsForbidden(err) {
		d.warn("", "images: these credentials may not list nodes, so %s were not looked for", strings.Join(images, ", "))
		return
	}
	if err != nil {
		d.fail("", "images: list nodes: %v", err)
		return
	}
	for _, img := range images {
		var on []string
		for _, n := range nodes.Items {
			if nodeHas(n, img) {
				on = append(on, n.Name)
			}
		}
		switch {
		case len(on) == len(nodes.Items) && len(on) > 0:
			d.ok("image %s on every node (%d)", img, len(on))
		case len(on) > 0:
			d.warn("nodes without it pull it when a session lands there: make sure they can", "image %s on %d of %d nodes (%s)", img, len(on), len(nodes.Items), strings.Join(on, ", "))
		default:
			d.fail(fmt.Sprintf("push it to a registry the nodes pull from, or load it into each node's runtime (the local cluster: `scripts/kube.sh import %s`)", img),
				"image %s is on no node", img)
		}
	}
}

// nodeHas reports whether the node lists img among its images, by any of its names
// (the runtime reports the short name's docker.io/library/ form too).
func nodeHas(n corev1.Node, img string) bool {
	want := []string{img, "docker.io/" + img, "docker.io/library/" + img}
	for _, im := range n.Status.Images {
		if slices.ContainsFunc(im.Names, func(name string) bool { return slices.Contains(want, name) }) {
			return true
		}
	}
	return false
}
