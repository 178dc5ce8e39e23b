package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/version"
)

// The driver matrix. `go test ./e2e` runs the suite on the Docker driver;
// CWS_E2E_DRIVER=kubernetes runs it again, the same tests, against `cws serve --driver
// kubernetes` on the cluster that `make kube` started (KUBECONFIG, and the kubectl
// beside it). Tests that reach into Docker itself (the engine's own faults, docker
// exec as root, Docker's pool records) say dockerOnly; the Kubernetes faults are in
// kube_test.go.
var e2eDriver = func() string {
	if d := os.Getenv("CWS_E2E_DRIVER"); d != "" {
		return d
	}
	return "docker"
}()

func onKube() bool { return e2eDriver == "kubernetes" }

// kubeNamespace is this run's sessions' namespace (made by kubeSetup).
var kubeNamespace = "cws-e2e-" + runID

var (
	kubeNSOnce sync.Once
	kubeNSErr  error
)

// kubectlPath is the kubectl beside the kubeconfig (scripts/kube.sh puts it there), or
// the one on PATH.
func kubectlPath() string {
	if p := filepath.Join(filepath.Dir(os.Getenv("KUBECONFIG")), "kubectl"); os.Getenv("KUBECONFIG") != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "kubectl"
}

// kubectl runs kubectl against the test cluster.
func kubectl(args ...string) ([]byte, error) {
	cmd := exec.Command(kubectlPath(), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// requireKube gates the Kubernetes run on a cluster that answers, and makes the run's
// namespace once.
func requireKube(t testing.TB) {
	t.Helper()
	var err error
	if os.Getenv("KUBECONFIG") == "" {
		err = fmt.Errorf("KUBECONFIG is not set (run `make kube`, then export the KUBECONFIG=... it prints)")
	} else if _, err = kubectl("get", "--raw", "/readyz"); err == nil {
		kubeNSOnce.Do(func() {
			if _, err := kubectl("get", "ns", kubeNamespace); err != nil {
				_, kubeNSErr = kubectl("create", "ns", kubeNamespace)
			}
		})
		err = kubeNSErr
	}
	testenv.RequireCI(t, "a Kubernetes cluster", err)
}

// driverArgs are the cws serve flags of the matrix's driver.
func driverArgs() []string {
	if !onKube() {
		return nil
	}
	return []string{"--driver", "kubernetes", "--kube-namespace", kubeNamespace, "--kube-agent-image", "cws:" + version.Version}
}

// dockerOnly skips a test that reaches into Docker itself on the Kubernetes run.
func dockerOnly(t testing.TB, why string) {
	t.Helper()
	if onKube() {
		t.Skipf("docker driver only: %s", why)
	}
}

// boxOf is the sandbox (container id, or pod name) of session id.
func boxOf(t testing.TB, id string) string {
	t.Helper()
	var out []byte
	var err error
	if onKube() {
		out, err = kubectl("get", "pods", "-n", kubeNamespace, "-o", "name")
		var match []string
		for _, l := range strings.Fields(string(out)) {
			if strings.TrimPrefix(l, "pod/") == "cws-"+id {
				match = append(match, "cws-"+id)
			}
		}
		if err == nil && len(match) == 1 {
			return match[0]
		}
		// A pooled pod keeps its name: find it by its session annotation.
		out, err = kubectl("get", "pods", "-n", kubeNamespace, "-o",
			`jsonpath={range .items[*]}{.metadata.name}{" "}{.metadata.annotations.cws\.session}{"\n"}{end}`)
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == id {
				return f[0]
			}
		}
		t.Fatalf("pod of session %s: not found (%v)", id, err)
	}
	out, err = exec.Command("docker", "ps", "-q", "--filter", "label="+sandbox.LabelSession+"="+id).Output()
	box := strings.TrimSpace(string(out))
	if err != nil || box == "" || strings.Contains(box, "\n") {
		t.Fatalf("container of session %s: %q %v", id, out, err)
	}
	return box
}

// boxExec runs argv in a sandbox behind cws's back, as the tool user, in dir: docker
// exec -u 1000, or kubectl exec (a pod's processes all run as its tool uid).
func boxExec(box, dir string, argv ...string) ([]byte, error) {
	return boxCommand(box, dir, argv...).CombinedOutput()
}

// boxCommand is boxExec's command, not started.
func boxCommand(box, dir string, argv ...string) *exec.Cmd {
	if onKube() {
		script := `cd "$1" && shift && exec "$@"`
		args := append([]string{"exec", "-n", kubeNamespace, box, "-c", "workspace", "--", "sh", "-c", script, "sh", dir}, argv...)
		return exec.Command(kubectlPath(), args...)
	}
	args := append([]string{"exec", "-u", "1000", "-w", dir, box}, argv...)
	return exec.Command("docker", args...)
}

// sandboxLogs is the tail of a sandbox's log (the agent's).
func sandboxLogs(box string) []byte {
	if onKube() {
		out, _ := kubectl("logs", "-n", kubeNamespace, box, "-c", "workspace", "--tail", "40")
		return out
	}
	out, _ := exec.Command("docker", "logs", "--tail", "40", box).CombinedOutput()
	return out
}
