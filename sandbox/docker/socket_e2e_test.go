package docker

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
	"github.com/cwsdev/cws/version"
)

// TestSocketTransport: on a local engine the driver reaches the agent over the socket
// in the container's directory, proven by the container's secret; whatever breaks that
// path, calls still go through, over the exec stream.
func TestSocketTransport(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	d := newDriver(t)
	if name, why := d.Transport(); name != TransportSocket {
		t.Fatalf("Transport = %s (%s), want socket on a local engine", name, why)
	}
	spec := sandbox.Spec{Session: uniq("sock"), Tenant: uniq("tenant"), Image: version.TestImage}
	info := create(t, d, cli, spec)
	c, err := cli.ContainerInspect(t.Context(), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	ss, ok := socketOf(c.Config.Labels, c.Config.Env)
	if !ok {
		t.Fatalf("container has no socket directory: labels %v", c.Config.Labels)
	}
	dir := filepath.Join(d.SocketDir(), ss.key)
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("socket directory %s: %v", dir, err)
	}
	cl := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, info.ID) }, version.Version, nil)
	t.Cleanup(func() { cl.Close() })
	e := &e2eEnv{d: d, id: info.ID, c: cl}
	e.ready(t, cl)

	t.Run("attach dials the socket", func(t *testing.T) {
		if got := attachedBy(t, d, info.ID); got != TransportSocket {
			t.Fatalf("Attach took the %s path, want %s", got, TransportSocket)
		}
	})

	t.Run("write and read", func(t *testing.T) {
		if _, err := cl.WriteFile(t.Context(), agent.WriteArgs{Path: "hello.txt", Create: true}, []byte("over the socket")); err != nil {
			t.Fatal(err)
		}
		data, _, err := cl.ReadFile(t.Context(), agent.ReadArgs{Path: "hello.txt"})
		if err != nil || string(data) != "over the socket" {
			t.Fatalf("Read = %q, %v", data, err)
		}
	})

	t.Run("local reads", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("local reads need root")
		}
		if _, ok := localTarget(c); !ok {
			t.Fatalf("no local target for a volume workspace: mounts %+v", c.Mounts)
		}
		var local, answered int
		lc := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, info.ID) }, version.Version, nil).
			WithLocal(func(root *os.File, target agent.LocalTarget) (agent.Local, error) {
				local++
				lo, err := server.OpenLocal(root, target)
				if err != nil {
					return nil, err
				}
				return countAnswers{lo, &answered}, nil
			})
		t.Cleanup(func() { lc.Close() })
		if _, err := cl.WriteFile(t.Context(), agent.WriteArgs{Path: "local.txt", Create: true, Mode: 0o600}, []byte("read by cws")); err != nil {
			t.Fatal(err)
		}
		data, _, err := lc.ReadFile(t.Context(), agent.ReadArgs{Path: "local.txt", MaxSize: 1 << 20})
		if err != nil || string(data) != "read by cws" {
			t.Fatalf("Read = %q, %v", data, err)
		}
		if local != 1 || answered != 1 {
			t.Fatalf("the workspace root was taken %d times (want 1), %d reads answered locally (want 1)", local, answered)
		}
		if _, _, err := lc.ReadFile(t.Context(), agent.ReadArgs{Path: "../etc/passwd", MaxSize: 1 << 20}); !errors.Is(err, agent.ErrTraversal) {
			t.Fatalf("read ../etc/passwd = %v, want ErrTraversal", err)
		}
	})

	t.Run("wrong secret refused", func(t *testing.T) {
		bad := ss
		bad.secret = strings.Repeat("0", len(ss.secret))
		conn, err := dialAgent(t.Context(), d.SocketDir(), bad)
		if err == nil {
			conn.Close()
		}
		if !errors.Is(err, agent.ErrAuth) {
			t.Fatalf("dial with a wrong secret: %v, want ErrAuth", err)
		}
	})

	t.Run("version check on the socket path", func(t *testing.T) {
		conn, err := dialAgent(t.Context(), d.SocketDir(), ss)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := agent.WriteHello(conn, agent.Hello{Protocol: agent.ProtocolVersion + 1, Version: "future"}); err != nil {
			t.Fatal(err)
		}
		if h, err := agent.ReadHello(conn); err != nil || h.Error == "" {
			t.Fatalf("Hello from the future = %+v, %v; want a refusal", h, err)
		}
	})

	t.Run("commands never see the secret", func(t *testing.T) {
		res := e.exec(t, agent.ExecArgs{Argv: []string{"env"}})
		if strings.Contains(string(res.Stdout), agent.EnvSecret) || strings.Contains(string(res.Stdout), ss.secret) {
			t.Fatalf("env of a command shows the secret:\n%s", res.Stdout)
		}
	})

	t.Run("planted link to a host socket", func(t *testing.T) {
		// The tool user may not touch the socket directory at all.
		res := e.exec(t, agent.ExecArgs{Argv: []string{"sh", "-c", "rm -f " + agent.RunDir + "/" + agent.SocketName}})
		if res.ExitCode == 0 {
			t.Fatalf("the tool user removed the agent's socket: %+v", res)
		}
		// A compromised agent (its own uid) replaces its socket with a link to a host
		// socket (what docker.sock would be). cws must not connect to it, and the call
		// must still work, over the exec stream.
		dog := newCanary(t)
		if out, code, err := d.Exec(t.Context(), info.ID, []string{"sh", "-c", "rm -f " + agent.RunDir + "/" + agent.SocketName +
			" && ln -s " + dog.path + " " + agent.RunDir + "/" + agent.SocketName}, agent.DefaultAgentUser); err != nil || code != 0 {
			t.Fatalf("plant the link as the agent: %d %v %s", code, err, out)
		}
		fi, err := os.Lstat(filepath.Join(dir, agent.SocketName))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Fatalf("the link was not planted: %v %v", fi, err)
		}
		if got := attachedBy(t, d, info.ID); got != TransportExec {
			t.Fatalf("Attach took the %s path, want %s", got, TransportExec)
		}
		if dog.connected() {
			t.Fatal("cws connected to the host socket the planted link points at")
		}
		cl.Close() // a fresh stream: over exec now
		if _, err := cl.Ping(t.Context()); err != nil {
			t.Fatalf("Ping after the planted link: %v", err)
		}
	})

	t.Run("absent socket falls back to exec", func(t *testing.T) {
		must(t, os.RemoveAll(filepath.Join(dir, agent.SocketName)))
		if got := attachedBy(t, d, info.ID); got != TransportExec {
			t.Fatalf("Attach took the %s path, want %s", got, TransportExec)
		}
		data, _, err := cl.ReadFile(t.Context(), agent.ReadArgs{Path: "hello.txt"})
		if err != nil || string(data) != "over the socket" {
			t.Fatalf("Read over the fallback = %q, %v", data, err)
		}
	})

	t.Run("restarted agent listens again", func(t *testing.T) {
		// init restarts serve, which binds its socket afresh (the planted link and the
		// removal above left none). Killed from outside the agent, which would take the
		// command down with it.
		pr, err := cl.Ping(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if out, code, err := d.Exec(t.Context(), info.ID, []string{"kill", strconv.Itoa(pr.PID)}, "0:0"); err != nil || code != 0 {
			t.Fatalf("kill the agent: %d %v %s", code, err, out)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		defer cancel()
		for {
			conn, err := dialAgent(ctx, d.SocketDir(), ss)
			if err == nil {
				conn.Close()
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the restarted agent does not listen: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("start after the directory vanished", func(t *testing.T) {
		// A reboot empties /var/run: Start makes the directory again, or the engine
		// could not mount it and the sandbox would never start.
		cl.Close()
		if err := d.Stop(t.Context(), info.ID); err != nil {
			t.Fatal(err)
		}
		must(t, os.RemoveAll(dir))
		if err := d.Start(t.Context(), info.ID); err != nil {
			t.Fatalf("Start: %v", err)
		}
		e.ready(t, cl)
		if got := attachedBy(t, d, info.ID); got != TransportSocket {
			t.Fatalf("Attach took the %s path, want %s", got, TransportSocket)
		}
	})

	t.Run("prune orphan directories", func(t *testing.T) {
		old := time.Now().Add(-time.Hour)
		orphan, young := filepath.Join(d.SocketDir(), newKey(t)), filepath.Join(d.SocketDir(), newKey(t))
		must(t, os.Mkdir(orphan, 0o700))
		must(t, os.Mkdir(young, 0o700))
		must(t, os.Chtimes(orphan, old, old))
		must(t, os.Chtimes(dir, old, old)) // old, but its container lives
		removed, err := d.PruneSocketDirs(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) != 1 || removed[0] != filepath.Base(orphan) {
			t.Errorf("pruned %v, want only %s", removed, filepath.Base(orphan))
		}
		for _, p := range []string{dir, young} {
			if _, err := os.Lstat(p); err != nil {
				t.Errorf("%s: %v (pruned, but it must stay)", p, err)
			}
		}
		os.Remove(young)
	})

	t.Run("remove deletes the directory", func(t *testing.T) {
		cl.Close()
		if err := d.Remove(t.Context(), info.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("socket directory after Remove: %v", err)
		}
	})
}

// TestExecTransport: with the socket path switched off (--agent-transport exec), a
// sandbox gets no socket directory, no secret and no host mount, and calls go over
// the exec stream.
func TestExecTransport(t *testing.T) {
	cli := requireDocker(t)
	requireImage(t, cli, version.TestImage)
	d := newDriverWith(t, Config{Transport: TransportExec})
	if name, _ := d.Transport(); name != TransportExec {
		t.Fatalf("Transport = %s, want exec", name)
	}
	info := create(t, d, cli, sandbox.Spec{Session: uniq("exec"), Tenant: uniq("tenant"), Image: version.TestImage})
	c, err := cli.ContainerInspect(t.Context(), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := socketOf(c.Config.Labels, c.Config.Env); ok || len(c.Mounts) != 2 {
		t.Fatalf("exec transport: labels %v, mounts %+v; want no socket directory", c.Config.Labels, c.Mounts)
	}
	cl := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) { return d.Attach(ctx, info.ID) }, version.Version, nil)
	t.Cleanup(func() { cl.Close() })
	e := &e2eEnv{d: d, id: info.ID, c: cl}
	e.ready(t, cl)
	if _, err := cl.WriteFile(t.Context(), agent.WriteArgs{Path: "a.txt", Create: true}, []byte("over exec")); err != nil {
		t.Fatal(err)
	}
	if data, _, err := cl.ReadFile(t.Context(), agent.ReadArgs{Path: "a.txt"}); err != nil || string(data) != "over exec" {
		t.Fatalf("Read = %q, %v", data, err)
	}
	if got := attachedBy(t, d, info.ID); got != TransportExec {
		t.Fatalf("Attach took the %s path, want %s", got, TransportExec)
	}
}

// attachedBy attaches to container id once and says which path Attach took:
// TransportSocket or TransportExec.
func attachedBy(t *testing.T, d *Driver, id string) string {
	t.Helper()
	rw, err := d.Attach(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	switch rw.(type) {
	case *socketConn:
		return TransportSocket
	case *bridge:
		return TransportExec
	}
	t.Fatalf("Attach returned a %T", rw)
	return ""
}

// countAnswers counts the calls a Local answered.
type countAnswers struct {
	agent.Local
	n *int
}

func (l countAnswers) Answer(ctx context.Context, h *agent.Header, body []byte, w io.Writer) bool {
	ok := l.Local.Answer(ctx, h, body, w)
	if ok {
		*l.n++
	}
	return ok
}
