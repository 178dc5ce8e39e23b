package e2e_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/cwsdev/cws/internal/testenv"
)

// TestKubeFaults: the Kubernetes driver's faults, on the cluster `make kube` started.
// They run on the matrix's Kubernetes leg (CWS_E2E_DRIVER=kubernetes):
//   - cws restarted with an empty store adopts its pods back from their labels;
//   - a pod deleted behind cws's back is a lost session (-32001, session_lost);
//   - the kubelet restarted: sessions keep working through it and after it;
//   - the API server unreachable (stopped) for 20 s: calls on existing sessions keep
//     working on the direct path, and a create answers retryably (503, Retry-After);
//   - two replicas sharing Redis: a session created through one is served by the other.
func TestKubeFaults(t *testing.T) {
	if !onKube() {
		t.Skip("the Kubernetes leg of the matrix only (CWS_E2E_DRIVER=kubernetes)")
	}
	requireRealDeps(t)
	fx := newFixture(t)

	t.Run("cws restarted adopts its pods", func(t *testing.T) {
		addr := freeAddr(t)
		p := startCWS(t, fx, "", addr) // the embedded store: nothing survives but the pods
		tok := fx.token(t, tenantAcme, "kira", "")
		c := connect(t, p.url+"/mcp", tok, "")
		c.call(t, "writeFile", map[string]any{"path": "kept.txt", "contents": "in the pod\n"})
		id := onlySession(t, p, tok, "kira").ID
		p.kill()
		p2 := startCWS(t, fx, "", addr)
		t.Cleanup(func() { p2.deleteAll(t, fx, tenantAcme) })
		if got := onlySession(t, p2, tok, "kira").ID; got != id {
			t.Fatalf("after a restart the session is %s, want %s adopted", got, id)
		}
		c2 := connect(t, p2.url+"/mcp", tok, "")
		if got := c2.call(t, "readFile", map[string]any{"path": "kept.txt"}); got["content"] != "in the pod\n" {
			t.Errorf("readFile after cws restarted = %v", got)
		}
	})

	redis := testenv.Redis(t)
	p := startCWS(t, fx, redis, freeAddr(t))
	t.Cleanup(func() { p.deleteAll(t, fx, tenantAcme) })

	t.Run("pod deleted is session_lost", func(t *testing.T) {
		tok := fx.token(t, tenantAcme, "lena", "")
		c := connect(t, p.url+"/mcp", tok, "")
		c.call(t, "writeFile", map[string]any{"path": "a.txt", "contents": "a"})
		id := onlySession(t, p, tok, "lena").ID
		if out, err := kubectl("delete", "pod", "-n", kubeNamespace, boxOf(t, id), "--grace-period=0", "--force", "--wait"); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		_, err := c.callRaw("readFile", map[string]any{"path": "a.txt"}, nil)
		var we *jsonrpc.Error
		if !errors.As(err, &we) || we.Code != -32001 {
			t.Fatalf("readFile after the pod was deleted = %v, want JSON-RPC -32001", err)
		}
		var data struct{ Reason string }
		_ = json.Unmarshal(we.Data, &data)
		if data.Reason != "session_lost" {
			t.Errorf("data = %s, want reason session_lost", we.Data)
		}
	})

	tok := fx.token(t, tenantAcme, "mona", "")
	c := connect(t, p.url+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "m.txt", "contents": "mona\n"})

	t.Run("kubelet restarted", func(t *testing.T) {
		stopComponent(t, "kubelet", syscall.SIGTERM)
		if got := c.call(t, "readFile", map[string]any{"path": "m.txt"}); got["content"] != "mona\n" {
			t.Errorf("readFile with the kubelet down = %v", got)
		}
		kubeUp(t)
		c.call(t, "writeFile", map[string]any{"path": "after-kubelet.txt", "contents": "x"})
		r := c.call(t, "runCommand", map[string]any{"command": "cat", "args": []string{"m.txt"}})
		if r["stdout"] != "mona\n" {
			t.Errorf("runCommand after the kubelet restarted = %v", r)
		}
	})

	t.Run("API server unreachable for 20 s", func(t *testing.T) {
		pid := componentPID(t, "kube-apiserver")
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		cont := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
		t.Cleanup(cont)
		start := time.Now()
		n := 0
		for time.Since(start) < 20*time.Second {
			if got := c.call(t, "readFile", map[string]any{"path": "m.txt"}); got["content"] != "mona\n" {
				t.Fatalf("readFile with the API server stopped = %v", got)
			}
			r := c.call(t, "runCommand", map[string]any{"command": "echo", "args": []string{"ok"}})
			if r["stdout"] != "ok\n" {
				t.Fatalf("runCommand with the API server stopped = %v", r)
			}
			n++
			time.Sleep(500 * time.Millisecond)
		}
		other := fx.token(t, tenantAcme, "nina", "")
		r := do(t, nil, p.url, http.MethodPost, "/v1/sessions", other, nil, nil)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("create with the API server stopped = %d (Retry-After %q) %s, want 503 with Retry-After", r.status, r.header.Get("Retry-After"), r.body)
		}
		cont()
		t.Logf("%d rounds of calls in %s with the API server stopped", n, time.Since(start).Round(time.Second))
		waitFor(t, time.Minute, "the API server to answer again", func() bool { _, err := kubectl("get", "--raw", "/readyz"); return err == nil })
		r = do(t, nil, p.url, http.MethodPost, "/v1/sessions", other, nil, nil)
		if r.status != http.StatusCreated {
			t.Errorf("create after the API server came back = %d %s", r.status, r.body)
		}
	})

	t.Run("two replicas serve one session", func(t *testing.T) {
		q := startCWSWith(t, fx, redis, freeAddr(t), "--pool-owner", "replica-2")
		cq := connect(t, q.url+"/mcp", tok, "")
		if got := cq.call(t, "readFile", map[string]any{"path": "m.txt"}); got["content"] != "mona\n" {
			t.Errorf("readFile through the second replica = %v", got)
		}
		cq.call(t, "writeFile", map[string]any{"path": "from-q.txt", "contents": "q"})
		if got := c.call(t, "readFile", map[string]any{"path": "from-q.txt"}); got["content"] != "q" {
			t.Errorf("the first replica reads %v, want the second's write", got)
		}
	})
}

// kubeState is scripts/kube.sh's state directory.
func kubeState() string {
	if s := os.Getenv("CWS_KUBE_STATE"); s != "" {
		return s
	}
	return "/var/lib/cws-kube"
}

func componentPID(t testing.TB, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(kubeState(), "run", name+".pid"))
	if err != nil {
		t.Fatalf("%s's pid: %v (is the cluster from `make kube` running here?)", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// stopComponent signals a cluster component and waits for it to exit.
func stopComponent(t testing.TB, name string, sig syscall.Signal) {
	t.Helper()
	pid := componentPID(t, name)
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, name+" to exit", func() bool { return syscall.Kill(pid, 0) != nil })
	t.Cleanup(func() { kubeUp(t) })
}

// kubeUp runs `scripts/kube.sh up`, which starts what is not running.
func kubeUp(t testing.TB) {
	t.Helper()
	cmd := exec.Command("../scripts/kube.sh", "up")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/kube.sh up: %v\n%s", err, out)
	}
}
