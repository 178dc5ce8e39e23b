package keep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
)

// TestMain runs the keeper itself when a test starts the test binary as one
// ("<test binary> keep <dir>", as serve runs "cws-agent keep <dir>").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Command {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		if err := Main(os.Args[2:], log); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// serveKeeper runs a keeper in dir in this process; stop ends it as a killed keeper
// ends: nothing answers on its socket any more.
func serveKeeper(t testing.TB, dir string) (stop func()) {
	t.Helper()
	k, err := New(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: socketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = k.Serve(l)
	}()
	stop = func() {
		l.Close()
		<-served
	}
	t.Cleanup(stop)
	return stop
}

// child starts sh -c script in a process group of its own, as serve starts a
// background process, and returns the files the keeper takes.
func child(t testing.TB, script string) (*exec.Cmd, Files) {
	t.Helper()
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	errW.Close()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	fd, err := unix.PidfdOpen(cmd.Process.Pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, Files{Stdout: outR, Stderr: errR, PIDFD: os.NewFile(uintptr(fd), "pidfd")}
}

func adopt(t testing.TB, c *Client, script string) (*exec.Cmd, agent.ProcInfo) {
	t.Helper()
	cmd, f := child(t, script)
	pi, err := c.Adopt(ctxT(t), Proc{Argv: []string{"sh", "-c", script}, PID: cmd.Process.Pid, StartedAt: time.Now().UTC(), OutputCap: 1 << 10}, f)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	return cmd, pi
}

// readUntil reads a process's output until both streams hold what is wanted.
func readUntil(t *testing.T, c *Client, id, stdout, stderr string) *agent.ProcOutput {
	t.Helper()
	var out, errs []byte
	var o *agent.ProcOutput
	var a agent.ProcOutputArgs
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		a = agent.ProcOutputArgs{ID: id, StdoutOffset: a.StdoutOffset, StderrOffset: a.StderrOffset, WaitMS: 500}
		if o, err = c.Output(ctxT(t), a); err != nil {
			t.Fatalf("Output: %v", err)
		}
		out, errs = append(out, o.Stdout...), append(errs, o.Stderr...)
		a.StdoutOffset, a.StderrOffset = o.StdoutOffset, o.StderrOffset
		if bytes.Contains(out, []byte(stdout)) && bytes.Contains(errs, []byte(stderr)) {
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("output %q / %q, want %q / %q", out, errs, stdout, stderr)
		}
	}
}

func exitOf(cmd *exec.Cmd) int {
	_ = cmd.Wait()
	return cmd.ProcessState.ExitCode()
}

// The protocol, with serve alive: it reaps the process and says how it exited.
func TestKeeperProtocol(t *testing.T) {
	dir := t.TempDir()
	serveKeeper(t, dir)
	c := NewClient(dir, "", nil)
	ctx := ctxT(t)
	gate := filepath.Join(t.TempDir(), "go")
	cmd, pi := adopt(t, c, fmt.Sprintf("echo out; echo err >&2; while [ ! -e %s ]; do sleep 0.01; done; echo more; exit 3", gate))
	if n, _, ok := parseID(pi.ID); n != 1 || !ok || !pi.Running || pi.PID != cmd.Process.Pid || pi.ExitCode != nil {
		t.Fatalf("adopted = %+v", pi)
	}
	if _, err := os.Stat(filepath.Join(dir, pi.ID+recordExt)); err != nil {
		t.Errorf("no record: %v", err)
	}
	if _, err := os.Stat(markerPath(dir, pi.PID)); err != nil {
		t.Errorf("no exit marker: %v", err)
	}
	o := readUntil(t, c, pi.ID, "out\n", "err\n")
	if !o.Proc.Running {
		t.Errorf("ended before it was let go: %+v", o.Proc)
	}

	// A long poll returns with the next output.
	got := make(chan *agent.ProcOutput, 1)
	go func() {
		o, err := c.Output(ctx, agent.ProcOutputArgs{ID: pi.ID, StdoutOffset: o.StdoutOffset, StderrOffset: o.StderrOffset, WaitMS: 10_000})
		if err != nil {
			t.Errorf("Output: %v", err)
		}
		got <- o
	}()
	time.Sleep(50 * time.Millisecond)
	must(t, os.WriteFile(gate, nil, 0o600))
	if o := <-got; o == nil || !strings.HasPrefix(string(o.Stdout), "more") {
		t.Fatalf("long poll = %+v", o)
	}

	must(t, c.Exited(ctx, pi.ID, exitOf(cmd)))
	end, err := c.Info(ctx, pi.ID, 5*time.Second)
	if err != nil || end.Running || end.ExitCode == nil || *end.ExitCode != 3 || end.EndedAt == nil {
		t.Fatalf("Info after exit = %+v, %v", end, err)
	}
	ps, err := c.List(ctx)
	if err != nil || len(ps) != 1 || ps[0].ID != pi.ID || ps[0].Running || *ps[0].ExitCode != 3 {
		t.Fatalf("List = %+v, %v", ps, err)
	}
	waitFor(t, func() bool {
		_, err := os.Stat(markerPath(dir, pi.PID))
		return errors.Is(err, os.ErrNotExist)
	})
	if b, _ := os.ReadFile(filepath.Join(dir, pi.ID+recordExt)); !bytes.Contains(b, []byte(`"exitCode":3`)) {
		t.Errorf("record after the end = %s", b)
	}
	for id, want := range map[string]error{
		strings.Replace(pi.ID, "p1-", "p9-", 1): agent.ErrNotFound, // of this run
		"p1-00000000":                           agent.ErrLost,     // of another run
		"p1":                                    agent.ErrNotFound,
		"":                                      agent.ErrNotFound,
	} {
		if _, err := c.Output(ctx, agent.ProcOutputArgs{ID: id}); !errors.Is(err, want) {
			t.Errorf("Output(%q) = %v, want %v", id, err, want)
		}
	}
}

// serve died: init reaps the process and writes its status into the marker.
func TestKeeperExitFromInit(t *testing.T) {
	tests := []struct {
		script string
		want   int
	}{
		{"echo bye; sleep 0.1; exit 5", 5},
		{"sleep 0.1; kill -9 $$", -1},
	}
	dir := t.TempDir()
	serveKeeper(t, dir)
	c := NewClient(dir, "", nil)
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			cmd, pi := adopt(t, c, tt.script)
			_ = cmd.Wait()
			RecordExit(dir, pi.PID, cmd.ProcessState.Sys().(syscall.WaitStatus)) // what init does
			end, err := c.Info(ctxT(t), pi.ID, 5*time.Second)
			if err != nil || end.Running || end.ExitCode == nil || *end.ExitCode != tt.want {
				t.Fatalf("Info = %+v, %v; want exit code %d", end, err, tt.want)
			}
		})
	}
	// Where seccomp refuses pidfd_open, the marker is polled for.
	t.Run("no pidfd", func(t *testing.T) {
		cmd, f := child(t, "exit 4")
		f.PIDFD.Close()
		f.PIDFD = nil
		pi, err := c.Adopt(ctxT(t), Proc{Argv: []string{"sh"}, PID: cmd.Process.Pid, StartedAt: time.Now()}, f)
		must(t, err)
		_ = cmd.Wait()
		RecordExit(dir, pi.PID, cmd.ProcessState.Sys().(syscall.WaitStatus))
		end, err := c.Info(ctxT(t), pi.ID, 5*time.Second)
		if err != nil || end.Running || end.ExitCode == nil || *end.ExitCode != 4 {
			t.Fatalf("Info = %+v, %v; want exit code 4", end, err)
		}
	})
	RecordExit(dir, 1<<22-1, 0) // no marker: nothing is written
	if _, err := os.Stat(markerPath(dir, 1<<22-1)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("RecordExit made a marker: %v", err)
	}
}

// A keeper that ends takes the output with it: its processes are lost, not unknown, and
// the next keeper gives new ids.
func TestKeeperLost(t *testing.T) {
	dir := t.TempDir()
	stop := serveKeeper(t, dir)
	c := NewClient(dir, "", nil)
	ctx := ctxT(t)
	_, running := adopt(t, c, "echo hi; sleep 1000")
	cmd, ended := adopt(t, c, "exit 2")
	must(t, c.Exited(ctx, ended.ID, exitOf(cmd)))
	if pi, err := c.Info(ctx, ended.ID, 5*time.Second); err != nil || pi.Running {
		t.Fatalf("Info = %+v, %v", pi, err)
	}
	stop()

	ps, err := c.List(ctx)
	if err != nil || len(ps) != 2 || ps[0].Running || ps[1].Running || ps[0].ExitCode != nil || ps[1].ExitCode == nil || *ps[1].ExitCode != 2 {
		t.Fatalf("List without a keeper = %+v, %v", ps, err)
	}
	for _, id := range []string{running.ID, ended.ID} {
		_, err := c.Output(ctx, agent.ProcOutputArgs{ID: id})
		if !errors.Is(err, agent.ErrLost) || !strings.Contains(err.Error(), "lost with the agent") {
			t.Errorf("Output(%s) = %v, want lost with the agent", id, err)
		}
	}
	if _, err := c.Info(ctx, running.ID, 0); !errors.Is(err, agent.ErrLost) {
		t.Errorf("Info(running) = %v, want lost", err)
	}
	if _, err := c.Info(ctx, ended.ID, 0); !errors.Is(err, agent.ErrLost) {
		t.Errorf("Info(ended) = %v, want lost (its pid is not to be signaled)", err)
	}
	if _, err := c.Output(ctx, agent.ProcOutputArgs{ID: strings.Replace(running.ID, "p1-", "p9-", 1)}); !errors.Is(err, agent.ErrNotFound) {
		t.Errorf("unknown id: %v, want not found", err)
	}

	serveKeeper(t, dir)
	_, next := adopt(t, c, "sleep 1000")
	if idNumber(next.ID) != 3 || next.ID[2:] != running.ID[2:] {
		t.Errorf("next id = %s, want p3 of the run of %s", next.ID, running.ID)
	}
	ps, _ = c.List(ctx)
	if len(ps) != 3 || ps[0].Running || !ps[2].Running {
		t.Errorf("List of the next keeper = %+v", ps)
	}
	if _, err := c.Output(ctx, agent.ProcOutputArgs{ID: running.ID}); !errors.Is(err, agent.ErrLost) {
		t.Errorf("the next keeper: Output(%s) = %v, want lost", running.ID, err)
	}
}

// The keeper as serve runs it: a process of its own, started on the first adoption,
// one at a time, and lost when it is killed.
func TestKeeperProcess(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "procs")
	t.Cleanup(func() { killKeepers(t, dir) })
	c := NewClient(dir, bin, nil)
	ctx := ctxT(t)
	_, pi := adopt(t, c, "echo one; sleep 1000")
	readUntil(t, c, pi.ID, "one\n", "")
	keepers := keeperPIDs(t, dir)
	if len(keepers) != 1 {
		t.Fatalf("keepers = %v, want one", keepers)
	}
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", keepers[0]))
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "Threads:") || strings.HasPrefix(l, "VmRSS:") {
			t.Logf("keeper %s", strings.Join(strings.Fields(l), " "))
		}
	}
	if err := Start(bin, dir); err != nil { // one runs: a second one leaves
		t.Fatalf("Start beside a running keeper: %v", err)
	}
	waitFor(t, func() bool { return len(keeperPIDs(t, dir)) == 1 })
	if k := keeperPIDs(t, dir); k[0] != keepers[0] {
		t.Fatalf("keepers after a second Start = %v, want %d", k, keepers[0])
	}

	must(t, syscall.Kill(keepers[0], syscall.SIGKILL))
	waitFor(t, func() bool { return len(keeperPIDs(t, dir)) == 0 })
	if _, err := c.Output(ctx, agent.ProcOutputArgs{ID: pi.ID}); !errors.Is(err, agent.ErrLost) {
		t.Fatalf("Output after the keeper was killed = %v, want lost", err)
	}
	_, next := adopt(t, c, "echo two; sleep 1000")
	if idNumber(next.ID) != 2 || next.ID[2:] != pi.ID[2:] {
		t.Errorf("id after a new keeper = %s, want p2 of the run of %s", next.ID, pi.ID)
	}
	readUntil(t, c, next.ID, "two\n", "")
	if _, err := c.Output(ctx, agent.ProcOutputArgs{ID: pi.ID}); !errors.Is(err, agent.ErrLost) {
		t.Errorf("Output from the new keeper = %v, want lost", err)
	}
}

// keeperPIDs lists the keeper processes of dir.
func keeperPIDs(t testing.TB, dir string) []int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if len(args) == 3 && args[1] == Command && args[2] == dir && !strings.Contains(string(st), ") Z ") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func killKeepers(t testing.TB, dir string) {
	for _, pid := range keeperPIDs(t, dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 10 s")
}
