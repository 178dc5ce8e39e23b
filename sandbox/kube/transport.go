package kube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"

	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/sandbox/agent"
)

// The two paths to an agent:
//   - direct: a TCP connection to the pod's IP and agent port, proven both ways by the
//     pod's secret (agent.AuthenticateAgent): no API request at all, for cws replicas
//     that reach pod IPs (in the cluster, or on its network);
//   - exec: the API server's exec stream into `cws-agent attach`, authenticated by
//     the API server: for cws outside the cluster, and the fallback.
//
// In auto mode a dial that can't reach the pod network switches the direct path off
// for directRetry; a pod whose agent can't prove its secret (its container was
// restarted by hand, and the secret file is gone) is reached over exec.

const (
	directDialTimeout = 2 * time.Second
	directAuthTimeout = 5 * time.Second
	directRetry       = time.Minute
)

// Attach opens a stream to the agent in pod id. A missing pod is ErrNotFound, one that
// does not run ErrStopped.
func (d *Driver) Attach(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	if s := d.pool.Preopened(id); s != nil {
		d.log.Debug("agent stream: pre-opened", "pod", id)
		return s, nil
	}
	p, err := d.get(id)
	if errors.Is(err, sandbox.ErrNotFound) {
		if _, serr := d.suspendedClaim(ctx, id); serr == nil {
			return nil, fmt.Errorf("attach sandbox %s: %w: it is suspended", id, sandbox.ErrStopped)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := ready(p); err != nil {
		return nil, err
	}
	t0 := time.Now()
	c, err := d.attach(ctx, p)
	if err != nil {
		return nil, err
	}
	d.log.Debug("agent stream: dialled", "pod", id, "transport", d.transport, "took", time.Since(t0).Round(time.Microsecond))
	return d.conns.track(p, c), nil
}

// attach opens a stream over the configured transport.
func (d *Driver) attach(ctx context.Context, p *corev1.Pod) (io.ReadWriteCloser, error) {
	switch d.transport {
	case TransportDirect:
		return d.dialDirect(ctx, p)
	case TransportExec:
		return d.attachExec(ctx, p)
	}
	if d.directUsable() {
		c, err := d.dialDirect(ctx, p)
		if err == nil {
			return c, nil
		}
		var ne net.Error
		if !errors.Is(err, agent.ErrAuth) && (errors.As(err, &ne) || errors.Is(err, errNoIP)) {
			d.directFailed(err)
		} else {
			d.log.Warn("direct path to the agent refused; using the exec stream", "pod", p.Name, "err", err)
		}
	}
	return d.attachExec(ctx, p)
}

var errNoIP = errors.New("the pod has no IP yet")

func (d *Driver) directUsable() bool {
	d.tMu.Lock()
	defer d.tMu.Unlock()
	return time.Since(d.directBad) > directRetry
}

func (d *Driver) directFailed(err error) {
	d.tMu.Lock()
	defer d.tMu.Unlock()
	if time.Since(d.directBad) > directRetry {
		d.log.Warn("pod IPs can't be reached; using the API server's exec stream", "retry_in", directRetry, "err", err)
	}
	d.directBad = time.Now()
}

// dialDirect connects to the agent's port on the pod's IP and proves the pod's secret.
func (d *Driver) dialDirect(ctx context.Context, p *corev1.Pod) (net.Conn, error) {
	if p.Status.PodIP == "" {
		return nil, fmt.Errorf("dial agent of %s: %w", p.Name, errNoIP)
	}
	secret := p.Annotations[annSecret]
	if secret == "" {
		return nil, fmt.Errorf("dial agent of %s: %w: the pod has no secret", p.Name, agent.ErrAuth)
	}
	dl := net.Dialer{Timeout: directDialTimeout, KeepAlive: 30 * time.Second}
	conn, err := dl.DialContext(ctx, "tcp", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(agentPort)))
	if err != nil {
		return nil, fmt.Errorf("dial agent of %s: %w", p.Name, err)
	}
	deadline := time.Now().Add(directAuthTimeout)
	if dd, ok := ctx.Deadline(); ok && dd.Before(deadline) {
		deadline = dd
	}
	_ = conn.SetDeadline(deadline)
	if err := agent.AuthenticateAgent(conn, []byte(secret)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial agent of %s: %w", p.Name, err)
	}
	_ = conn.SetDeadline(time.Time{})
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return conn, nil
}

// executor is an exec stream into pod p's workspace container running argv:
// WebSocket first, SPDY where the API server (or a proxy) refuses the upgrade.
func (d *Driver) executor(p *corev1.Pod, argv []string, stdin bool) (remotecommand.Executor, error) {
	req := d.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(d.ns).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: ctrWorkspace, Command: argv, Stdin: stdin, Stdout: true, Stderr: true},
			scheme.ParameterCodec)
	spdy, err := remotecommand.NewSPDYExecutor(d.rest, "POST", req.URL())
	if err != nil {
		return nil, err
	}
	ws, err := remotecommand.NewWebSocketExecutor(d.rest, "GET", req.URL().String())
	if err != nil {
		return spdy, nil
	}
	return remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
}

// attachExec runs `cws-agent attach` in pod p and bridges its stdio.
func (d *Driver) attachExec(ctx context.Context, p *corev1.Pod) (io.ReadWriteCloser, error) {
	ex, err := d.executor(p, []string{agentPath, "attach"}, true)
	if err != nil {
		return nil, fmt.Errorf("attach to agent of %s: %w", p.Name, err)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	go func() {
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: inR, Stdout: outW, Stderr: &capped{b: &stderr, n: 4 << 10}})
		if err == nil {
			err = io.EOF
		} else if stderr.Len() > 0 {
			err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(stderr.Bytes()))
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	return &execStream{r: outR, w: inW, cancel: cancel}, nil
}

// execStream is an exec stream as an io.ReadWriteCloser. Close may be called more
// than once and never fails.
type execStream struct {
	r      *io.PipeReader
	w      *io.PipeWriter
	cancel context.CancelFunc
	once   sync.Once
}

func (s *execStream) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *execStream) Write(p []byte) (int, error) { return s.w.Write(p) }
func (s *execStream) Close() error {
	s.once.Do(func() {
		s.w.Close()
		s.r.Close()
		s.cancel()
	})
	return nil
}

// Exec runs argv in the workspace container of pod id through the API server, as the
// pod's user, and returns its output (at most 1 MiB) and exit code.
func (d *Driver) Exec(ctx context.Context, id string, argv []string) ([]byte, int, error) {
	p, err := d.get(id)
	if err != nil {
		return nil, -1, err
	}
	ex, err := d.executor(p, argv, false)
	if err != nil {
		return nil, -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	var out bytes.Buffer
	w := &capped{b: &out, n: 1 << 20}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: w, Stderr: w})
	var ce utilexec.CodeExitError
	switch {
	case err == nil:
		return out.Bytes(), 0, nil
	case errors.As(err, &ce):
		return out.Bytes(), ce.Code, nil
	}
	return out.Bytes(), -1, fmt.Errorf("exec in %s: %w", id, err)
}

// capped writes at most n bytes to b and drops the rest.
type capped struct {
	b *bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.b.Len(); room > 0 {
		c.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
