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
					t.Fatalf("write on a stopped agent = %v, want ErrUnresponsive", err)
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
// inside the container as root.
func stopAgent(t *testing.T, d *Driver, id string) {
	t.Helper()
	top, err := d.cli.ContainerTop(t.Context(), id, []string{"-eo", "pid,args"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range top.Processes {
		if len(p) < 2 || (!strings.HasSuffix(p[1], "cws-agent serve") && !strings.HasSuffix(p[1], "cws-agent init")) {
			continue
		}
		pid, err := strconv.Atoi(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			err = syscall.Kill(pid, syscall.SIGSTOP)
		} else {
			sub := p[1][strings.LastIndex(p[1], " ")+1:]
			_, _, err = d.Exec(t.Context(), id, []string{"sh", "-c", fmt.Sprintf(
				`for p in /proc/[0-9]*; do [ "$(tr '\0' ' ' < $p/cmdline)" = "%s %s " ] && kill -STOP ${p#/proc/}; done; true`, agentPath, sub)}, "0:0")
		}
		if err != nil {
			t.Fatalf("SIGSTOP %s: %v", p[1], err)
		}
		n++
	}
	if n < 2 {
		t.Fatalf("stopped %d agent processes, want init and serve: %v", n, top.Processes)
	}
}
