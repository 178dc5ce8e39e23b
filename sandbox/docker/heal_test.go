package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/version"
)

// TestHeal stops a sandbox's agent from the host (SIGSTOP of serve and of init) and
// brings it back: RestartAgent in place, Restart with the container, and RestartAgent
// of a paused container. Each time the agent answers again and the workspace's files
// are intact. It runs on the workspace image over the socket and on the busybox test
// image over the exec stream (revive needs nothing from the image).
func TestHeal(t *testing.T) {
	cli := requireDocker(t)
	for _, im := range []struct{ name, image, transport string }{
		{"workspace", version.WorkspaceImage, TransportSocket},
		{"testbox", version.TestImage, TransportExec},
	} {
		t.Run(im.name, func(t *testing.T) {
			t.Parallel()
			requireImage(t, cli, im.image)
			d := newDriverWith(t, Config{Transport: im.transport})
			info := create(t, d, cli, sandbox.Spec{Session: uniq("heal-" + im.name), Tenant: uniq("tenant"), Image: im.image})
			c := agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
				return d.Attach(ctx, info.ID)
			}, version.Version, nil).WithLiveness(agent.Liveness{StallAfter: time.Second, PingTimeout: time.Second, HandshakeTimeout: 2 * time.Second})
			t.Cleanup(c.Shutdown)
			e := &e2eEnv{d: d, id: info.ID}
			first := e.ready(t, c)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			if _, err := c.WriteFile(ctx, agent.WriteArgs{Path: "kept.txt", Create: true}, []byte("kept")); err != nil {
				t.Fatal(err)
			}
			// A write: on the socket path cws answers reads and stats itself (local
			// reads), so only a change is sure to need the agent.
			stuck := func(t *testing.T) {
				t.Helper()
				_, err := c.WriteFile(ctx, agent.WriteArgs{Path: "probe.txt", Create: true}, []byte("x"))
				if !errors.Is(err, agent.ErrUnresponsive) {
					top, _ := d.cli.ContainerTop(context.WithoutCancel(ctx), info.ID, []string{"-eo", "pid,stat,args"})
					t.Fatalf("write on a stopped agent = %v, want ErrUnresponsive; the container's processes: %v", err, top.Processes)
				}
			}
			back := func(t *testing.T) agent.PingResult {
				t.Helper()
				p := e.ready(t, c)
				b, _, err := c.ReadFile(ctx, agent.ReadArgs{Path: "kept.txt"})
				if err != nil || string(b) != "kept" {
					t.Fatalf("kept.txt after the heal = %q, %v", b, err)
				}
				return p
			}

			t.Run("agent", func(t *testing.T) {
				stopAgent(t, d, info.ID)
				stuck(t)
				if err := d.RestartAgent(ctx, info.ID); err != nil {
					t.Fatalf("RestartAgent: %v", err)
				}
				if p := back(t); p.PID == first.PID {
					t.Errorf("the agent's pid is still %d: serve was not restarted", p.PID)
				}
			})
			t.Run("container", func(t *testing.T) {
				stopAgent(t, d, info.ID)
				stuck(t)
				if err := d.Restart(ctx, info.ID); err != nil {
					t.Fatalf("Restart: %v", err)
				}
				back(t)
			})
			t.Run("paused", func(t *testing.T) {
				if err := cli.ContainerPause(ctx, info.ID); err != nil {
					t.Fatal(err)
				}
				stuck(t)
				if err := d.RestartAgent(ctx, info.ID); err != nil {
					t.Fatalf("RestartAgent of a paused container: %v", err)
				}
				back(t)
			})
			t.Run("removed", func(t *testing.T) {
				if err := d.Remove(ctx, info.ID); err != nil {
					t.Fatal(err)
				}
				for _, heal := range []func(context.Context, string) error{d.RestartAgent, d.Restart} {
					if err := heal(ctx, info.ID); !errors.Is(err, ErrNotFound) {
						t.Errorf("heal of a removed sandbox = %v, want ErrNotFound", err)
					}
				}
			})
		})
	}
}

// stopAgent sends SIGSTOP to the container's `cws-agent serve` and `cws-agent init`
// from the host (their host pids come from the engine); without root on the host, from
// inside the container as root. As root it also waits until the kernel shows them
// stopped, and lists the container again: a serve that init started meanwhile (the last
// restart's) is stopped too, so no agent process is left to answer.
func stopAgent(t *testing.T, d *Driver, id string) {
	t.Helper()
	stopped := map[int]bool{}
	for round := 0; ; round++ {
		fresh := 0
		for _, p := range agentProcesses(t, d, id) {
			if stopped[p.pid] {
				continue
			}
			var err error
			if os.Geteuid() == 0 {
				err = syscall.Kill(p.pid, syscall.SIGSTOP)
			} else {
				sub := p.args[strings.LastIndex(p.args, " ")+1:]
				_, _, err = d.Exec(t.Context(), id, []string{"sh", "-c", fmt.Sprintf(
					`for p in /proc/[0-9]*; do [ "$(tr '\0' ' ' < $p/cmdline)" = "%s %s " ] && kill -STOP ${p#/proc/}; done; true`, agentPath, sub)}, "0:0")
			}
			if err != nil {
				t.Fatalf("SIGSTOP %s: %v", p.args, err)
			}
			if os.Geteuid() == 0 {
				waitStopped(t, p.pid)
			}
			stopped[p.pid] = true
			fresh++
		}
		if fresh == 0 || os.Geteuid() != 0 {
			break
		}
		if round == 5 {
			t.Fatalf("agent processes keep appearing: %v", agentProcesses(t, d, id))
		}
	}
	if len(stopped) < 2 && os.Geteuid() == 0 {
		t.Fatalf("stopped %d agent processes, want init and serve: %v", len(stopped), agentProcesses(t, d, id))
	}
}

type agentProc struct {
	pid  int
	args string
}

// agentProcesses lists the container's `cws-agent serve` and `cws-agent init` (host pids).
func agentProcesses(t *testing.T, d *Driver, id string) []agentProc {
	t.Helper()
	top, err := d.cli.ContainerTop(t.Context(), id, []string{"-eo", "pid,args"})
	if err != nil {
		t.Fatal(err)
	}
	var out []agentProc
	for _, p := range top.Processes {
		if len(p) < 2 || (!strings.HasSuffix(p[1], "cws-agent serve") && !strings.HasSuffix(p[1], "cws-agent init")) {
			continue
		}
		pid, err := strconv.Atoi(p[0])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, agentProc{pid, p[1]})
	}
	return out
}

// waitStopped waits until the kernel shows pid stopped (state T), or it is gone.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return // gone
		}
		// pid (comm) STATE …: comm may hold spaces, so the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
	}
	t.Fatalf("pid %d never showed stopped after SIGSTOP", pid)
}
