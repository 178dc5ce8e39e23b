package launch

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary is the probe when CWS_SCOPE_PROBE is set: it signals (signal 0) and
// ptraces each pid of CWS_SCOPE_PIDS, connects to the abstract socket
// CWS_SCOPE_SOCKET, and prints one "<what>=<outcome>" line each.
func init() {
	if len(os.Args) > 1 && os.Args[1] == Command && os.Getenv("CWS_SCOPE_LAUNCHER") == "1" {
		// The agent's `launch`, as StartVia runs it.
		err := Main(os.Args[2:])
		fmt.Fprintln(os.Stderr, "launch:", err)
		os.Exit(126)
	}
	if os.Getenv("CWS_SCOPE_PROBE") != "1" {
		return
	}
	out := func(k string, err error) {
		v := "ok"
		if err != nil {
			v = err.Error()
			if errno, ok := errors.AsType[syscall.Errno](err); ok {
				v = unix.ErrnoName(errno)
			}
		}
		fmt.Printf("%s=%s\n", k, v)
	}
	for _, p := range strings.Fields(os.Getenv("CWS_SCOPE_PIDS")) {
		pid, _ := strconv.Atoi(p)
		out("signal_"+p, unix.Kill(pid, 0))
		_, err := os.ReadFile("/proc/" + p + "/environ")
		out("environ_"+p, err)
		f, err := os.Open("/proc/" + p + "/mem")
		if err == nil {
			f.Close()
		}
		out("mem_"+p, err)
		_, err = os.ReadDir("/proc/" + p + "/fd")
		out("fd_"+p, err)
	}
	if name := os.Getenv("CWS_SCOPE_SOCKET"); name != "" {
		c, err := net.Dial("unix", "@"+name)
		if err == nil {
			c.Close()
		}
		out("connect", err)
	}
	os.Exit(0)
}

// probe starts the test binary as the probe through start and returns what it
// printed, by name.
func probe(t *testing.T, start func(*exec.Cmd) error, socket string, pids ...int) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	var ps []string
	for _, p := range pids {
		ps = append(ps, strconv.Itoa(p))
	}
	cmd.Env = append(os.Environ(), "CWS_SCOPE_LAUNCHER=1", "CWS_SCOPE_PROBE=1", "CWS_SCOPE_PIDS="+strings.Join(ps, " "), "CWS_SCOPE_SOCKET="+socket)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := start(cmd); err != nil {
		t.Fatalf("start the probe: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("probe: %v: %s", err, out.String())
	}
	got := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		}
	}
	return got
}

func requireScopes(t testing.TB) {
	t.Helper()
	if Scopes() == 0 {
		t.Skipf("Landlock ABI %d can't scope a domain (ABI %d can)", ABI(), ScopeABI)
	}
}

// listenAbstract listens on a fresh abstract socket, accepting and closing.
func listenAbstract(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("cws-scope-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	l, err := net.Listen("unix", "@"+name)
	must(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return name
}

// TestStartViaScope: a command started through the launcher with a scoped ruleset
// can't signal this process or any of its threads (the one that started it
// included), open its /proc mem, nor connect to an abstract socket it made;
// two such commands are in domains of their own; this process stays unrestricted. A
// scoped policy's ruleset restricts execution as well; an unscoped one (root mode)
// leaves signals alone.
func TestStartViaScope(t *testing.T) {
	forEachLauncher(t, testStartViaScope)
}

func testStartViaScope(t *testing.T, launcher string) {
	requireScopes(t)
	self := os.Getpid()
	name := listenAbstract(t)
	scope, err := NewScopeRuleset(ScopeAll, nil)
	must(t, err)
	defer scope.Close()
	via := func(rs *Ruleset) func(*exec.Cmd) error {
		return func(cmd *exec.Cmd) error { return rs.StartVia(launcher, cmd) }
	}

	sibling := exec.Command("sleep", "30")
	must(t, via(scope)(sibling))
	defer func() { _ = sibling.Process.Kill(); _ = sibling.Wait() }()
	if sibling.Args[0] != "sleep" || filepath.Base(sibling.Path) != "sleep" {
		t.Errorf("StartVia left the command as %q %q", sibling.Path, sibling.Args)
	}

	// Every thread of this process, which the probe signals one by one.
	tasks, err := os.ReadDir("/proc/self/task")
	must(t, err)
	pids := []int{self, sibling.Process.Pid}
	for _, e := range tasks {
		if tid, _ := strconv.Atoi(e.Name()); tid != self {
			pids = append(pids, tid)
		}
	}
	got := probe(t, via(scope), name, pids...)
	sib := strconv.Itoa(sibling.Process.Pid)
	// /proc/<pid>/environ and fd are not asked for: this test may run as root, whom
	// neither the uid nor the dumpable flag stops, and on 6.18 Landlock lets a
	// process with CAP_SYS_PTRACE read them (mem it refuses). The agent, which is
	// not dumpable, keeps a prober without capabilities out of all three.
	want := map[string]string{
		"signal_" + strconv.Itoa(self): "EPERM",
		"mem_" + strconv.Itoa(self):    "EACCES",
		"connect":                      "EPERM",
		"signal_" + sib:                "EPERM", // another command: a domain of its own
	}
	for _, tid := range pids[2:] {
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); err == nil {
			want["signal_"+strconv.Itoa(tid)] = "EPERM"
		}
	}
	for k, w := range want {
		if g := got[k]; g != w && !(strings.HasPrefix(k, "signal_") && g == "ESRCH" && k != "signal_"+strconv.Itoa(self)) {
			t.Errorf("from a scoped command: %s = %q, want %q", k, g, w)
		}
	}

	// Unrestricted: what the probe could not do, this process still can.
	if err := unix.Kill(sibling.Process.Pid, 0); err != nil {
		t.Errorf("signal a scoped command from the test: %v", err)
	}
	if c, err := net.Dial("unix", "@"+name); err != nil {
		t.Errorf("connect from the test: %v", err)
	} else {
		c.Close()
	}

	// A scoped policy: the same scopes, and only what it allows may execute.
	exe, err := os.Executable()
	must(t, err)
	cache := NewScopedCache(os.Getenv("PATH"), 0, ScopeAll, nil)
	defer cache.Close()
	viaPolicy := func(cmd *exec.Cmd) error { return cache.StartVia(launcher, nil, []string{exe}, "", cmd) }
	got = probe(t, viaPolicy, name, self)
	if k := "signal_" + strconv.Itoa(self); got[k] != "EPERM" || got["connect"] != "EPERM" {
		t.Errorf("from a scoped policy's command: %s = %q, connect = %q, want EPERM", k, got[k], got["connect"])
	}
	sh := exec.Command("/bin/sh", "-c", "true")
	sh.Env = append(os.Environ(), "CWS_SCOPE_LAUNCHER=1")
	if err := viaPolicy(sh); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("sh under a policy that allows only the test binary: %v, want a start error saying permission denied", err)
	}

	// Unscoped (root mode's rulesets): signals and sockets are left alone.
	plain := NewCache(os.Getenv("PATH"), 0)
	defer plain.Close()
	got = probe(t, func(cmd *exec.Cmd) error { return plain.StartVia(launcher, nil, []string{exe}, "", cmd) }, name, self)
	if k := "signal_" + strconv.Itoa(self); got[k] != "ok" || got["connect"] != "ok" {
		t.Errorf("from an unscoped policy's command: %s = %q, connect = %q, want both ok", k, got[k], got["connect"])
	}
}

// TestStartViaRefusal: the launcher's refusal is the start's error, and the
// command's fields are as they were.
func TestStartViaRefusal(t *testing.T) {
	forEachLauncher(t, testStartViaRefusal)
}

func testStartViaRefusal(t *testing.T, launcher string) {
	requireScopes(t)
	scope, err := NewScopeRuleset(ScopeAll, nil)
	must(t, err)
	defer scope.Close()
	cmd := exec.Command("/nonexistent/prog", "x")
	cmd.Env = append(os.Environ(), "CWS_SCOPE_LAUNCHER=1")
	err = scope.StartVia(launcher, cmd)
	if err == nil || !strings.Contains(err.Error(), "exec /nonexistent/prog: no such file or directory") {
		t.Errorf("a missing program: %v", err)
	}
	if cmd.Path != "/nonexistent/prog" || len(cmd.Args) != 2 || len(cmd.ExtraFiles) != 0 {
		t.Errorf("the command is left as %q %q %v", cmd.Path, cmd.Args, cmd.ExtraFiles)
	}
}

// BenchmarkScopedStart: what starting through the launcher costs, beside a direct
// start and a throwaway thread's (root mode's policies).
func BenchmarkScopedStart(b *testing.B) {
	requireScopes(b)
	scope, err := NewScopeRuleset(ScopeAll, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer scope.Close()
	c := NewCache("/usr/bin", 0)
	defer c.Close()
	native := nativeLauncher(b)
	for _, mode := range []string{"direct", "throwaway-thread", "launcher-scoped", "native-launcher-scoped"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				cmd := exec.Command("/usr/bin/true")
				cmd.Env = []string{"CWS_SCOPE_LAUNCHER=1"}
				switch mode {
				case "direct":
					err = cmd.Start()
				case "throwaway-thread":
					err = c.Start([]string{"true"}, nil, "", cmd.Start)
				case "native-launcher-scoped":
					err = scope.StartVia(native, cmd)
				default:
					err = scope.StartVia(os.Args[0], cmd)
				}
				if err == nil {
					err = cmd.Wait()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStartViaNoAgentThread: the first thing a command does can't reach the thread
// that started it. A shell that signals (signal 0) every thread of its parent the
// moment it runs finds none it may signal, start after start. (Forked from a thread
// restricted in place, Ruleset.Start, it found that thread still alive, and in its
// own domain, in about half the starts: launch/scope.go.)
func TestStartViaNoAgentThread(t *testing.T) {
	forEachLauncher(t, testStartViaNoAgentThread)
}

func testStartViaNoAgentThread(t *testing.T, launcher string) {
	requireScopes(t)
	scope, err := NewScopeRuleset(ScopeAll, nil)
	must(t, err)
	defer scope.Close()
	const script = `for t in /proc/$PPID/task/*; do kill -0 ${t##*/} 2>/dev/null && echo hit ${t##*/}; done; true`
	for i := range 50 {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Env = append(os.Environ(), "CWS_SCOPE_LAUNCHER=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		must(t, scope.StartVia(launcher, cmd))
		must(t, cmd.Wait())
		if strings.Contains(out.String(), "hit") {
			t.Fatalf("start %d: the command could signal a thread of the process that started it: %s", i, out.String())
		}
	}
}
