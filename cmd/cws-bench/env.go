package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"runtime"
	"time"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/version"
)

// env is what sections share: the driver, the settings, and one sandbox made on
// first use.
type env struct {
	driver *docker.Driver
	// execDriver reaches the same containers through the exec stream only, and
	// transport is the path driver takes (docker.TransportSocket or TransportExec).
	execDriver *docker.Driver
	transport  string
	agentBin   string // the agent binary, for sections that make drivers of their own
	image      string
	scale      float64 // multiplies every iteration count
	progress   io.Writer
	// localReads is what cws serve wires by default (--local-reads): reads answered
	// through the workspace root the agent sends; nil with -local-reads=false.
	localReads agent.LocalOpener

	// The mcpproc section's settings: a prebuilt cws ("" builds one), the stores to
	// run it with, and where its debug listener (CWS_PPROF_ADDR) listens and profiles
	// go ("" for none).
	cwsBin        string
	procStores    []string
	cwsPprof      string
	cwsProfileDir string
	cwsEnv        []string // KEY=VALUE for cws serve alone
	cwsLogDir     string   // where cws serve's logs are kept; "" for a temporary directory

	shared *box // nil until a section asks for it
}

// box is a running sandbox and a client connected to its agent.
type box struct {
	ID     string
	Client *agent.Client
}

// iterations scales a section's default count; it is never below 1.
func (e *env) iterations(base int) int {
	return max(1, int(math.Round(float64(base)*e.scale)))
}

// logf prints a progress line to stderr.
func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.progress, "bench: "+format+"\n", args...)
}

// sandbox returns the shared sandbox, creating it on the first call. Sections may
// write files into its workspace; they should use paths of their own.
func (e *env) sandbox(ctx context.Context) (*box, error) {
	if e.shared != nil {
		return e.shared, nil
	}
	e.logf("creating container (%s)…", e.image)
	b, err := e.newBox(ctx)
	if err != nil {
		return nil, err
	}
	e.shared = b
	return b, nil
}

// newBox creates a sandbox and waits until its agent answers. The caller removes it.
func (e *env) newBox(ctx context.Context) (*box, error) {
	info, err := e.driver.Create(ctx, sandbox.Spec{Session: session(), Tenant: "cws-bench", Image: e.image})
	if err != nil {
		return nil, err
	}
	b := &box{ID: info.ID, Client: agent.NewClient(func(ctx context.Context) (io.ReadWriteCloser, error) {
		return e.driver.Attach(ctx, info.ID)
	}, version.Version, nil)}
	if err := ready(ctx, b.Client); err != nil {
		e.remove(ctx, b)
		return nil, err
	}
	return b, nil
}

// ready pings until the agent answers (the first dial waits for it to listen).
func ready(ctx context.Context, c *agent.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		_, err := c.Ping(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent not ready: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// remove closes the client and removes the sandbox, even when ctx has ended.
func (e *env) remove(ctx context.Context, b *box) {
	b.Client.Close()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.driver.Remove(ctx, b.ID); err != nil {
		e.logf("remove sandbox %s: %v", b.ID, err)
	}
}

// close removes the shared sandbox.
func (e *env) close(ctx context.Context) {
	if e.shared != nil {
		e.logf("removing container…")
		e.remove(ctx, e.shared)
		e.shared = nil
	}
}

func session() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "bench-" + hex.EncodeToString(b[:])
}

// host describes the machine for the table's caption.
func host() string {
	return fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format(time.DateOnly))
}
