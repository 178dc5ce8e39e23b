package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Kube returns the kubeconfig of the cluster the tests use: $KUBECONFIG, else the one
// `make kube` (scripts/kube.sh) writes under ~/.cache/cws-kube. The cluster must answer;
// otherwise the test is skipped locally and failed in CI, like Docker and Redis.
func Kube(t testing.TB) string {
	t.Helper()
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		if home, err := os.UserHomeDir(); err == nil {
			if p := filepath.Join(home, ".cache", "cws-kube", "kubeconfig"); fileExists(p) {
				kc = p
			}
		}
	}
	var err error
	if kc == "" {
		err = errors.New("no KUBECONFIG, and no cluster from `make kube`")
	} else {
		err = kubeReady(kc)
	}
	if err != nil && InCI() {
		t.Fatalf("a Kubernetes cluster is required in CI (run `make kube`): %v", err)
	}
	if err != nil {
		t.Skipf("skipping: no Kubernetes cluster (run `make kube`): %v", err)
	}
	return kc
}

func kubeReady(kc string) error {
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return err
	}
	rc.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("the API server at %s does not answer: %w", rc.Host, err)
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
