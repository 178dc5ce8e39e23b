package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/agent/server/launch"
	"github.com/cwsdev/cws/version"
)

// attackSameUIDPy runs as a tool process, through the agent, against its own agent,
// which shares its uid. It prints one JSON object: each attack and its outcome (an
// errno name, or "ok"), and every environment it could read.
const attackSameUIDPy = `
import ctypes, errno, json, os, signal, socket, base64
res = {"self": "%d:%d" % (os.getuid(), os.getgid())}
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
agents = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            argv = open("/proc/%s/cmdline" % p, "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0] == b"/.cws/cws-agent":
            agents.setdefault(argv[1].decode(), []).append(int(p))
res["agents"] = agents
libc = ctypes.CDLL(None, use_errno=True)
targets = {"init": 1}
for role in ("serve", "keep"):
    if agents.get(role):
        targets[role] = agents[role][0]
for role, pid in targets.items():
    res[role + "_owner"] = os.stat("/proc/%d/environ" % pid).st_uid  # root: not dumpable
    res[role + "_environ"] = err(lambda: open("/proc/%d/environ" % pid, "rb").read())
    res[role + "_mem"] = err(lambda: open("/proc/%d/mem" % pid, "rb").read(1))
    res[role + "_fds"] = err(lambda: os.listdir("/proc/%d/fd" % pid))
    r = libc.ptrace(16, pid, 0, 0)
    res[role + "_ptrace"] = "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
    # Every thread: a signal to any one of them would reach the whole process.
    threads = {}
    for t in os.listdir("/proc/%d/task" % pid):
        threads[t] = err(lambda: os.kill(int(t), 0))
    res[role + "_threads"] = sorted(set(threads.values()))
    def pidfd():
        fd = os.pidfd_open(pid)
        try:
            signal.pidfd_send_signal(fd, signal.SIGSTOP)
        finally:
            os.close(fd)
    res[role + "_pidfd_stop"] = err(pidfd)
    res[role + "_stop"] = err(lambda: os.kill(pid, signal.SIGSTOP))
    res[role + "_kill"] = err(lambda: os.kill(pid, signal.SIGKILL))
res["secret_file"] = err(lambda: open("/.cws-run/secret").read())
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
res["connect_abstract"] = err(lambda: s.connect("\0cws-agent"))
s2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
res["squat_abstract"] = err(lambda: s2.bind("\0cws-agent"))
k = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
k.settimeout(5)
def keeper():
    k.connect("/.cws-run/state/procs/keeper.sock")
    k.sendall(b'{"op":"list"}\n')
    b = k.recv(4096)
    if b"result" in b:
        raise OSError(0, "answered")
res["keeper_answers"] = err(keeper)
# The agent's directories: its socket and state (/.cws-run), its binaries (/.cws).
def create(p):
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
for tag, d in (("run", "/.cws-run"), ("state", "/.cws-run/state"), ("keeper", "/.cws-run/state/procs"), ("bin", "/.cws")):
    res[tag + "_create"] = err(lambda: create(d + "/planted"))
    res[tag + "_symlink"] = err(lambda: os.symlink("/workspace", d + "/link"))
res["run_unlink"] = err(lambda: os.unlink("/.cws-run/agent.sock"))
res["run_rename"] = err(lambda: os.rename("/.cws-run/agent.sock", "/.cws-run/moved"))
res["run_rename_over"] = err(lambda: os.replace("/.cws-run/state", "/.cws-run/agent.sock"))
res["keeper_unlink"] = err(lambda: os.unlink("/.cws-run/state/procs/keeper.sock"))
res["bin_replace"] = err(lambda: os.replace("/.cws/cws-launch", "/.cws/cws-agent"))
res["run_kept"] = sorted(n for n in os.listdir("/.cws-run") if n in ("agent.sock", "state", "planted", "link", "moved"))
envs = {}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            envs[p] = base64.b64encode(open("/proc/%s/environ" % p, "rb").read()).decode()
        except OSError:
            pass
res["environs"] = envs
print(json.dumps(res))
`

// TestSameUIDAgentOutOfReach starts the agent the way a Kubernetes pod does — as the
// tool user, with every capability dropped, no-new-privileges, a read-only root with
// tmpfs /tmp, the binary mounted read-only at /.cws, the secret left in /.cws-run by
// someone else before init starts, CWS_AGENT_LISTEN set — and proves that:
//
//   - the agent answers on TCP at the container's IP behind the secret handshake, and
//     a wrong secret is refused; ping says same-uid mode and Landlock scopes;
//   - a tool process (a command, one under an exec policy, a background process, the
//     terminal) can neither stop, kill, signal (any thread, a pidfd), trace nor read
//     (environ, mem, fd) init, serve or the keeper, nor connect to or squat the
//     abstract socket, nor read the secret file (gone), nor talk to the keeper;
//   - the session answers afterwards, with the same serve, and a language server
//     (gopls) starts and answers;
//   - a `docker exec -u 1000` (a `kubectl exec`) finds no secret in any readable
//     environment, and can't read the agent's /proc entries.
func TestSameUIDAgentOutOfReach(t *testing.T) {
	testenv.Docker(t)
	if out, err := exec.Command("docker", "image", "inspect", version.WorkspaceImage).CombinedOutput(); err != nil {
		testenv.RequireCI(t, version.WorkspaceImage+" (make images)", fmt.Errorf("%v: %s", err, bytes.TrimSpace(out)))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()

	dir := t.TempDir()
	bin := filepath.Join(dir, "cws-agent")
	build := exec.Command("go", "build", "-o", bin, "github.com/cwsdev/cws/cmd/cws-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build cws-agent: %v\n%s", err, out)
	}
	// The native launcher, installed beside the agent as a pod's init container does.
	native := testenv.NativeLauncher(t)
	must := func(err error, what string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	docker := func(stdin []byte, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "docker", args...)
		if stdin != nil {
			cmd.Stdin = bytes.NewReader(stdin)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("docker %s: %w: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
		}
		return strings.TrimSpace(string(out)), err
	}

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "cws-sameuid-test-" + hex.EncodeToString(rnd[:])
	var sb [32]byte
	_, _ = rand.Read(sb[:])
	secret := hex.EncodeToString(sb[:])

	// /.cws-run: what the pod's init container leaves there (an emptyDir, 0777,
	// the secret 0400 and the tool user's), on a volume of this test's own.
	_, err := docker(nil, "volume", "create", "--label", "cws.test=sameuid", name)
	must(err, "volume create")
	t.Cleanup(func() {
		_ = exec.Command("docker", "rm", "-f", name).Run()
		_ = exec.Command("docker", "volume", "rm", "-f", name).Run()
	})
	_, err = docker([]byte(secret), "run", "--rm", "-i", "--label", "cws.test=sameuid", "--network", "none", "-v", name+":/r",
		"--entrypoint", "/bin/sh", version.WorkspaceImage, "-c",
		"chmod 0777 /r && cat > /r/secret && chown 1000:1000 /r/secret && chmod 0400 /r/secret")
	must(err, "write the secret")

	// The workspace container, as the pod runs it.
	_, err = docker(nil, "run", "-d", "--name", name, "--label", "cws.test=sameuid",
		"--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--read-only", "--tmpfs", "/tmp:mode=1777", "--tmpfs", "/workspace:uid=1000,gid=1000,mode=0755",
		"-v", name+":"+agent.RunDir, "-v", bin+":/.cws/cws-agent:ro", "-v", native+":/.cws/"+launch.NativeName+":ro",
		"-e", agent.EnvListen+"=:"+strconv.Itoa(agent.DefaultPort),
		"-e", "CWS_UID_GID=1000:1000", "-e", agent.EnvAgentUser+"=1000:1000",
		"--workdir", "/workspace", "--entrypoint", "/.cws/cws-agent", version.WorkspaceImage, "init")
	must(err, "run the container")
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("docker", "logs", name).CombinedOutput()
			t.Logf("container logs:\n%s", logs)
		}
	})
	ip, err := docker(nil, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)
	must(err, "inspect")
	if ip == "" {
		t.Fatal("the container has no IP")
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(agent.DefaultPort))

	// (a) TCP behind the secret handshake.
	dial := func(s string) func(context.Context) (io.ReadWriteCloser, error) {
		return func(ctx context.Context) (io.ReadWriteCloser, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if err := agent.AuthenticateAgent(c, []byte(s)); err != nil {
				c.Close()
				return nil, err
			}
			_ = c.SetDeadline(time.Time{})
			return c, nil
		}
	}
	var conn io.ReadWriteCloser
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if conn, err = dial(secret)(ctx); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent does not answer on %s: %v", addr, err)
		}
	}
	if c, err := dial(strings.Repeat("0", len(secret)))(ctx); !errors.Is(err, agent.ErrAuth) {
		if c != nil {
			c.Close()
		}
		t.Errorf("a wrong secret: %v, want %v", err, agent.ErrAuth)
	}
	c := agent.NewClient(dial(secret), "test", nil)
	t.Cleanup(c.Shutdown)
	ping, err := c.Ping(ctx)
	must(err, "ping")
	t.Logf("ping over TCP: %+v", ping)
	if ping.UID != 1000 || !ping.SameUID {
		t.Errorf("ping: uid %d, sameUID %v; want 1000, true", ping.UID, ping.SameUID)
	}
	if !ping.Scoped {
		t.Fatalf("ping: the tool processes are not scoped (Landlock ABI %d): nothing keeps them from the agent", ping.Landlock)
	}
	// Tool processes start through the native launcher (the probes below run through it).
	if logs, err := exec.Command("docker", "logs", name).CombinedOutput(); err != nil || !strings.Contains(string(logs), "launcher=/.cws/"+launch.NativeName) {
		t.Errorf("the agent does not start tool processes through /.cws/%s: %v\n%s", launch.NativeName, err, logs)
	}
	id, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", "id -u; id -g; grep CapEff /proc/self/status"}}, nil, nil)
	must(err, "exec id")
	if got := strings.Fields(string(id.Stdout)); len(got) != 4 || got[0] != "1000" || got[1] != "1000" || got[3] != "0000000000000000" {
		t.Errorf("a command runs as %q (stderr %q), want 1000, 1000 and CapEff 0", id.Stdout, id.Stderr)
	}
	// A background process: the keeper starts, and is attacked too.
	bg, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"sleep", "1000"}})
	must(err, "start a background process")

	// (b) The attacks, as a command, as a command under an exec policy, and as a
	// background process.
	attack := func(how string, run func() ([]byte, error)) map[string]any {
		t.Helper()
		out, err := run()
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		var got map[string]any
		if err := json.Unmarshal(bytes.TrimSpace(out), &got); err != nil {
			t.Fatalf("%s: %v: %q", how, err, out)
		}
		return got
	}
	execAttack := func(p *agent.ExecPolicy) func() ([]byte, error) {
		return func() ([]byte, error) {
			r, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"python3", "-c", attackSameUIDPy}, TimeoutMS: 60_000, Launch: p}, nil, nil)
			if err == nil && r.ExitCode != 0 {
				err = fmt.Errorf("exit %d, start error %q: %s", r.ExitCode, r.StartError, r.Stderr)
			}
			return r.Stdout, err
		}
	}
	procAttack := func() ([]byte, error) {
		pi, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"python3", "-c", attackSameUIDPy}})
		if err != nil {
			return nil, err
		}
		var out []byte
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
			o, err := c.ProcOutput(ctx, agent.ProcOutputArgs{ID: pi.ID, StdoutOffset: int64(len(out)), WaitMS: 1000})
			if err != nil {
				return nil, err
			}
			out = append(out, o.Stdout...)
			if !o.Proc.Running {
				return out, nil
			}
		}
		return out, errors.New("the background attack did not end")
	}
	var servePID any
	for _, a := range []struct {
		how string
		run func() ([]byte, error)
	}{
		{"command", execAttack(nil)},
		{"command under an exec policy", execAttack(&agent.ExecPolicy{Programs: []string{"python3"}})},
		{"background process", procAttack},
	} {
		got := attack(a.how, a.run)
		agents, _ := got["agents"].(map[string]any)
		t.Logf("%s: agent processes %v", a.how, agents)
		if agents["serve"] == nil || agents["keep"] == nil {
			t.Fatalf("%s: serve or the keeper not seen: %v", a.how, agents)
		}
		if servePID == nil {
			servePID = agents["serve"]
		} else if fmt.Sprint(agents["serve"]) != fmt.Sprint(servePID) {
			t.Errorf("%s: serve is %v, was %v: it was restarted", a.how, agents["serve"], servePID)
		}
		want := map[string]string{"self": "1000:1000", "secret_file": "ENOENT", "connect_abstract": "EPERM",
			"squat_abstract": "EADDRINUSE", "keeper_answers": "ECONNRESET"}
		for _, role := range []string{"init", "serve", "keep"} {
			for k, v := range map[string]string{"environ": "EACCES", "mem": "EACCES", "fds": "EACCES", "ptrace": "EPERM",
				"threads": "[EPERM]", "pidfd_stop": "EPERM", "stop": "EPERM", "kill": "EPERM", "owner": "0"} {
				want[role+"_"+k] = v
			}
		}
		for _, k := range []string{"run_create", "run_symlink", "state_create", "state_symlink", "keeper_create", "keeper_symlink",
			"run_unlink", "run_rename", "run_rename_over", "keeper_unlink"} {
			want[k] = "EACCES" // the tools' Landlock fence
		}
		want["run_kept"] = "[agent.sock state]"
		for _, k := range []string{"bin_create", "bin_symlink", "bin_replace"} {
			if g := fmt.Sprint(got[k]); g == "ok" || g == "<nil>" {
				t.Errorf("%s: %s = %s, want refused", a.how, k, g)
			}
		}
		for k, v := range want {
			g := fmt.Sprint(got[k])
			if k == "keeper_answers" && g != "ok" && !strings.Contains(g, "answered") {
				continue // refused one way or another: reset, closed, a timeout
			}
			if g != v {
				t.Errorf("%s: %s = %s, want %s", a.how, k, g, v)
			}
		}
		envs, _ := got["environs"].(map[string]any)
		for pid, e := range envs {
			b, _ := base64.StdEncoding.DecodeString(fmt.Sprint(e))
			if bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte(agent.EnvSecret)) {
				t.Errorf("%s: the secret is in the readable environment of pid %s", a.how, pid)
			}
		}
	}

	// The terminal's programs too.
	// (The shell has no kill builtin: env runs the image's kill.)
	term, err := c.TermRun(ctx, agent.TermRunArgs{Command: "env kill -s STOP 1; echo init=$?; env kill -s KILL " + strings.Trim(fmt.Sprint(servePID), "[]") + "; echo serve=$?; " +
		"env rm -f /.cws-run/agent.sock; echo rm=$?; env touch /.cws-run/planted; echo touch=$?; env ln -s /tmp /.cws-run/link; echo ln=$?; env mv /.cws-run/agent.sock /.cws-run/x; echo mv=$?"}, nil)
	if err == nil {
		out := string(term.Stdout)
		for _, k := range []string{"init", "serve", "rm", "touch", "ln", "mv"} {
			if !strings.Contains(out, k+"=1") {
				t.Errorf("from the terminal: %q, want %s refused", out, k)
			}
		}
	} else {
		t.Errorf("terminal: %v", err)
	}

	// A language server starts (through the launcher, in a scoped domain of its own,
	// from a thread held for its parent-death signal) and answers.
	for name, content := range map[string]string{"go.mod": "module m\n\ngo 1.21\n", "main.go": "package main\n\nfunc main() {}\n\nfunc Hello() string { return \"hi\" }\n"} {
		if _, err := c.WriteFile(ctx, agent.WriteArgs{Path: name, Create: true}, []byte(content)); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
	raw, _ := json.Marshal(map[string]any{"file_path": "main.go"})
	if res, err := c.LSP(ctx, agent.LSPArgs{Tool: "get_document_symbols", Args: raw}); err != nil || !strings.Contains(string(res.Result), "Hello") {
		t.Errorf("get_document_symbols through gopls: %s, %v", res.Result, err)
	}

	// Nothing above touched the agent: it answers, and runs its processes as before.
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("ping after the attacks: %v", err)
	}
	if r, err := c.Exec(ctx, agent.ExecArgs{Argv: []string{"true"}}, nil, nil); err != nil || r.ExitCode != 0 {
		t.Errorf("exec after the attacks: %+v, %v", r, err)
	}
	if pi, err := c.ProcKill(ctx, agent.ProcKillArgs{ID: bg.ID}); err != nil || pi.Running {
		t.Errorf("killProcess after the attacks: %+v, %v", pi, err)
	}

	// (c) An operator's exec as the pod's user: no secret anywhere it can read, and
	// the agent's /proc entries closed to it (not dumpable).
	for _, p := range []string{"1", strings.Trim(fmt.Sprint(servePID), "[]")} {
		if out, err := docker(nil, "exec", "-u", "1000", name, "cat", "/proc/"+p+"/environ"); err == nil {
			t.Errorf("docker exec -u 1000 cat /proc/%s/environ worked: %q", p, out)
		}
	}
	if out, err := docker(nil, "exec", "-u", "1000", name, "cat", "/.cws-run/secret"); err == nil {
		t.Errorf("docker exec -u 1000 cat /.cws-run/secret worked: %q", out)
	}
	all, _ := docker(nil, "exec", "-u", "1000", name, "sh", "-c", "cat /proc/[0-9]*/environ 2>/dev/null; true")
	if strings.Contains(all, secret) {
		t.Error("docker exec -u 1000: the secret is in a readable environment")
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Errorf("ping at the end: %v", err)
	}
}
