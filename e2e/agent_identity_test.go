package e2e_test

import (
	"fmt"
	"strings"
	"testing"

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
			if tc.transport == "socket" {
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

		})
	}
}
