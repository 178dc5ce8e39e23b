package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/sandbox"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/terminal"
	"github.com/cwsdev/cws/workspace/toolset"
)

func init() {
	sections = append(sections, section{
		Name:  "terminal",
		Order: 97,
		Doc:   "interactive terminals: keystroke to echo through cws's WebSocket vs docker exec -it, 100 MB of output through one terminal (and cws's memory), first screen (terminalOpen, then terminalScreen showing the prompt)",
		Run:   benchTerminal,
	})
	goals = append(goals,
		goal{Order: 90, Figure: "terminal: keystroke to echo through cws's WebSocket, p50 (≤ 2 ms, within 1.5× of docker exec -it)", Row: "terminal: keystroke to echo (WebSocket)", Anchor: "keystroke to echo (docker exec -it)", MaxP50: 2 * time.Millisecond, Slower: 1.5},
		goal{Order: 91, Figure: "terminal: first screen, terminalOpen then terminalScreen showing the prompt, p50", Row: "terminal: first screen", MaxP50: 50 * time.Millisecond},
	)
}

// terminalBenchKeys is how many keystrokes the echo rows time.
const terminalBenchKeys = 200

func benchTerminal(ctx context.Context, e *env) ([]bench.Row, error) {
	var rows []bench.Row
	tenants, _ := auth.NewDevTenants()
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: e.driver,
		Tenants: policy.ByTenant{auth.DevTenantID: policy.Default()}, DefaultImage: e.image, LocalReads: e.localReads,
		Log: slog.New(slog.NewTextHandler(e.progress, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	defer svc.Close()
	hs := httptest.NewUnstartedServer(nil)
	hs.Config.Handler = api.New(api.Config{Service: svc, Verifier: auth.NewVerifier(tenants, auth.VerifierOptions{}), PublicURL: "http://" + hs.Listener.Addr().String()})
	hs.Start()
	defer hs.Close()
	tok, err := tenants.Get(auth.DevTenantID).Mint("bench-term", time.Hour, "", auth.AllScopes(), time.Now())
	if err != nil {
		return nil, err
	}
	caller := workspace.Caller{Tenant: auth.DevTenantID, Subject: "bench-term", Scopes: auth.AllScopes()}
	s, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = svc.DeleteSession(context.WithoutCancel(ctx), caller, s.ID) }()
	open := func(o terminal.Open) (string, error) {
		in, err := svc.OpenTerminal(ctx, caller, s.ID, o)
		if err != nil {
			return "", err
		}
		return in.ID, nil
	}
	attach := func(tid string) (*websocket.Conn, error) {
		u := "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/sessions/" + s.ID + "/terminals/" + tid + "/attach"
		c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + tok}}})
		if c != nil {
			c.SetReadLimit(8 << 20)
		}
		return c, err
	}

	// Keystroke to echo: one byte typed at bash's prompt, timed until its echo comes.
	wide := 1000
	tid, err := open(terminal.Open{Command: "bash", Cols: &wide})
	if err != nil {
		return rows, err
	}
	conn, err := attach(tid)
	if err != nil {
		return rows, err
	}
	readUntil := func(want []byte) error {
		var got []byte
		for !bytes.Contains(got, want) {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				return err
			}
			if typ == websocket.MessageBinary {
				got = append(got, data...)
			}
		}
		return nil
	}
	if err := conn.Write(ctx, websocket.MessageBinary, []byte("PS1='R> '\r")); err != nil {
		return rows, err
	}
	if err := readUntil([]byte("R> ")); err != nil {
		return rows, err
	}
	echo, err := keystrokes(e.iterations(terminalBenchKeys), func(b byte) error {
		if err := conn.Write(ctx, websocket.MessageBinary, []byte{b}); err != nil {
			return err
		}
		return readUntil([]byte{b})
	})
	conn.CloseNow()
	if err != nil {
		return rows, fmt.Errorf("echo through the WebSocket: %w", err)
	}
	rows = append(rows, note(bench.Summarize("terminal: keystroke to echo (WebSocket)", echo), "one letter at bash's prompt, from the WebSocket's write to its echo"))

	// The anchor: the same through docker exec -it, on a PTY of the host's.
	if cid, err := sessionContainer(ctx, s.ID); err == nil {
		if d, err := dockerExecEcho(ctx, cid, e.iterations(terminalBenchKeys)); err == nil {
			rows = append(rows, note(bench.Summarize("keystroke to echo (docker exec -it)", d), "the same letter through docker exec -it bash on a host PTY"))
		} else {
			e.logf("terminal: docker exec -it anchor: %v", err)
		}
	}

	// 100 MB of output through one terminal to one WebSocket reading as fast as it can,
	// and what cws's heap grew by.
	const size = 100 << 20
	var throughput []time.Duration
	var grew int64
	for i := range e.iterations(3) {
		e.logf("terminal: 100 MB of output %d…", i+1)
		tid, err := open(terminal.Open{Command: "sh", Args: []string{"-c", fmt.Sprintf("sleep 0.3; head -c %d /dev/zero | tr '\\0' x", size)}})
		if err != nil {
			return rows, err
		}
		conn, err := attach(tid)
		if err != nil {
			return rows, err
		}
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		var start time.Time
		var n int64
		peak := before.HeapInuse
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				return rows, fmt.Errorf("100 MB: after %d bytes: %w", n, err)
			}
			if typ == websocket.MessageBinary {
				if start.IsZero() {
					start = time.Now()
				}
				n += int64(len(data))
				if n%(16<<20) < int64(len(data)) {
					var m runtime.MemStats
					runtime.ReadMemStats(&m)
					peak = max(peak, m.HeapInuse)
				}
				continue
			}
			var ctl map[string]any
			_ = json.Unmarshal(data, &ctl)
			if ctl["type"] == "exit" {
				break
			}
		}
		throughput = append(throughput, time.Since(start))
		grew = max(grew, int64(peak)-int64(before.HeapInuse))
		conn.CloseNow()
		if n < size {
			e.logf("terminal: %d of %d bytes reached the viewer (it skipped the rest)", n, size)
		}
	}
	r := bench.Summarize("terminal: 100 MB of output through the WebSocket", throughput)
	if r.P50 > 0 {
		r.Rate = float64(size) / r.P50.Seconds() / 1e6
	}
	r.Bytes = grew
	rows = append(rows, note(r, fmt.Sprintf("%.0f MB/s; cws's heap grew at most %d MiB (in-process cws)", r.Rate, grew>>20)))
	// The anchor: the same output through a PTY of the host's alone (script), read by
	// nothing but script itself.
	var plain []time.Duration
	for range e.iterations(3) {
		t0 := time.Now()
		cmd := exec.CommandContext(ctx, "script", "-qc", fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", size), "/dev/null")
		if err := cmd.Run(); err != nil {
			e.logf("terminal: the host PTY anchor (script): %v", err)
			break
		}
		plain = append(plain, time.Since(t0))
	}
	if len(plain) > 0 {
		a := bench.Summarize("100 MB through a host PTY (script)", plain)
		a.Rate = float64(size) / a.P50.Seconds() / 1e6
		rows = append(rows, note(a, fmt.Sprintf("%.0f MB/s: what the kernel's PTY moves here, with no cws", a.Rate)))
	}

	// First screen: terminalOpen, then terminalScreen waiting for the prompt.
	var first []time.Duration
	for range e.iterations(20) {
		t0 := time.Now()
		tid, err := open(terminal.Open{Command: "bash"})
		if err != nil {
			return rows, err
		}
		b, _ := json.Marshal(map[string]any{"id": tid, "waitFor": `\$ ?$`, "timeoutMs": 10000})
		res, err := svc.Call(ctx, caller, s.ID, "terminalScreen", b, workspace.CallOptions{})
		if err != nil {
			return rows, err
		}
		first = append(first, time.Since(t0))
		if sc, ok := res.Value.(*terminal.Screen); !ok || !sc.Matched {
			return rows, fmt.Errorf("first screen: no prompt: %+v", res.Value)
		}
		_, _ = svc.CloseTerminal(ctx, caller, s.ID, tid)
	}
	rows = append(rows, note(bench.Summarize("terminal: first screen", first), "POST a bash terminal, then terminalScreen until the prompt shows"))

	// Density: 200 bash terminals across 50 sessions, all running at the end, and what
	// cws's heap grew by.
	sessions, per := max(1, int(50*e.scale)), 4
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var opens []time.Duration
	var ids []string
	defer func() {
		for _, sid := range ids {
			_ = svc.DeleteSession(context.WithoutCancel(ctx), caller, sid)
		}
	}()
	for i := range sessions {
		e.logf("terminal: density, session %d of %d…", i+1, sessions)
		ds, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
		if err != nil {
			return rows, err
		}
		ids = append(ids, ds.ID)
		for range per {
			t0 := time.Now()
			if _, err := svc.OpenTerminal(ctx, caller, ds.ID, terminal.Open{Command: "bash"}); err != nil {
				return rows, fmt.Errorf("density: %w", err)
			}
			opens = append(opens, time.Since(t0))
		}
	}
	runningAll := 0
	for _, sid := range ids {
		ts, err := svc.ListTerminals(ctx, caller, sid)
		if err != nil {
			return rows, err
		}
		for _, t := range ts {
			if t.Running {
				runningAll++
			}
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	d := note(bench.Summarize("terminal: open, with 200 across 50 sessions", opens),
		fmt.Sprintf("%d of %d running at the end; cws's heap %+d MiB after a GC (in-process cws)", runningAll, sessions*per, (int64(after.HeapInuse)-int64(before.HeapInuse))>>20))
	d.Bytes = int64(after.HeapInuse) - int64(before.HeapInuse)
	rows = append(rows, d)
	return rows, nil
}

// keystrokes times type(b) for n letters.
func keystrokes(n int, typ func(b byte) error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := range n {
		b := byte('a' + i%26)
		t := time.Now()
		if err := typ(b); err != nil {
			return out, err
		}
		out = append(out, time.Since(t))
	}
	return out, nil
}

// sessionContainer is the Docker container of session id.
func sessionContainer(ctx context.Context, id string) (string, error) {
	out, err := exec.CommandContext(ctx, "docker", "ps", "-q", "--filter", "label="+sandbox.LabelSession+"="+id).Output()
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		return "", fmt.Errorf("no container for %s: %v", id, err)
	}
	return strings.Fields(string(out))[0], nil
}

// dockerExecEcho times keystroke echoes through docker exec -it bash on a host PTY.
func dockerExecEcho(ctx context.Context, cid string, n int) ([]time.Duration, error) {
	cmd := exec.CommandContext(ctx, "docker", "exec", "-it", "-e", "PS1=R> ", cid, "bash", "--norc")
	cmd.Env = append(os.Environ(), "TERM=xterm")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 1000, Rows: 24})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); f.Close() }()
	buf := make([]byte, 4096)
	readUntil := func(want []byte) error {
		var got []byte
		deadline := time.Now().Add(30 * time.Second)
		_ = f.SetReadDeadline(deadline)
		for !bytes.Contains(got, want) {
			m, err := f.Read(buf)
			if err != nil {
				return err
			}
			got = append(got, buf[:m]...)
		}
		return nil
	}
	if err := readUntil([]byte("R> ")); err != nil {
		return nil, fmt.Errorf("no prompt: %w", err)
	}
	return keystrokes(n, func(b byte) error {
		if _, err := f.Write([]byte{b}); err != nil {
			return err
		}
		return readUntil([]byte{b})
	})
}
