package docker

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// findAgentSh defines find, which prints the pids of the container's processes whose
// command line is "/.cws/cws-agent $1 …" (serve, keep).
const findAgentSh = `find() { for p in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in "/.cws/cws-agent $1 "*) echo ${p#/proc/};; esac
done; }; `

// TestProcsSurviveServe kills `cws-agent serve` with SIGKILL while background processes
// run, in both images: init starts another serve, and within seconds it answers for
// the processes of the one before. The output written before, during and after the
// kill is all there, in order; a process that exited after its serve died has its
// exit code; killProcess stops a process the new serve did not start; new ids follow
// the old ones. The keeper holding them is out of the workspace user's reach.
func TestProcsSurviveServe(t *testing.T) {
	cli := requireDocker(t)
	for _, im := range []struct{ name, image, transport string }{
		{"workspace", version.WorkspaceImage, TransportSocket},
		{"testbox", version.TestImage, TransportExec},
	} {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			requireImage(t, cli, im.image)
			d := newDriverWith(t, Config{Transport: im.transport})
			info := create(t, d, cli, sandbox.Spec{Session: uniq("procs-" + im.name), Tenant: uniq("tenant"), Image: im.image})
			e := &e2eEnv{d: d, id: info.ID, transport: im.transport}
			e.c = e.client(t)
			e.ping = e.ready(t, e.c)
			procsSurviveServe(t, e)
		})
	}
}

func procsSurviveServe(t *testing.T, e *e2eEnv) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := func(script string) agent.ProcInfo {
		t.Helper()
		started := time.Now()
		p, err := e.c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatalf("ProcStart %q: %v", script, err)
		}
		t.Logf("startProcess %s: %v", p.ID, time.Since(started).Round(time.Microsecond))
		return p
	}
	ticker := start(`i=0; while :; do echo "tick $i"; echo "tock $i" >&2; i=$((i+1)); sleep 0.05; done`)
	ender := start(`while [ ! -e /tmp/gate ]; do sleep 0.02; done; echo bye; exit 7`)
	sleeper := start(`echo zzz; exec sleep 1000`)
	old := waitOutput(t, ctx, e.c, ticker.ID, "tick 3\n")

	// Kill serve (as the agent's uid, from outside) and, while it is down, let the
	// ender exit: init reaps it.
	agentUser := strconv.Itoa(e.ping.UID)
	out, code, err := e.d.Exec(ctx, e.id, []string{"sh", "-c", findAgentSh + `kill -9 $(find serve) && touch /tmp/gate`}, agentUser)
	if err != nil || code != 0 {
		t.Fatalf("kill serve: exit %d, %v: %s", code, err, out)
	}
	killed := time.Now()

	// Within 10 s the new serve answers with the output of the old one and the new.
	var stdout, stderr string
	var back time.Duration
	for {
		o, err := e.c.ProcOutput(ctx, agent.ProcOutputArgs{ID: ticker.ID})
		if err == nil && back == 0 {
			back = time.Since(killed)
		}
		if err == nil && len(o.Stdout) > len(old)+40 {
			stdout, stderr = string(o.Stdout), string(o.Stderr)
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("10 s after serve was killed: %+v, %v", o, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("serve killed: answered again after %v", back.Round(time.Millisecond))
	if p, err := e.c.Ping(ctx); err != nil || p.PID == e.ping.PID {
		t.Fatalf("Ping = %+v, %v: want a new serve (the old one was pid %d)", p, err, e.ping.PID)
	}
	if !strings.HasPrefix(stdout, old) {
		t.Errorf("stdout after the restart does not start with the output before it:\nbefore: %q\nafter:  %q", old, stdout)
	}
	for name, s := range map[string]string{"stdout": stdout, "stderr": stderr} {
		if err := consecutive(s, map[string]string{"stdout": "tick", "stderr": "tock"}[name]); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	ps, err := e.c.ProcList(ctx)
	if err != nil {
		t.Fatalf("ProcList: %v", err)
	}
	byID := map[string]agent.ProcInfo{}
	for _, p := range ps {
		byID[p.ID] = p
	}
	if p := byID[ticker.ID]; !p.Running || p.PID != ticker.PID {
		t.Errorf("ProcList: ticker = %+v, want running as pid %d", p, ticker.PID)
	}
	if p := byID[sleeper.ID]; !p.Running {
		t.Errorf("ProcList: sleeper = %+v, want running", p)
	}
	end := waitEnd(t, ctx, e.c, ender.ID)
	if end.Proc.ExitCode == nil || *end.Proc.ExitCode != 7 || string(end.Stdout) != "bye\n" {
		code := "none"
		if end.Proc.ExitCode != nil {
			code = strconv.Itoa(*end.Proc.ExitCode)
		}
		// What init, serve and the keeper said about it (a rare failure in CI: the
		// keeper's 5 s wait for init's word ran out).
		t.Errorf("the process that exited after its serve died: exit %s, %+v, stdout %q; want exit 7, bye\ncontainer log:\n%s",
			code, end.Proc, end.Stdout, containerLogTail(e, 80))
	}

	// killProcess stops a process the new serve did not start.
	k, err := e.c.ProcKill(ctx, agent.ProcKillArgs{ID: sleeper.ID, GraceMS: 500})
	if err != nil || k.Running || k.ExitCode == nil || *k.ExitCode != -1 {
		t.Errorf("ProcKill after the restart = %+v, %v; want ended by a signal", k, err)
	}
	next := start(`echo next`)
	if n := procNumber(next.ID); n <= 3 || next.ID[2:] != ticker.ID[2:] {
		t.Errorf("id after the restart = %s, want one after p3 of the run of %s", next.ID, ticker.ID)
	}
	if o := waitEnd(t, ctx, e.c, next.ID); string(o.Stdout) != "next\n" || *o.Proc.ExitCode != 0 {
		t.Errorf("a process started by the new serve: %+v %q", o.Proc, o.Stdout)
	}

	// The keeper is the agent's: the workspace user can neither read its state nor
	// signal it (unless the agent is the workspace user, in containers made before
	// the agent had a uid of its own).
	if e.ping.UID == 1000 {
		t.Logf("the agent runs as the tool user: the keeper's isolation is not checked")
	} else {
		keeperOutOfReach(t, ctx, e, agentUser, ticker.ID)
	}

	// A container restart takes every process with it: their ids say they were lost,
	// and never name a process of the new run.
	if err := e.d.Stop(ctx, e.id); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := e.d.Start(ctx, e.id); err != nil {
		t.Fatalf("Start: %v", err)
	}
	c := e.client(t)
	e.ready(t, c)
	fresh, err := c.ProcStart(ctx, agent.ProcStartArgs{Argv: []string{"true"}})
	if err != nil {
		t.Fatalf("ProcStart after the container restart: %v", err)
	}
	if _, err := c.ProcOutput(ctx, agent.ProcOutputArgs{ID: ticker.ID}); !errors.Is(err, agent.ErrLost) || !strings.Contains(err.Error(), "lost with the agent") {
		t.Errorf("ProcOutput of a process of the run before the container restart = %v, want lost with the agent", err)
	}
	if fresh.ID == ticker.ID {
		t.Errorf("the first process after the restart has the id %s of one before it", fresh.ID)
	}
}

// keeperOutOfReach: a workspace process can neither read the keeper's directory nor
// kill it, and the keeper still answers for id after it tried.
func keeperOutOfReach(t *testing.T, ctx context.Context, e *e2eEnv, agentUser, id string) {
	keepers, _, err := e.d.Exec(ctx, e.id, []string{"sh", "-c", findAgentSh + "find keep"}, agentUser)
	if err != nil || len(strings.Fields(string(keepers))) != 1 {
		t.Fatalf("keepers = %q, %v: want one", keepers, err)
	}
	keeper := strings.TrimSpace(string(keepers))
	res := e.exec(t, agent.ExecArgs{Argv: []string{"sh", "-c", "ls /tmp/.cws-agent/procs; kill -9 " + keeper}})
	if res.ExitCode == 0 {
		t.Errorf("the workspace user reached the keeper: %s%s", res.Stdout, res.Stderr)
	}
	if o, err := e.c.ProcOutput(ctx, agent.ProcOutputArgs{ID: id}); err != nil || !o.Proc.Running {
		t.Errorf("after the workspace user tried: %+v, %v", o.Proc, err)
	}
}

// waitOutput reads a process's stdout from the start until it holds want, and returns it.
func waitOutput(t *testing.T, ctx context.Context, c *agent.Client, id, want string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		o, err := c.ProcOutput(ctx, agent.ProcOutputArgs{ID: id, WaitMS: 200})
		if err != nil {
			t.Fatalf("ProcOutput %s: %v", id, err)
		}
		if strings.Contains(string(o.Stdout), want) {
			return string(o.Stdout)
		}
		if time.Now().After(deadline) {
			t.Fatalf("ProcOutput %s = %q, want %q in it", id, o.Stdout, want)
		}
	}
}

// waitEnd waits for a process to end and returns all of its output.
func waitEnd(t *testing.T, ctx context.Context, c *agent.Client, id string) *agent.ProcOutput {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		o, err := c.ProcOutput(ctx, agent.ProcOutputArgs{ID: id, WaitMS: 200})
		if err != nil {
			t.Fatalf("ProcOutput %s: %v", id, err)
		}
		if !o.Proc.Running {
			return &o
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still running: %+v", id, o.Proc)
		}
	}
}

// consecutive checks that s is the lines "<word> 0", "<word> 1", … with none missing
// (the last may be cut short).
func consecutive(s, word string) error {
	lines := strings.Split(s, "\n")
	re := regexp.MustCompile("^" + word + ` (\d+)$`)
	for i, l := range lines[:len(lines)-1] {
		m := re.FindStringSubmatch(l)
		if m == nil || m[1] != strconv.Itoa(i) {
			return fmt.Errorf("line %d is %q, want %q (%d lines)", i, l, fmt.Sprintf("%s %d", word, i), len(lines))
		}
	}
	if len(lines) < 5 {
		return fmt.Errorf("only %d lines", len(lines))
	}
	return nil
}

// procNumber is N of a process id "pN-<run>".
func procNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(id, "-", 2)[0], "p"))
	return n
}

// containerLogTail is the last n lines the container wrote (init, serve and the
// keeper log there), for a failure's message.
func containerLogTail(e *e2eEnv, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := e.d.cli.ContainerLogs(ctx, e.id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Timestamps: true, Tail: strconv.Itoa(n)})
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer rc.Close()
	var out strings.Builder
	if _, err := stdcopy.StdCopy(&out, &out, rc); err != nil {
		out.WriteString("(log cut: " + err.Error() + ")")
	}
	return out.String()
}
