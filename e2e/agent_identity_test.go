package e2e_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
)

// attackAgentPy is run by the workspace user, through runCommand, against its own
// agent. Each line it prints is "<what>=<outcome>"; the test wants every attack refused.
const attackAgentPy = `
import ctypes, errno, os, signal, socket
def find(arg):
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open("/proc/%s/cmdline" % p, "rb").read() == b"/.cws/cws-agent\0" + arg + b"\0":
                    return int(p)
            except OSError:
                pass
    return 0
def out(k, v):
    print("%s=%s" % (k, v))
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
a = find(b"serve")
out("agent", a)
if a == 0:
    raise SystemExit("no agent found")
out("agent_uid", os.stat("/proc/%d" % a).st_uid if a else "")
out("self", "%d:%d" % (os.getuid(), os.getgid()))
out("capeff", [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0])
out("stop", err(lambda: os.kill(a, signal.SIGSTOP)))
out("kill", err(lambda: os.kill(a, signal.SIGKILL)))
out("kill_init", err(lambda: os.kill(1, signal.SIGKILL)))
out("environ", err(lambda: open("/proc/%d/environ" % a, "rb").read()))
out("init_environ", err(lambda: open("/proc/1/environ", "rb").read()))
out("fds", err(lambda: os.listdir("/proc/%d/fd" % a)))
out("mem", err(lambda: open("/proc/%d/mem" % a, "rb").read(1)))
seen = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            seen += b"CWS_AGENT_SECRET" in open("/proc/%s/environ" % p, "rb").read()
        except OSError:
            pass
out("secret_readable", seen)
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, a, 0, 0)
out("ptrace", "ok" if r == 0 else errno.errorcode[ctypes.get_errno()])
if os.path.isdir("/.cws-run"):
    out("unlink_socket", err(lambda: os.unlink("/.cws-run/agent.sock")))
    out("socket_kept", int(os.path.exists("/.cws-run/agent.sock")))
    out("plant", err(lambda: open("/.cws-run/planted", "w")))
    out("move_rundir", err(lambda: os.rename("/.cws-run", "/tmp/x")))
    s3 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    out("squat_socket", err(lambda: s3.bind("/.cws-run/other.sock")))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect("\0cws-agent")
    s.sendall(b'{"v":1}\n')
    out("impersonate", "answered" if s.recv(64) else "closed")
except (ConnectionResetError, BrokenPipeError):
    out("impersonate", "closed")
except OSError as e:
    out("impersonate", type(e).__name__)
s2 = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
out("squat", err(lambda: s2.bind("\0cws-agent")))
print("end")
`

// findSecretPy looks for the agent's secret in every environment and file it can read.
const findSecretPy = `
import os
seen = 0
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            seen += b"CWS_AGENT_SECRET" in open("/proc/%s/environ" % p, "rb").read()
        except OSError:
            pass
seen += os.path.exists("/.cws-run/secret")
print("secret_readable=%d" % seen)
`

// tamperRunDirPy tries, as a tool process, every way to change the agent's socket
// directory (when it has one: Docker's exec transport mounts none) and state: unlink its socket, create a file, move the socket aside or
// another entry over it, plant a symlink, create a file in the state directory (in the
// run directory in a pod, /tmp/.cws-agent on Docker). argv[1] names the entry point; the
// outcomes go to tamper-<it>.out in the workspace, one "<what>=<outcome>" a line.
const tamperRunDirPy = `
import errno, os, sys
R = "/.cws-run"
sock = R + "/agent.sock"
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
def create(p):
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o644))
res = [("rundir", int(os.path.isdir(R))), ("had_socket", int(os.path.exists(sock)))]
other = [R + "/" + n for n in ("state", "secret") if os.path.lexists(R + "/" + n)]
state = [d for d in (R + "/state", "/tmp/.cws-agent") if os.path.lexists(d)]
res.append(("unlink", err(lambda: os.unlink(sock))))
res.append(("create", err(lambda: create(R + "/planted"))))
res.append(("rename_aside", err(lambda: os.rename(sock, R + "/moved.sock"))))
res.append(("rename_over", err(lambda: os.replace(other[0], sock)) if other else "nothing to move"))
res.append(("symlink", err(lambda: os.symlink("/workspace", R + "/link"))))
res.append(("state_create", err(lambda: create(state[0] + "/planted")) if state else "no state directory"))
res.append(("socket_kept", int(os.path.exists(sock))))
res.append(("planted", int(any(os.path.lexists(R + "/" + n) for n in ("planted", "moved.sock", "link")))))
out = "".join("%s=%s\n" % kv for kv in res) + "end\n"
open("/workspace/tamper-%s.out" % sys.argv[1], "w").write(out)
print(out)
`

// tamperRunDir runs tamperRunDirPy from each way a tool process starts — runCommand, a
// terminal command, a background process, a run configuration — and wants every
// change refused and the socket where it was.
func tamperRunDir(t *testing.T, url, tok string) {
	t.Helper()
	c := connect(t, url+"/mcp", tok, "")
	vs := connect(t, url+"/mcp?toolsets=vscode", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "tamper.py", "contents": tamperRunDirPy})
	c.call(t, "writeFile", map[string]any{"path": ".vscode/launch.json", "contents": `{"configurations": [
  {"name": "Tamper", "type": "python", "request": "launch", "program": "${workspaceFolder}/tamper.py", "args": ["runconf"]}]}`})
	c.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"tamper.py", "command"}})
	vs.vsText(t, "execute_terminal_command", map[string]any{"command": "python3 tamper.py terminal"})
	c.call(t, "startProcess", map[string]any{"command": "python3", "args": []string{"tamper.py", "background"}})
	if s := vs.vsText(t, "run_configuration", map[string]any{"configName": "Tamper"}); s != "Run configuration started" {
		t.Fatalf("run_configuration Tamper = %q", s)
	}
	for _, how := range []string{"command", "terminal", "background", "runconf"} {
		var out string
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			res, err := c.callRaw("readFile", map[string]any{"path": "tamper-" + how + ".out"}, nil)
			if err == nil && !res.IsError {
				var r struct{ Content string }
				if json.Unmarshal([]byte(text(res)), &r) == nil && strings.HasSuffix(r.Content, "end\n") {
					out = r.Content
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the tamper script left no tamper-%s.out", how, how)
			}
		}
		got := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				got[k] = v
			}
		}
		t.Logf("%s: %v", how, got)
		if got["state_create"] != "EACCES" {
			t.Errorf("%s: state_create = %q, want EACCES", how, got["state_create"])
		}
		if got["rundir"] == "0" && !onKube() {
			continue // Docker's exec transport mounts no socket directory
		}
		if got["had_socket"] != "1" {
			t.Fatalf("%s: no agent socket in the run directory: %v", how, got)
		}
		for _, k := range []string{"unlink", "create", "rename_aside", "symlink"} {
			if got[k] != "EACCES" {
				t.Errorf("%s: %s = %q, want EACCES", how, k, got[k])
			}
		}
		if v := got["rename_over"]; v == "ok" || v == "" {
			t.Errorf("%s: rename_over = %q, want refused", how, v)
		}
		if got["socket_kept"] != "1" || got["planted"] != "0" {
			t.Errorf("%s: socket_kept = %q, planted = %q, want 1 and 0", how, got["socket_kept"], got["planted"])
		}
	}
	// The agent never noticed: the session goes on.
	c.call(t, "writeFile", map[string]any{"path": "after-tamper.txt", "contents": "ok"})
	if r := c.call(t, "runCommand", map[string]any{"command": "cat", "args": []string{"after-tamper.txt"}}); fmt.Sprint(r["stdout"]) != "ok" {
		t.Errorf("runCommand after the tampering: %v", r)
	}
}

// TestAgentOutOfReach runs, as the workspace user and through the public API, every
// way a tool process could reach its agent: stop it, kill it, trace it, read its
// environment, memory and descriptors, find the socket secret, replace or squat its
// socket, speak for cws on its abstract socket. Each must fail, and the session must
// work on afterwards: the agent is not even disturbed. Files and processes still
// belong to the workspace user.
func TestAgentOutOfReach(t *testing.T) {
	requireRealDeps(t)
	cases := []struct{ transport, tenant string }{
		{"socket", tenantOpen}, // no allowlist: the identity alone stands in the way
		{"exec", tenantVSCode}, // an allowlist: the same under Landlock
	}
	flag := "--agent-transport"
	if onKube() {
		// A pod's agent shares the tool uid (same-uid mode): what stands in the way is
		// its Landlock-scoped launcher and its non-dumpable processes.
		cases[0].transport, flag = "direct", "--kube-transport"
	}
	for _, tc := range cases {
		t.Run(tc.transport+"/"+strings.SplitN(tc.tenant, "-", 2)[0], func(t *testing.T) {
			fx := newFixture(t)
			p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), flag, tc.transport)
			t.Cleanup(func() { p.deleteAll(t, fx, tc.tenant) })
			tok := fx.token(t, tc.tenant, "ivan", "")
			c := connect(t, p.url+"/mcp", tok, "")
			c.call(t, "writeFile", map[string]any{"path": "mine.txt", "contents": "hello"})

			run := c.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"-c", attackAgentPy}})
			out := fmt.Sprint(run["stdout"])
			if !strings.Contains(out, "end") {
				t.Fatalf("the attack script did not finish: %v", run)
			}
			got := map[string]string{}
			for _, line := range strings.Split(out, "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					got[k] = v
				}
			}
			t.Logf("attacks:\n%s", out)
			if got["agent"] == "" || got["agent"] == "0" {
				t.Fatalf("no cws-agent serve process seen from the workspace: %s", out)
			}
			want := map[string]string{
				"self":            "1000:1000",
				"capeff":          "0000000000000000",
				"stop":            "EPERM",
				"kill":            "EPERM",
				"kill_init":       "EPERM",
				"environ":         "EACCES",
				"init_environ":    "EACCES",
				"fds":             "EACCES",
				"mem":             "EACCES",
				"secret_readable": "0",
				"ptrace":          "EPERM",
				"impersonate":     "closed",
				"squat":           "EADDRINUSE",
			}
			if onKube() {
				// The abstract socket is out of the domain's reach: connect is refused
				// by the kernel rather than closed by the agent.
				want["impersonate"] = "PermissionError"
			}
			if got["unlink_socket"] != "" {
				// The run directory: the agent's uid keeps it on Docker, the tools'
				// Landlock fence in a pod.
				want["unlink_socket"] = "EACCES"
				want["socket_kept"] = "1"
				want["plant"] = "EACCES"
				want["squat_socket"] = "EACCES"
				if got["move_rundir"] == "ok" {
					t.Errorf("the workspace user moved the agent's socket directory away")
				}
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
			if !onKube() && (got["agent_uid"] == "1000" || got["agent_uid"] == "") {
				t.Errorf("the agent runs as uid %q, the workspace user's", got["agent_uid"])
			}

			// Not even an operator's exec as the tool user carries the secret (in a
			// pod, kubectl exec is outside every Landlock domain: it only looks).
			box := containerOf(t, onlySession(t, p, tok, "ivan").ID)
			script := attackAgentPy
			if onKube() {
				script = findSecretPy
			}
			if out, err := boxExec(box, "/", "python3", "-c", script); err != nil ||
				!strings.Contains(string(out), "secret_readable=0\n") {
				t.Errorf("exec as the tool user of the attacks: %v:\n%s", err, out)
			}

			// Nothing above touched the agent: the session goes on, and what the agent
			// makes belongs to the workspace user.
			c.call(t, "writeFile", map[string]any{"path": "after.txt", "contents": "still here"})
			if r := c.call(t, "readFile", map[string]any{"path": "mine.txt"}); fmt.Sprint(r["content"]) != "hello" {
				t.Errorf("readFile after the attacks: %v", r)
			}
			owners := c.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"-c",
				`import os; [print("%d:%d" % (os.stat(f).st_uid, os.stat(f).st_gid)) for f in ("mine.txt", "after.txt")]`}})
			if o := strings.Fields(fmt.Sprint(owners["stdout"])); len(o) != 2 || o[0] != "1000:1000" || o[1] != "1000:1000" {
				t.Errorf("files written by tools are owned by %v, want 1000:1000", o)
			}

			// The run directory and the agent's state, from every way a tool starts.
			tamperRunDir(t, p.url, tok)

		})
	}
}
