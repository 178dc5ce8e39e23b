package docker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/cwsdev/cws/sandbox"
)

// agentBinary is the cws-agent that TestMain builds; agentErr says why it could not.
// socketDir is the drivers' socket directory for this run (not /var/run/cws/agent).
var (
	agentBinary string
	agentErr    error
	socketDir   string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cws-docker-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBinary = filepath.Join(dir, "cws-agent")
	socketDir = filepath.Join(dir, "sockets")
	cmd := exec.Command("go", "build", "-o", agentBinary, "github.com/cwsdev/cws/cmd/cws-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		agentErr = fmt.Errorf("build cws-agent: %v\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// skipOrFail skips the test locally and fails it in CI (CI=true).
func skipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// requireDocker returns a raw client for assertions, or skips when the engine is
// unreachable (fails in CI).
func requireDocker(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		skipOrFail(t, "docker client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(ctx); err != nil {
		skipOrFail(t, "docker engine unreachable: %v", err)
	}
	return cli
}

// requireImage skips when image is not on the engine (`make images` builds it).
func requireImage(t testing.TB, cli *client.Client, image string) {
	t.Helper()
	if _, err := cli.ImageInspect(t.Context(), image); err != nil {
		skipOrFail(t, "image %s missing (run `make images`): %v", image, err)
	}
}

// newDriver returns a Driver with the test agent, closed at the end of the test. It
// takes the socket path (the default on a local engine), under this run's socketDir.
func newDriver(t testing.TB) *Driver {
	t.Helper()
	return newDriverWith(t, Config{})
}

// newDriverWith is newDriver with cfg's Transport, SocketDir, Log and AgentBinary (the
// rest is set).
func newDriverWith(t testing.TB, cfg Config) *Driver {
	t.Helper()
	if agentErr != nil {
		skipOrFail(t, "%v", agentErr)
	}
	w := &testWriter{t: t}
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.AgentBinary = cmp.Or(cfg.AgentBinary, agentBinary)
	cfg.StopTimeout, cfg.Instance = 2*time.Second, "test-docker"
	cfg.SocketDir = cmp.Or(cfg.SocketDir, socketDir)
	if cfg.Log == nil {
		cfg.Log = log
	}
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		d.Close()
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return d
}

// testWriter sends log lines to t.Log until the test ends (bridge goroutines may log
// later than that).
type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// uniq is a fresh id for sessions and tenants, so tests never see each other's sandboxes.
func uniq(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "-" + hex.EncodeToString(b[:])
}

// cleanupSession force-removes, at the end of the test, whatever carries the session's
// label and its workspace volume, whatever the driver did.
func cleanupSession(t testing.TB, cli *client.Client, session string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.WithoutCancel(t.Context())
		cs, err := cli.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+session))})
		if err != nil {
			t.Errorf("cleanup list: %v", err)
		}
		for _, c := range cs {
			if err := cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				t.Errorf("cleanup container %s: %v", c.ID, err)
			}
		}
		if err := cli.VolumeRemove(ctx, volumeName(session), true); err != nil && !cerrdefs.IsNotFound(err) {
			t.Errorf("cleanup volume: %v", err)
		}
	})
}

// create creates a sandbox that is removed at the end of the test.
func create(t testing.TB, d *Driver, cli *client.Client, spec sandbox.Spec) sandbox.Info {
	t.Helper()
	cleanupSession(t, cli, spec.Session)
	info, err := d.Create(t.Context(), spec)
	if err != nil {
		t.Fatalf("Create(%s): %v", spec.Session, err)
	}
	return info
}
