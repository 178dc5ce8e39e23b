package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/version"
)

// cwsProc is a `cws serve` subprocess.
type cwsProc struct {
	t      testing.TB
	url    string
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
}

// requireRealDeps gates a test on Docker, the workspace image and the built binaries:
// skipped locally when Docker is absent, failed in CI.
func requireRealDeps(t *testing.T) {
	t.Helper()
	requireBinaries(t)
	testenv.Docker(t)
	if onKube() {
		requireKube(t)
	}
	out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", version.WorkspaceImage).CombinedOutput()
	if err != nil {
		err = fmt.Errorf("image %s: %v: %s (run `make images`)", version.WorkspaceImage, err, bytes.TrimSpace(out))
	}
	testenv.RequireCI(t, version.WorkspaceImage, err)
}

// freeAddr picks an unused loopback address.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// instance is this run's cws.instance: the sandboxes its cws processes own.
var instance = "e2e-" + runID

// startCWS runs `cws serve` on addr with the fixture's tenants and Redis, and waits
// for /readyz. The reaper's interval is long, so only the startup reconcile runs.
// On failure the test prints the server's log.
func startCWS(t testing.TB, fx *fixture, redisURL, addr string) *cwsProc {
	t.Helper()
	return startCWSWith(t, fx, redisURL, addr)
}

// startCWSWith is startCWS with extra flags, which override the defaults above.
func startCWSWith(t testing.TB, fx *fixture, redisURL, addr string, extra ...string) *cwsProc {
	t.Helper()
	return startCWSEnv(t, fx, redisURL, addr, nil, extra...)
}

// startCWSEnv is startCWSWith with extra environment variables (KEY=VALUE).
func startCWSEnv(t testing.TB, fx *fixture, redisURL, addr string, env []string, extra ...string) *cwsProc {
	t.Helper()
	logs := &syncBuffer{}
	args := []string{"serve",
		"--addr", addr, "--tenants", fx.path, "--redis-url", redisURL,
		"--agent-binary", agentBinary, "--instance", instance, "--reap-every", "1h", "--drain-timeout", "5s"}
	args = append(args, driverArgs()...)
	cmd := exec.Command(cwsBinary, append(args, extra...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cws: %v", err)
	}
	p := &cwsProc{t: t, url: "http://" + addr, cmd: cmd, logs: logs, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("cws serve log (%s):\n%s", addr, logs.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("cws serve exited before it was ready:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("cws serve not ready after 60 s:\n%s", logs.String())
		}
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *cwsProc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// deleteAll deletes every session of the given tenants, so that no container
// outlives the test.
func (p *cwsProc) deleteAll(t testing.TB, fx *fixture, tenants ...string) {
	t.Helper()
	for _, tn := range tenants {
		tok := fx.token(t, tn, "cleanup", "")
		r := do(t, nil, p.url, http.MethodGet, "/v1/sessions", tok, nil, nil)
		if r.status != http.StatusOK {
			t.Errorf("cleanup: list %s: %d %s", tn, r.status, r.body)
			continue
		}
		for _, s := range decode[struct{ Sessions []sessionView }](t, r).Sessions {
			if d := do(t, nil, p.url, http.MethodDelete, "/v1/sessions/"+s.ID, tok, nil, nil); d.status != http.StatusNoContent {
				t.Errorf("cleanup: delete %s: %d %s", s.ID, d.status, d.body)
			}
		}
	}
}

// metrics returns the /metrics exposition.
func (p *cwsProc) metrics(t testing.TB) string {
	t.Helper()
	r := do(t, nil, p.url, http.MethodGet, "/metrics", "", nil, nil)
	if r.status != http.StatusOK {
		t.Fatalf("/metrics: %d", r.status)
	}
	return string(r.body)
}

// syncBuffer collects a subprocess's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
