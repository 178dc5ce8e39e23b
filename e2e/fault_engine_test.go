package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/cwsdev/cws/internal/testenv"
)

// OwnEngineEnv, set to 1, says the test harness owns the Docker engine, so a test may
// restart dockerd (which disturbs every container on it). CWS_TEST_ENGINE_RESTART is
// the command that restarts it (default: systemctl restart docker).
const OwnEngineEnv = "CWS_TEST_OWN_ENGINE"

// TestFaultDockerStop stops (kills, pauses) a session's container behind cws's back:
// the next call starts it again and answers on the same files; a reconcile pass also starts it
// without any call. A container removed behind cws's back is a lost session: -32001
// with data.reason "session_lost", never a new empty session under the same id.
func TestFaultDockerStop(t *testing.T) {
	dockerOnly(t, "stops the Docker engine")
	requireRealDeps(t)
	fx := newFixture(t)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), "--reap-every", "2s")
	t.Cleanup(func() { p.deleteAll(t, fx, tenantAcme) })
	tok := fx.token(t, tenantAcme, "dora", "")
	c := connect(t, p.url+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "kept.txt", "contents": "on the volume\n"})
	id := onlySession(t, p, tok, "dora").ID
	box := containerOf(t, id)

	// 1. docker stop, then a call: started again on the same files.
	dockerCLI(t, "stop", "-t", "1", box)
	if got := c.call(t, "readFile", map[string]any{"path": "kept.txt"}); got["content"] != "on the volume\n" {
		t.Errorf("readFile after docker stop = %v", got)
	}
	c.call(t, "writeFile", map[string]any{"path": "after.txt", "contents": "written after the stop\n"})

	// 1b. docker kill, and docker pause: the same repair.
	dockerCLI(t, "kill", box)
	if got := c.call(t, "readFile", map[string]any{"path": "kept.txt"}); got["content"] != "on the volume\n" {
		t.Errorf("readFile after docker kill = %v", got)
	}
	dockerCLI(t, "pause", box)
	if got := c.call(t, "readFile", map[string]any{"path": "kept.txt"}); got["content"] != "on the volume\n" {
		t.Errorf("readFile after docker pause = %v", got)
	}

	// 2. docker stop, then no call: reconcile starts it again.
	dockerCLI(t, "stop", "-t", "1", box)
	waitFor(t, 90*time.Second, "reconcile to start the stopped container", func() bool { return running(t, box) })
	if got := c.call(t, "readFile", map[string]any{"path": "after.txt"}); got["content"] != "written after the stop\n" {
		t.Errorf("readFile after reconcile = %v", got)
	}
	if n, _ := metricValue(p.metrics(t), "cws_sandbox_restarted_total", map[string]string{"by": "reconcile"}); n < 1 {
		t.Errorf("cws_sandbox_restarted_total{by=reconcile} = %v, want ≥ 1", n)
	}

	// 3. Engine restart, only where the harness owns the engine.
	if os.Getenv(OwnEngineEnv) == "1" {
		restart := os.Getenv("CWS_TEST_ENGINE_RESTART")
		if restart == "" {
			restart = "systemctl restart docker"
		}
		if out, err := exec.Command("sh", "-c", restart).CombinedOutput(); err != nil {
			t.Fatalf("restart the engine (%s): %v: %s", restart, err, out)
		}
		if got := c.call(t, "readFile", map[string]any{"path": "kept.txt"}); got["content"] != "on the volume\n" {
			t.Errorf("readFile after an engine restart = %v", got)
		}
	} else {
		t.Logf("engine restart skipped: set %s=1 where the test harness owns the engine", OwnEngineEnv)
	}

	// 4. docker rm -f: a lost session, said clearly, and the same id never comes back.
	dockerCLI(t, "rm", "-f", box)
	// Its volume outlives it; cws removes it 10 minutes on (an orphan), after this test.
	t.Cleanup(func() { _ = exec.Command("docker", "volume", "rm", "-f", "cws-ws-"+id).Run() })
	_, err := c.callRaw("readFile", map[string]any{"path": "kept.txt"}, nil)
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != -32001 {
		t.Fatalf("readFile after docker rm = %v, want JSON-RPC -32001", err)
	}
	var data struct{ Reason string }
	_ = json.Unmarshal(we.Data, &data)
	if data.Reason != "session_lost" {
		t.Errorf("data = %s, want reason session_lost", we.Data)
	}
	if r := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id, tok, nil, nil); r.status == http.StatusOK && decode[sessionView](t, r).State == "ready" {
		t.Errorf("the lost session %s reads as ready: %s", id, r.body)
	}
}

func dockerCLI(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %v: %v: %s", args, err, out)
	}
}

func running(t testing.TB, id string) bool {
	t.Helper()
	c, err := engine(t).ContainerInspect(context.Background(), id)
	return err == nil && c.State != nil && c.State.Running
}
