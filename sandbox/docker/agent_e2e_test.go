package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// e2ePids is the pids limit of the acceptance containers: low, so the fork bomb hits
// it at once, and still ample for everything else the tests run.
const e2ePids = 128

// TestAgentE2E is the sandbox acceptance suite: one hardened container per image, the
// agent reached through the driver (over its socket for one image, through the real
// `docker exec` bridge for the other), and each promise of the sandbox checked from
// the host's side. The subtests share the container and run in order; the fork bomb
// goes last.
func TestAgentE2E(t *testing.T) {
	cli := requireDocker(t)
	images := []struct {
		name      string
		image     string
		ps        []string // lists every process as "PID ARGS", with a header line
		transport string
	}{
		{"workspace", version.WorkspaceImage, []string{"ps", "-eo", "pid,args"}, TransportSocket}, // procps
		{"testbox", version.TestImage, []string{"ps", "-o", "pid,args"}, TransportExec},           // busybox
	}
	for _, im := range images {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			requireImage(t, cli, im.image)
			d := newDriverWith(t, Config{Transport: im.transport})
			info := create(t, d, cli, sandbox.Spec{
				Session: uniq("e2e-" + im.name),
				Tenant:  uniq("tenant"),
				Image:   im.image,
				Limits:  sandbox.Limits{Pids: e2ePids},
			})
			e := &e2eEnv{d: d, id: info.ID, ps: im.ps, transport: im.transport}
			e.c = e.client(t)
			e.ping = e.ready(t, e.c)

			t.Run("non-root", e.nonRoot)
			t.Run("round trip", e.roundTrip)
			t.Run("symlink escape", e.symlinkEscape)
			t.Run("timeout", e.timeout)
			t.Run("output cap", e.outputCap)
			t.Run("concurrent reads", e.concurrentReads)
			t.Run("reconnect", e.reconnect)
			t.Run("fork bomb", e.forkBomb)
		})
	}
}

// e2eEnv is one image's container and the client the subtests share.
type e2eEnv struct {
	d         *Driver
	transport string
	id        string
	ps        []string
	c         *agent.Client
	ping      agent.PingResult // the first Ping, once the agent was up
}

// client returns a new agent client over a fresh bridge, closed at the end of the test.
func (e *e2eEnv) client(t *testing.T) *agent.Client {
	c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		return e.d.Attach(ctx, e.id)
	}, version.Version, nil)
	t.Cleanup(func() { c.Close() })
	return c
}

// ready pings until the agent answers: Create does not wait for it.
func (e *e2eEnv) ready(t testing.TB, c *agent.Client) agent.PingResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	for {
		res, err := c.Ping(ctx)
		if err == nil {
			return res
		}
		if ctx.Err() != nil {
			t.Fatalf("agent not ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exec runs argv through the agent and fails the test unless it could run at all.
func (e *e2eEnv) exec(t *testing.T, a agent.ExecArgs) agent.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := e.c.Exec(ctx, a, nil, nil)
	if err != nil {
		t.Fatalf("Exec %q: %v", a.Argv, err)
	}
	if res.StartError != "" {
		t.Fatalf("Exec %q: start: %s", a.Argv, res.StartError)
	}
	return res
}

// e2eProc is one line of ps.
type e2eProc struct {
	pid  int
	args string
}

// procs lists the container's processes through the agent, without ps itself.
func (e *e2eEnv) procs(t *testing.T) []e2eProc {
	t.Helper()
	res := e.exec(t, agent.ExecArgs{Argv: e.ps, TimeoutMS: 10_000})
	if res.ExitCode != 0 {
		t.Fatalf("%q: exit %d: %s", e.ps, res.ExitCode, res.Stderr)
	}
	return e2eParsePS(t, res.Stdout)
}

// procsSlow lists the container's processes with a plain `docker exec`, as the tool uid.
func (e *e2eEnv) procsSlow(t *testing.T) []e2eProc {
	t.Helper()
	out, code, err := e.d.Exec(t.Context(), e.id, e.ps, "1000:1000")
	if err != nil || code != 0 {
		t.Fatalf("docker exec %q: exit %d, %v", e.ps, code, err)
	}
	return e2eParsePS(t, out)
}

func e2eParsePS(t *testing.T, out []byte) []e2eProc {
	t.Helper()
	var ps []e2eProc
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n")[1:] {
		pid, args, _ := strings.Cut(strings.TrimSpace(line), " ")
		n, err := strconv.Atoi(pid)
		if err != nil {
			t.Fatalf("ps line %q: %v", line, err)
		}
		args = strings.TrimSpace(args)
		if cmd, _, _ := strings.Cut(args, " "); path.Base(cmd) == "ps" {
			continue
		}
		ps = append(ps, e2eProc{n, args})
	}
	return ps
}

// e2eMatching returns the processes whose command line satisfies keep.
func e2eMatching(ps []e2eProc, keep func(args string) bool) []e2eProc {
	var out []e2eProc
	for _, p := range ps {
		if keep(p.args) {
			out = append(out, p)
		}
	}
	return out
}

// nonRoot: the agent runs as its own uid, neither root nor the tool uid, and the
// commands it runs are the tool uid.
func (e *e2eEnv) nonRoot(t *testing.T) {
	if want, _, _ := parseUser(agent.DefaultAgentUser); e.ping.UID != want {
		t.Errorf("Ping UID = %d, want the agent's own %d", e.ping.UID, want)
	}
	res := e.exec(t, agent.ExecArgs{Argv: []string{"id", "-u"}})
	if res.ExitCode != 0 || string(res.Stdout) != "1000\n" {
		t.Errorf("id -u = exit %d, %q, want 1000", res.ExitCode, res.Stdout)
	}
}

// roundTrip: what the agent writes reads back byte for byte, and is what lands on disk.
func (e *e2eEnv) roundTrip(t *testing.T) {
	binary := make([]byte, 4096)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := make([]byte, 5<<20)
	_, _ = rand.Read(big)
	tests := []struct {
		name    string
		content []byte
		atomic  bool
		binary  bool
	}{
		{"text", []byte("hello, wörld\n\ttabbed line\r\nno newline at end"), false, false},
		{"binary", binary, true, true},
		{"empty", []byte{}, false, false},
		{"5 MiB random", big, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			p := "roundtrip/" + strings.ReplaceAll(tc.name, " ", "-")
			sum := sha256.Sum256(tc.content)
			want := hex.EncodeToString(sum[:])

			fi, err := e.c.WriteFile(ctx, agent.WriteArgs{Path: p, Create: true, Mkdirs: true, Atomic: tc.atomic}, tc.content)
			if err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			if fi.Size != int64(len(tc.content)) || fi.Type != agent.TypeFile || fi.Path != p {
				t.Errorf("WriteFile info = %+v", fi)
			}
			got, res, err := e.c.ReadFile(ctx, agent.ReadArgs{Path: p, Hash: true})
			if err != nil {
				t.Fatalf("ReadFile: %v", err)
			}
			if !bytes.Equal(got, tc.content) {
				t.Errorf("ReadFile = %d bytes, want the %d written (first difference at %d)", len(got), len(tc.content), e2eFirstDiff(got, tc.content))
			}
			if res.N != int64(len(tc.content)) || res.Info.Size != int64(len(tc.content)) {
				t.Errorf("ReadResult N/Size = %d/%d, want %d", res.N, res.Info.Size, len(tc.content))
			}
			if res.SHA256 != want {
				t.Errorf("ReadResult SHA256 = %s, want %s", res.SHA256, want)
			}
			if res.IsBinary != tc.binary {
				t.Errorf("ReadResult IsBinary = %v, want %v", res.IsBinary, tc.binary)
			}
			// And on disk, as another process sees it.
			out := e.exec(t, agent.ExecArgs{Argv: []string{"sha256sum", p}})
			if disk, _, _ := strings.Cut(string(out.Stdout), " "); disk != want {
				t.Errorf("sha256sum %s = %q, want %s", p, out.Stdout, want)
			}
		})
	}
}

func e2eFirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// symlinkEscape: a link planted by a command cannot carry reads or writes outside.
func (e *e2eEnv) symlinkEscape(t *testing.T) {
	ctx := t.Context()
	passwd := func() []byte {
		out, code, err := e.d.Exec(ctx, e.id, []string{"cat", "/etc/passwd"}, "")
		if err != nil || code != 0 || len(out) == 0 {
			t.Fatalf("cat /etc/passwd: exit %d, %v", code, err)
		}
		return out
	}
	before := passwd()
	if res := e.exec(t, agent.ExecArgs{Argv: []string{"ln", "-s", "/etc/passwd", "/workspace/pw"}}); res.ExitCode != 0 {
		t.Fatalf("ln -s: exit %d: %s", res.ExitCode, res.Stderr)
	}

	if got, _, err := e.c.ReadFile(ctx, agent.ReadArgs{Path: "pw"}); !errors.Is(err, agent.ErrTraversal) {
		t.Errorf("ReadFile(pw) = %d bytes, %v; want ErrTraversal", len(got), err)
	}
	for _, atomic := range []bool{false, true} {
		_, err := e.c.WriteFile(ctx, agent.WriteArgs{Path: "pw", Create: true, Atomic: atomic}, []byte("root::0:0::/:/bin/sh\n"))
		if !errors.Is(err, agent.ErrTraversal) {
			t.Errorf("WriteFile(pw, atomic=%v) = %v, want ErrTraversal", atomic, err)
		}
	}
	if after := passwd(); !bytes.Equal(after, before) {
		t.Errorf("/etc/passwd changed:\n%s", after)
	}
	if res := e.exec(t, agent.ExecArgs{Argv: []string{"readlink", "pw"}}); string(res.Stdout) != "/etc/passwd\n" {
		t.Errorf("readlink pw = %q, want the link left as it was", res.Stdout)
	}
}

// timeout: a command past its deadline is stopped, answered as timed out, and reaped.
func (e *e2eEnv) timeout(t *testing.T) {
	start := time.Now()
	res := e.exec(t, agent.ExecArgs{Argv: []string{"sleep", "1000"}, TimeoutMS: 1000})
	elapsed := time.Since(start)
	t.Logf("sleep 1000 with a 1 s timeout returned after %s: %+v", elapsed.Round(time.Millisecond), res)
	if !res.TimedOut {
		t.Errorf("TimedOut = false: %+v", res)
	}
	// The acceptance criterion itself: "returns a timeout in under 3 s".
	if elapsed >= 3*time.Second {
		t.Errorf("timeout answered after %s, the criterion is under 3 s (1 s timeout + SIGTERM grace)", elapsed)
	}
	if left := e2eMatching(e.procs(t), func(a string) bool { return strings.Contains(a, "sleep") }); len(left) > 0 {
		t.Errorf("processes left behind: %+v", left)
	}
}

// outputCap: an endless writer is cut at the cap, and says so. The whole capped output
// travels back in the done frame's JSON header (base64, so 1 MiB becomes ~1.33 MiB),
// which must fit agent.MaxHeader.
func (e *e2eEnv) outputCap(t *testing.T) {
	const limit = 1 << 20
	res := e.exec(t, agent.ExecArgs{Argv: []string{"yes"}, TimeoutMS: 2000, OutputCap: limit})
	if len(res.Stdout) != limit || !res.StdoutTruncated {
		t.Errorf("stdout = %d bytes, truncated %v; want %d, true", len(res.Stdout), res.StdoutTruncated, limit)
	}
	if !bytes.Equal(res.Stdout, bytes.Repeat([]byte("y\n"), limit/2)) {
		t.Error("stdout is not `y` lines")
	}
	t.Logf("yes: %d bytes, timed out %v, signal %q, %d ms", len(res.Stdout), res.TimedOut, res.Signal, res.DurationMS)
}

// concurrentReads: 50 reads at once on one bridge all get their own file.
func (e *e2eEnv) concurrentReads(t *testing.T) {
	const n = 50
	files := make([][]byte, n)
	for i := range files {
		files[i] = make([]byte, 16<<10)
		_, _ = rand.Read(files[i])
		if _, err := e.c.WriteFile(t.Context(), agent.WriteArgs{Path: fmt.Sprintf("conc/%d", i), Create: true, Mkdirs: true}, files[i]); err != nil {
			t.Fatalf("WriteFile %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got, _, err := e.c.ReadFile(ctx, agent.ReadArgs{Path: fmt.Sprintf("conc/%d", i)})
			if err != nil {
				t.Errorf("ReadFile %d: %v", i, err)
			} else if !bytes.Equal(got, files[i]) {
				t.Errorf("ReadFile %d: wrong content (%d bytes)", i, len(got))
			}
		})
	}
	wg.Wait()
}

// reconnect: background processes outlive the bridge; a dropped or killed bridge is
// redialed on the next call, and a new client (a restarted cws) finds them too.
func (e *e2eEnv) reconnect(t *testing.T) {
	ctx := t.Context()
	isBridge := func(a string) bool { return strings.Contains(a, "cws-agent attach") }
	pre := e2eMatching(e.procsSlow(t), isBridge)

	c := e.client(t)
	e.ready(t, c)
	p, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatalf("ProcStart: %v", err)
	}
	t.Cleanup(func() {
		if _, err := e.c.ProcKill(context.WithoutCancel(ctx), agent.ProcKillArgs{ID: p.ID, GraceMS: 100}); err != nil {
			t.Errorf("ProcKill %s: %v", p.ID, err)
		}
	})
	running := func(t *testing.T, c *agent.Client) {
		t.Helper()
		ps, err := c.ProcList(ctx)
		if err != nil {
			t.Fatalf("ProcList: %v", err)
		}
		i := slices.IndexFunc(ps, func(q agent.ProcInfo) bool { return q.ID == p.ID })
		if i < 0 || !ps[i].Running || ps[i].PID != p.PID {
			t.Fatalf("ProcList = %+v, want %s (pid %d) running", ps, p.ID, p.PID)
		}
		if pr, err := c.Ping(ctx); err != nil || pr.PID != e.ping.PID {
			t.Fatalf("Ping = %+v, %v; want the same agent (pid %d)", pr, err, e.ping.PID)
		}
	}

	t.Run("client closed", func(t *testing.T) {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		running(t, c)
	})
	t.Run("bridge killed", func(t *testing.T) {
		if e.transport != TransportExec {
			t.Skip("no bridge on the socket path; the exec transport's image covers it")
		}
		ours := slices.DeleteFunc(e2eMatching(e.procsSlow(t), isBridge), func(q e2eProc) bool {
			return slices.ContainsFunc(pre, func(r e2eProc) bool { return r.pid == q.pid })
		})
		if len(ours) != 1 {
			t.Fatalf("bridges of this client = %+v (before it dialed: %+v), want one", ours, pre)
		}
		out, code, err := e.d.Exec(ctx, e.id, []string{"kill", strconv.Itoa(ours[0].pid)}, agent.DefaultAgentUser)
		if err != nil || code != 0 {
			t.Fatalf("kill bridge %d: exit %d, %v: %s", ours[0].pid, code, err, out)
		}
		running(t, c)
		if slices.ContainsFunc(e.procsSlow(t), func(q e2eProc) bool { return q.pid == ours[0].pid }) {
			t.Errorf("bridge %d still running after kill", ours[0].pid)
		}
	})
	t.Run("new client", func(t *testing.T) {
		d := newDriverWith(t, Config{Transport: e.transport}) // a restarted cws has nothing but the container id
		c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
			return d.Attach(ctx, e.id)
		}, version.Version, nil)
		defer c.Close()
		running(t, c)
	})
}

// forkBomb: the pids limit stops a fork bomb, the agent survives it, and the sandbox
// is usable again once the bomb is gone.
func (e *e2eEnv) forkBomb(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	canary := []byte("still here\n")
	if _, err := e.c.WriteFile(ctx, agent.WriteArgs{Path: "canary", Create: true}, canary); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	before, haveEvents := e.pidsMaxEvents(t)
	start := time.Now()
	// The shell keeps spinning (builtins only, no fork) while the bomb grows, so the bomb
	// has the whole timeout to hit the pids limit; a shell that returned at once would
	// get its group killed before that on a fast machine.
	res, err := e.c.Exec(ctx, agent.ExecArgs{Argv: []string{"sh", "-c", "f(){ f|f & }; f; while :; do :; done"}, TimeoutMS: 3000}, nil, nil)
	if err != nil {
		t.Fatalf("Exec fork bomb: %v", err)
	}
	t.Logf("fork bomb returned after %s: exit %d, timed out %v, start error %q, stderr %d bytes",
		time.Since(start).Round(time.Millisecond), res.ExitCode, res.TimedOut, res.StartError, len(res.Stderr))
	// Usable again: the agent answers at once, and can fork once the kernel has reaped
	// (until then, starting any command may fail with EAGAIN).
	if _, err := e.c.Ping(ctx); err != nil {
		t.Errorf("Ping after fork bomb: %v", err)
	}
	if got, _, err := e.c.ReadFile(ctx, agent.ReadArgs{Path: "canary"}); err != nil || !bytes.Equal(got, canary) {
		t.Errorf("ReadFile after fork bomb = %q, %v", got, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := e.c.Exec(ctx, agent.ExecArgs{Argv: []string{"echo", "ok"}, TimeoutMS: 5000}, nil, nil)
		if err == nil && res.ExitCode == 0 && string(res.Stdout) == "ok\n" {
			t.Logf("echo ok after %s", time.Since(start).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("echo ok still failing 10 s after the bomb: %+v, %v", res, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Forking works again, so the counter can be read now.
	if haveEvents {
		after, _ := e.pidsMaxEvents(t)
		t.Logf("pids.events max: %d before, %d after", before, after)
		if after <= before {
			t.Errorf("pids.events max = %d, was %d: the bomb never hit the pids limit", after, before)
		}
	}
	shells := e2eMatching(e.procs(t), func(a string) bool {
		cmd, _, _ := strings.Cut(a, " ")
		return path.Base(cmd) == "sh"
	})
	if len(shells) > 5 {
		t.Errorf("%d shells left after the fork bomb: %+v", len(shells), shells[:5])
	}
}

// pidsMaxEvents reads how often the container's pids limit was hit (cgroup v1 or v2).
func (e *e2eEnv) pidsMaxEvents(t *testing.T) (int, bool) {
	t.Helper()
	for _, f := range []string{"/sys/fs/cgroup/pids/pids.events", "/sys/fs/cgroup/pids.events"} {
		res := e.exec(t, agent.ExecArgs{Argv: []string{"cat", f}})
		if res.ExitCode != 0 {
			continue
		}
		for _, line := range strings.Split(string(res.Stdout), "\n") {
			if v, ok := strings.CutPrefix(line, "max "); ok {
				n, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("%s: %q", f, res.Stdout)
				}
				return n, true
			}
		}
	}
	t.Log("no pids.events in the container: not checking that the limit was hit")
	return 0, false
}
