package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server"
	"github.com/cwsdev/cws/sandbox/agent/server/keep"
)

// serveCommand runs the test binary as a serve of its own (TestMain).
const serveCommand = "test-serve"

// serveMain serves a workspace (args: root, keeper directory, socket) as
// `cws-agent serve` does, the test binary standing in for the agent binary.
func serveMain(args []string) error {
	if len(args) != 3 {
		return errors.New("usage: test-serve <root> <keeper dir> <socket>")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{Root: args[0], Version: "test", Launcher: self, ProcDir: args[1]})
	if err != nil {
		return err
	}
	l, err := net.Listen("unix", args[2])
	if err != nil {
		return err
	}
	return srv.Serve(l)
}

// procDirs returns a workspace and a keeper directory, the latter on a tmpfs where
// there is one, as the container's /tmp is. The keepers started there are killed at
// the end of the test.
func procDirs(t testing.TB) (root, procs string) {
	t.Helper()
	parent := t.TempDir()
	if tmp, err := os.MkdirTemp("/dev/shm", "cws-procs-"); err == nil {
		parent = tmp
		t.Cleanup(func() { os.RemoveAll(tmp) })
	}
	procs = filepath.Join(parent, "procs")
	t.Cleanup(func() { killKeepers(procs) })
	return t.TempDir(), procs
}

// TestProcsSurviveServeKill SIGKILLs serve while background processes run and starts
// another on the same keeper directory, the test process playing init: it is their
// subreaper, reaps the processes whose serve died and records their exit as init
// does. The new serve answers within seconds: output from before, during and after
// the kill, in order; the exit code of a process that ended while no serve ran;
// killProcess of a process it did not start; ids that follow the old ones.
func TestProcsSurviveServeKill(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("no subreaper: %v", err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	root, procDir := procDirs(t)
	ctx := ctxT(t)
	srv1, c1 := startServe(t, root, procDir)
	start := func(c *agent.Client, script string) agent.ProcInfo {
		t.Helper()
		p, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"sh", "-c", script}})
		must(t, err)
		return p
	}
	gate := filepath.Join(root, "gate")
	ticker := start(c1, `i=0; while :; do echo "tick $i"; i=$((i+1)); sleep 0.02; done`)
	ender := start(c1, fmt.Sprintf(`while [ ! -e %s ]; do sleep 0.01; done; echo bye; exit 7`, gate))
	sleeper := start(c1, `exec sleep 1000`)
	var before string
	waitFor(t, func() bool {
		o, err := c1.ProcOutput(ctx, agent.ProcOutputArgs{ID: ticker.ID, WaitMS: 100})
		before = string(o.Stdout)
		return err == nil && strings.Contains(before, "tick 3\n")
	})

	must(t, srv1.Process.Kill())
	_ = srv1.Wait()
	c1.Close()
	// Init's part: reap the orphans, record how they exited.
	for _, p := range []agent.ProcInfo{ticker, ender, sleeper} {
		go func() {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(p.PID, &ws, 0, nil); err == nil {
				keep.RecordExit(procDir, pid, ws)
			}
		}()
	}
	must(t, os.WriteFile(gate, nil, 0o600)) // the ender exits while no serve runs
	time.Sleep(100 * time.Millisecond)

	_, c2 := startServe(t, root, procDir)
	ps, err := c2.ProcList(ctx)
	if err != nil || len(ps) != 3 || ps[0].ID != ticker.ID || !ps[0].Running || ps[2].ID != sleeper.ID || !ps[2].Running {
		t.Fatalf("ProcList of the new serve = %+v, %v", ps, err)
	}
	var after string
	waitFor(t, func() bool {
		o, err := c2.ProcOutput(ctx, agent.ProcOutputArgs{ID: ticker.ID})
		after = string(o.Stdout)
		return err == nil && len(after) > len(before)+40
	})
	if !strings.HasPrefix(after, before) {
		t.Errorf("output after the kill does not begin with the output before it:\nbefore %q\nafter  %q", before, after)
	}
	for i, l := range strings.Split(strings.TrimSuffix(after, "\n"), "\n") {
		if l != fmt.Sprintf("tick %d", i) {
			t.Fatalf("line %d of the output is %q: a line went missing around the kill", i, l)
		}
	}
	var end agent.ProcOutput
	waitFor(t, func() bool {
		end, err = c2.ProcOutput(ctx, agent.ProcOutputArgs{ID: ender.ID, WaitMS: 200})
		return err == nil && !end.Proc.Running
	})
	if end.Proc.ExitCode == nil || *end.Proc.ExitCode != 7 || string(end.Stdout) != "bye\n" {
		t.Errorf("the process that exited while no serve ran: %+v, %q; want exit 7, bye", end.Proc, end.Stdout)
	}
	k, err := c2.ProcKill(ctx, agent.ProcKillArgs{ID: sleeper.ID, GraceMS: 200})
	if err != nil || k.Running || k.ExitCode == nil || *k.ExitCode != -1 {
		t.Errorf("ProcKill from the new serve = %+v, %v; want ended by a signal", k, err)
	}
	next := start(c2, "echo next")
	if !strings.HasPrefix(next.ID, "p4-") || next.ID[2:] != ticker.ID[2:] {
		t.Errorf("the id after the restart is %s, want p4 of the run of %s", next.ID, ticker.ID)
	}
	_, err = c2.ProcKill(ctx, agent.ProcKillArgs{ID: ticker.ID, GraceMS: 200})
	must(t, err)
}

// startServe runs serveMain in a process of its own, and returns it with a client.
func startServe(t *testing.T, root, procDir string) (*exec.Cmd, *agent.Client) {
	t.Helper()
	self, err := os.Executable()
	must(t, err)
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(self, serveCommand, root, procDir, sock)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Until it accepts: the socket's file appears at bind(2), before listen(2), and a
	// dial in between is refused.
	waitFor(t, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}, "test", nil)
	t.Cleanup(func() { c.Close() })
	return cmd, c
}

// serveAgent serves a new Server of cfg over net.Pipe, as pipeAgent does.
func serveAgent(t testing.TB, cfg server.Config) *agent.Client {
	t.Helper()
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		a, b := net.Pipe()
		go srv.ServeConn(b)
		return a, nil
	}, "test", nil)
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c
}

// benchConfig is a server with its processes in memory, or in a keeper process.
func benchConfig(b *testing.B, kept bool) server.Config {
	if !kept {
		return server.Config{Root: b.TempDir(), Version: "bench"}
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	root, procDir := procDirs(b)
	return server.Config{Root: root, Version: "bench", Launcher: self, ProcDir: procDir}
}

// BenchmarkProcStart is the cost of startProcess (through the wire, in-process), with
// the processes in this process's memory and in a keeper process.
func BenchmarkProcStart(b *testing.B) {
	for _, kept := range []bool{false, true} {
		b.Run(map[bool]string{false: "memory", true: "keeper"}[kept], func(b *testing.B) {
			c := serveAgent(b, benchConfig(b, kept))
			ctx := context.Background()
			if _, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"true"}}); err != nil { // starts the keeper
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkProcOutput is the cost of one readProcessOutput of a process with output.
func BenchmarkProcOutput(b *testing.B) {
	for _, kept := range []bool{false, true} {
		b.Run(map[bool]string{false: "memory", true: "keeper"}[kept], func(b *testing.B) {
			c := serveAgent(b, benchConfig(b, kept))
			ctx := context.Background()
			p, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"sh", "-c", "seq 1000; sleep 1000"}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = syscall.Kill(-p.PID, syscall.SIGKILL) })
			for b.Loop() {
				if _, err := c.ProcOutput(ctx, agent.ProcOutputArgs{ID: p.ID}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// killKeepers kills the keeper processes of dir ("… keep <dir>") and reaps those
// that are the test process's own (it is their subreaper once their serve died).
func killKeepers(dir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"); len(args) == 3 && args[1] == keep.Command && args[2] == dir {
			var pid int
			if _, err := fmt.Sscan(e.Name(), &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, 0, nil)
			}
		}
	}
}
