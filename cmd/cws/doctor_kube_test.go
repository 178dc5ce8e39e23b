package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/version"
)

// TestDoctorKubernetes runs `cws doctor --driver kubernetes` against the local cluster:
// everything in place passes; a missing namespace, storage class or image fails with
// what to do; credentials bound to a Role short of the driver's verbs are told which
// verbs and which rules to add.
func TestDoctorKubernetes(t *testing.T) {
	kc := testenv.Kube(t)
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := fmt.Sprintf("cws-doctor-%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000) // a namespace being deleted keeps its name a while
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })

	doctor := func(args ...string) (string, int) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := run(ctx, append([]string{"doctor", "--driver", "kubernetes", "--server", "http://127.0.0.1:1"}, args...),
			func(string) string { return "" }, &out, &errOut)
		code := 0
		var ee exitError
		if errors.As(err, &ee) {
			code = ee.code
		} else if err != nil {
			t.Fatalf("doctor %v: %v", args, err)
		}
		return out.String(), code
	}
	images := []string{"--kube-agent-image", "cws:" + version.Version, "--image", version.WorkspaceImage}

	// Everything in place (the cluster-admin kubeconfig of `make kube`).
	got, code := doctor(append([]string{"--kubeconfig", kc, "--kube-namespace", ns, "--kube-storage-class", "cws-local"}, images...)...)
	t.Logf("doctor:\n%s", got)
	if code != 0 {
		t.Errorf("doctor with everything in place exited %d", code)
	}
	wantContains(t, "doctor", got, "✔ Kubernetes cluster v1.", "✔ namespace "+ns+" exists",
		"✔ may get, list, watch, create, delete, patch pods in "+ns, "✔ may create, get pods/exec in "+ns,
		"✔ may get, create networkpolicies.networking.k8s.io in "+ns, "✔ storage class cws-local exists",
		"✔ image cws:"+version.Version+" on every node", "✔ image "+version.WorkspaceImage+" on every node", "All checks passed.")

	// A namespace, a storage class and an image that are not there.
	got, code = doctor("--kubeconfig", kc, "--kube-namespace", ns+"-nope", "--kube-storage-class", "nope", "--kube-agent-image", "cws:nope")
	if code != 1 {
		t.Errorf("doctor with missing parts exited %d, want 1:\n%s", code, got)
	}
	wantContains(t, "doctor", got, "✘ namespace "+ns+"-nope does not exist", "kubectl create namespace "+ns+"-nope",
		"✘ storage class nope does not exist", "kubectl get storageclass", "✘ image cws:nope is on no node", "scripts/kube.sh import cws:nope")

	// No cluster at all.
	got, code = doctor("--kubeconfig", filepath.Join(t.TempDir(), "missing"))
	if code != 1 {
		t.Errorf("doctor without a cluster exited %d, want 1", code)
	}
	wantContains(t, "doctor", got, "✘ Kubernetes cluster", "give --kubeconfig")

	// A service account whose Role lets it only read pods.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "short", Namespace: ns}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "short", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}}
	bind := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "short", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "short"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "short", Namespace: ns}}}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "short", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	short := clientcmdapi.NewConfig()
	short.Clusters["c"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData, CertificateAuthority: rc.CAFile}
	short.AuthInfos["short"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	short.Contexts["short"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "short", Namespace: ns}
	short.CurrentContext = "short"
	shortPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*short, shortPath); err != nil {
		t.Fatal(err)
	}
	// The API server authorizes from an informer's copy of the RBAC objects: wait until
	// the new Role is in force (its pods list works) before asking the doctor.
	src, err := clientcmd.BuildConfigFromFlags("", shortPath)
	if err != nil {
		t.Fatal(err)
	}
	scs, err := kubernetes.NewForConfig(src)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := scs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the short Role is not in force after 30 s: %v", err)
		}
	}
	got, code = doctor(append([]string{"--kubeconfig", shortPath, "--kube-namespace", ns}, images...)...)
	t.Logf("doctor with a short Role:\n%s", got)
	if code != 1 {
		t.Errorf("doctor with a short Role exited %d, want 1", code)
	}
	wantContains(t, "doctor", got, "may not read namespaces", "✘ may not create, delete, patch pods in "+ns,
		"✘ may not create, get pods/exec in "+ns, "✘ may not get, create networkpolicies.networking.k8s.io in "+ns,
		"grant the driver's Role these rules", `{apiGroups: [""], resources: [pods/exec], verbs: [create, get]}`,
		"may not list nodes")
}
