package deploy_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/version"
)

// pauseImage is the sandbox image scripts/kube.sh builds and imports; it is the
// fallback test image (its /pause prints its version for `-v`).
const pauseImage = "localhost/cws-kube/pause:3.10"

// TestKube brings up the local cluster (scripts/kube.sh up, the same as `make kube`)
// and runs a hardened pod with a PVC of the hostpath StorageClass in it: Running,
// `kubectl exec` works, and everything is deleted again. The cluster stays up.
//
// It runs only with CWS_KUBE=1 or CI=true: the first `up` builds Kubernetes from
// source (about 12 minutes on 2 idle cores, 30 on a busy machine).
func TestKube(t *testing.T) {
	if os.Getenv("CWS_KUBE") != "1" && !testenv.InCI() {
		t.Skip("skipping: needs the local Kubernetes cluster, whose first build takes 10-30 min; " +
			"run `make kube`, then CWS_KUBE=1 go test ./deploy -run TestKube")
	}
	if os.Geteuid() != 0 {
		_, err := exec.LookPath("sudo")
		testenv.RequireCI(t, "root or sudo (scripts/kube.sh runs containerd and kubelet)", err)
	}
	root := repoRoot(t)
	c := command{dir: root, timeout: 80 * time.Minute}
	out := c.must(t, filepath.Join(root, "scripts", "kube.sh"), "up")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	kubeconfig, ok := strings.CutPrefix(last, "KUBECONFIG=")
	if !ok || !filepath.IsAbs(kubeconfig) {
		t.Fatalf("last line of scripts/kube.sh up is %q, want KUBECONFIG=<absolute path>", last)
	}
	kubectl := filepath.Join(filepath.Dir(kubeconfig), "kubectl")
	if !strings.Contains(out, kubectl) {
		t.Errorf("scripts/kube.sh up does not print the kubectl path %s", kubectl)
	}
	if got := c.must(t, filepath.Join(root, "scripts", "kube.sh"), "env"); strings.TrimSpace(got) != last {
		t.Errorf("scripts/kube.sh env = %q, want %q", got, last)
	}

	k := command{dir: root, timeout: 3 * time.Minute, env: []string{"KUBECONFIG=" + kubeconfig}}
	kc := func(args ...string) string { t.Helper(); return k.must(t, kubectl, args...) }

	// The workspace image when Docker has it (imported into the cluster), else pause.
	image, cmd, execArgs := pauseImage, "", []string{"/pause", "-v"}
	wantExec := "cws-kube-pause"
	if err := exec0(t, "docker", "image", "inspect", version.WorkspaceImage); err == nil {
		c.must(t, filepath.Join(root, "scripts", "kube.sh"), "import", version.WorkspaceImage)
		image, cmd = version.WorkspaceImage, `command: ["sleep", "infinity"]`
		// uid, the PVC's mount and the cluster DNS (kube.sh's CoreDNS behind 10.96.0.10).
		execArgs = []string{"sh", "-c", "id -u && test -d /data && echo data-ok && getent hosts kubernetes.default.svc.cluster.local"}
		wantExec = "1000\ndata-ok\n10.96.0.1 "
		t.Logf("using %s (imported from the local Docker engine)", image)
	} else {
		t.Logf("using %s: %s is not in the local Docker engine (make images builds it)", pauseImage, version.WorkspaceImage)
	}

	ns := fmt.Sprintf("cws-kube-test-%d", time.Now().UnixNano()%1_000_000)
	kc("create", "namespace", ns)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := k.run(ctx, kubectl, "delete", "namespace", ns, "--wait=true", "--timeout=90s"); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})

	manifest := filepath.Join(t.TempDir(), "pod.yaml")
	writeFile(t, manifest, fmt.Appendf(nil, `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: cws-hostpath
  resources:
    requests:
      storage: 64Mi
---
apiVersion: v1
kind: Pod
metadata:
  name: hardened
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsNonRoot: true
    runAsUser: 1000
    runAsGroup: 1000
    seccompProfile:
      type: RuntimeDefault
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    %s
    securityContext:
      runAsNonRoot: true
      runAsUser: 1000
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: [ALL]
      seccompProfile:
        type: RuntimeDefault
    resources:
      limits:
        cpu: 500m
        memory: 256Mi
    volumeMounts:
    - name: data
      mountPath: /data
  volumes:
  - name: data
    persistentVolumeClaim:
      claimName: data
`, image, cmd))
	kc("-n", ns, "apply", "-f", manifest)
	if _, err := k.run(t.Context(), kubectl, "-n", ns, "wait", "pvc/data",
		"--for=jsonpath={.status.phase}=Bound", "--timeout=90s"); err != nil {
		t.Fatalf("PVC not bound: %v\n%s", err, kc("-n", ns, "describe", "pvc", "data"))
	}
	if _, err := k.run(t.Context(), kubectl, "-n", ns, "wait", "pod/hardened",
		"--for=condition=Ready", "--timeout=150s"); err != nil {
		t.Fatalf("pod not ready: %v\n%s", err, kc("-n", ns, "describe", "pod", "hardened"))
	}
	if got := strings.TrimSpace(kc(append([]string{"-n", ns, "exec", "hardened", "--"}, execArgs...)...)); !strings.Contains(got, wantExec) {
		t.Errorf("kubectl exec %v = %q, want it to contain %q", execArgs, got, wantExec)
	}
	kc("-n", ns, "delete", "pod", "hardened", "--wait=true", "--timeout=60s")
	kc("-n", ns, "delete", "pvc", "data", "--wait=true", "--timeout=60s")
}

// exec0 runs a command for its exit status only.
func exec0(t *testing.T, name string, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).Run()
}
