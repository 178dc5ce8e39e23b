package docker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// envInvisible marks the inner run of TestSocketDirInvisibleToEngine: the socket
// directory it names is a tmpfs in this process's own mount namespace.
const envInvisible = "CWS_TEST_SOCKET_DIR_INVISIBLE"

// TestSocketDirInvisibleToEngine: cws in a container whose socket directory is not
// mounted at the same path on the engine's host. The engine refuses the bind mount;
// Create makes the sandbox without it, the driver switches to the exec stream, and
// calls work. Simulated with a tmpfs that only this test's mount namespace sees.
func TestSocketDirInvisibleToEngine(t *testing.T) {
	if dir := os.Getenv(envInvisible); dir != "" {
		invisibleInner(t, filepath.Join(dir, "agent"))
		return
	}
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	if agentErr != nil {
		skipOrFail(t, "%v", agentErr)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and unshare(1) to give the test a mount the engine cannot see")
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), unshare, "-m", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs cws-test "$1" && exec "$2" -test.run '^TestSocketDirInvisibleToEngine$' -test.v`, "sh", dir, os.Args[0])
	cmd.Env = append(os.Environ(), envInvisible+"="+dir, "CWS_TEST_AGENT="+agentBinary)
	out, err := cmd.CombinedOutput()
	t.Logf("inner run:\n%s", out)
	if err != nil {
		t.Fatalf("inner run: %v", err)
	}
}

func invisibleInner(t *testing.T, socketDir string) {
	agentBinary, agentErr = os.Getenv("CWS_TEST_AGENT"), nil
	cli := requireDocker(t)
	d := newDriverWith(t, Config{SocketDir: socketDir})
	if name, why := d.Transport(); name != TransportSocket {
		t.Fatalf("Transport = %s (%s), want socket before the first create", name, why)
	}
	info := create(t, d, cli, sandbox.Spec{Session: uniq("invisible"), Tenant: uniq("tenant"), Image: version.TestImage})
	if name, why := d.Transport(); name != TransportExec {
		t.Fatalf("Transport = %s (%s), want exec once the engine refused the mount", name, why)
	}
	c, err := cli.ContainerInspect(t.Context(), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := socketOf(c.Config.Labels, c.Config.Env); ok {
		t.Errorf("the sandbox has a socket directory the engine cannot mount")
	}
	cl := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, info.ID) }, version.Version, nil)
	defer cl.Close()
	(&e2eEnv{d: d, id: info.ID, c: cl}).ready(t, cl)
	entries, _ := os.ReadDir(socketDir)
	if len(entries) != 0 {
		t.Errorf("socket directories left behind: %v", entries)
	}
}
