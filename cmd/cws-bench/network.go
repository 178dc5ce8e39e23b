package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/auth"
	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/workspace"
	"github.com/cwsdev/cws/workspace/memstore"
	"github.com/cwsdev/cws/workspace/policy"
	"github.com/cwsdev/cws/workspace/toolset"
)

func init() {
	sections = append(sections, section{
		Name:  "network",
		Order: 96,
		Doc:   "egress through the proxy vs the host directly (100 MB, connect), preview over a link vs inside the sandbox (GET, WebSocket echo), 200 concurrent preview streams over 20 sessions",
		Run:   benchNetwork,
	})
	goals = append(goals,
		goal{Order: 80, Figure: "egress: a 100 MB download through the proxy, vs the host directly (≥ 0.7× the throughput)", Row: "egress: 100 MB through the proxy", Anchor: "100 MB from the host directly", Slower: 1.43},
		goal{Order: 80, Figure: "egress: the same download through the proxy, vs a bare relay on the host (the cost of any proxy's extra TCP hop; ≤ 1.25× its time)", Row: "egress: 100 MB through the proxy", Anchor: rowBareRelay, Slower: 1.25},
		goal{Order: 81, Figure: "egress: added latency per connection (CONNECT), p50", Row: "egress: connect through the proxy", Anchor: "connect from the host directly", MaxOver: 2 * time.Millisecond},
		goal{Order: 82, Figure: "preview: small GET over a link, p50, vs the same GET inside the sandbox", Row: "preview: GET over a link", Anchor: "GET inside the sandbox", MaxOver: 1500 * time.Microsecond},
		goal{Order: 83, Figure: "preview: WebSocket echo over a link, p50, vs inside the sandbox", Row: "preview: WebSocket echo over a link", Anchor: "WebSocket echo inside the sandbox", MaxOver: time.Millisecond},
	)
}

// rowBareRelay is the egress download's second anchor: the same python on the host,
// through the least a proxy can be (bareRelay).
const rowBareRelay = "100 MB through a bare relay on the host"

// bareRelay is the least an HTTP proxy can be, for the egress anchor: on one
// connection it reads a request, sends it to origin on a new connection, and splices
// the answer back (net.TCPConn.ReadFrom), with no policy, counting or keep-alive. What
// a download through it loses against the host's own is the extra TCP hop every
// proxy adds, which is what cws's egress can at best reach.
func bareRelay(origin string) (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				up, err := net.Dial("tcp", origin)
				if err != nil {
					return
				}
				defer up.Close()
				req.RequestURI, req.Close = "", true
				if req.Write(up) == nil {
					_, _ = c.(*net.TCPConn).ReadFrom(up)
				}
			}()
		}
	}()
	return l.Addr().String(), func() { l.Close() }, nil
}

// netBenchPolicy lets the workspace reach bench.test (pinned to the host's loopback)
// and preview port 8000.
const netBenchPolicy = `{"network": {"allow": ["bench.test"]}, "previewPorts": [8000]}`

// benchPy measures inside the workspace (or on the host: the anchors) and prints one
// JSON list of seconds per sample. Modes: download URL, connect HOST PORT N (through
// the proxy when PROXY is set), get PORT N (keep-alive GETs of /), ws PORT N (echoes
// over one WebSocket).
const benchPy = `
import base64, http.client, json, os, socket, sys, time, urllib.request
mode = sys.argv[1]
out = []
if mode == "download":
    t = time.perf_counter(); n = 0
    with urllib.request.urlopen(sys.argv[2], timeout=120) as r:
        while True:
            b = r.read(1 << 20)
            if not b: break
            n += len(b)
    out.append(time.perf_counter() - t)
    assert n == int(sys.argv[3]), n
elif mode == "connect":
    host, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    proxy = os.environ.get("HTTP_PROXY")
    for _ in range(n):
        t = time.perf_counter()
        if proxy:
            s = socket.create_connection(("127.0.0.1", 3128))
            s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port)).encode())
            assert s.recv(4096).startswith(b"HTTP/1.1 200")
        else:
            s = socket.create_connection((host, port))
        out.append(time.perf_counter() - t)
        s.close()
elif mode == "get":
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[2])); c.connect(); c.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(int(sys.argv[3])):
        t = time.perf_counter(); c.request("GET", "/"); r = c.getresponse(); r.read(); out.append(time.perf_counter() - t)
elif mode == "ws":
    s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: " + base64.b64encode(os.urandom(16)) + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf: buf += s.recv(4096)
    msg = b"ping"
    frame = bytes([0x81, 0x80 | len(msg)]) + b"\0\0\0\0" + msg
    for _ in range(int(sys.argv[3])):
        t = time.perf_counter(); s.sendall(frame)
        got = b""
        while len(got) < 2 + len(b"echo: ping"): got += s.recv(4096)
        out.append(time.perf_counter() - t)
print(json.dumps(out))
`

func benchNetwork(ctx context.Context, e *env) ([]bench.Row, error) {
	var rows []bench.Row
	// What the workspace downloads: 100 MB from a server on the host's loopback.
	const size = 100 << 20
	blob := make([]byte, 1<<20)
	_, _ = rand.Read(blob)
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		for i := 0; i < size/len(blob); i++ {
			if _, err := w.Write(blob); err != nil {
				return
			}
		}
	})}
	ol, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = origin.Serve(ol) }()
	defer origin.Close()
	originPort := ol.Addr().(*net.TCPAddr).Port

	pol, err := policy.Parse([]byte(netBenchPolicy))
	if err != nil {
		return nil, err
	}
	tenants, _ := auth.NewDevTenants()
	proxy := &egress.Proxy{Guard: egress.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil),
		Hosts: map[string][]netip.Addr{"bench.test": {netip.MustParseAddr("127.0.0.1")}}}
	svc := workspace.New(workspace.Config{Tools: toolset.All(), Diff: toolset.Diff, Store: memstore.New(), Sandboxes: e.driver,
		Tenants: policy.ByTenant{auth.DevTenantID: pol}, DefaultImage: e.image, LocalReads: e.localReads, Egress: proxy,
		Log: slog.New(slog.NewTextHandler(e.progress, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	defer svc.Close()
	hs := httptest.NewUnstartedServer(nil)
	srv := api.New(api.Config{Service: svc, Verifier: auth.NewVerifier(tenants, auth.VerifierOptions{}), PublicURL: "http://" + hs.Listener.Addr().String()})
	hs.Config.Handler = srv
	hs.Start()
	defer hs.Close()

	caller := workspace.Caller{Tenant: auth.DevTenantID, Subject: "bench-net", Scopes: auth.AllScopes()}
	var made []string
	defer func() {
		e.logf("removing %d sessions…", len(made))
		for _, id := range made {
			_ = svc.DeleteSession(context.WithoutCancel(ctx), caller, id)
		}
	}()
	call := func(id, tool string, args any) (map[string]any, error) {
		b, _ := json.Marshal(args)
		res, err := svc.Call(ctx, caller, id, tool, b, workspace.CallOptions{})
		if err != nil {
			return nil, err
		}
		var v map[string]any
		raw, _ := json.Marshal(res.Value)
		_ = json.Unmarshal(raw, &v)
		if res.IsError {
			return v, fmt.Errorf("%s: %.300s", tool, raw)
		}
		return v, nil
	}
	var hostEnv func(env []string, args ...string) ([]time.Duration, error)
	py := func(id string, args ...string) ([]time.Duration, error) {
		v, err := call(id, "runCommand", map[string]any{"command": "python3", "args": append([]string{"-c", benchPy}, args...),
			"options": map[string]any{"timeout": 300}})
		if err != nil {
			return nil, err
		}
		if fmt.Sprint(v["exitCode"]) != "0" {
			return nil, fmt.Errorf("python3 %s: %v", args[0], v["stderr"])
		}
		return seconds(fmt.Sprint(v["stdout"]))
	}
	host := func(args ...string) ([]time.Duration, error) {
		return hostEnv(nil, args...)
	}
	hostEnv = func(env []string, args ...string) ([]time.Duration, error) {
		cmd := exec.CommandContext(ctx, "python3", append([]string{"-c", benchPy}, args...)...)
		if env != nil {
			cmd.Env = append(os.Environ(), env...)
		}
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("python3 on the host (%s): %w", args[0], err)
		}
		return seconds(string(out))
	}
	newSession := func() (string, error) {
		s, err := svc.CreateSession(ctx, caller, workspace.CreateRequest{})
		if err != nil {
			return "", err
		}
		made = append(made, s.ID)
		return s.ID, nil
	}

	id, err := newSession()
	if err != nil {
		return rows, err
	}
	// Egress: a 100 MB download and connects, each beside the host doing it directly.
	relay, stopRelay, err := bareRelay(ol.Addr().String())
	if err != nil {
		return rows, err
	}
	defer stopRelay()
	var down, downHost, downRelay []time.Duration
	for i := range e.iterations(3) {
		e.logf("egress: 100 MB download %d…", i+1)
		d, err := py(id, "download", fmt.Sprintf("http://bench.test:%d/", originPort), strconv.Itoa(size))
		if err != nil {
			return rows, err
		}
		down = append(down, d...)
		if d, err = host("download", fmt.Sprintf("http://127.0.0.1:%d/", originPort), strconv.Itoa(size)); err != nil {
			return rows, err
		}
		downHost = append(downHost, d...)
		if d, err = hostEnv([]string{"http_proxy=http://" + relay, "HTTP_PROXY=http://" + relay, "no_proxy=", "NO_PROXY="},
			"download", fmt.Sprintf("http://bench.test:%d/", originPort), strconv.Itoa(size)); err != nil {
			return rows, err
		}
		downRelay = append(downRelay, d...)
	}
	rows = append(rows, withRate(note(bench.Summarize("egress: 100 MB through the proxy", down), "python urllib in the workspace, through the agent's proxy and cws (on the socket path the agent hands cws the connection itself)"), size, down),
		withRate(note(bench.Summarize("100 MB from the host directly", downHost), "the same python, on the host"), size, downHost),
		withRate(note(bench.Summarize(rowBareRelay, downRelay), "the same python on the host, through a relay that splices the answer and does nothing else: the floor of a proxy's extra TCP hop"), size, downRelay))
	n := strconv.Itoa(e.iterations(200))
	e.logf("egress: connects…")
	conn, err := py(id, "connect", "bench.test", strconv.Itoa(originPort), n)
	if err != nil {
		return rows, err
	}
	connHost, err := host("connect", "127.0.0.1", strconv.Itoa(originPort), n)
	if err != nil {
		return rows, err
	}
	rows = append(rows, note(bench.Summarize("egress: connect through the proxy", conn), "CONNECT to a local server until its 200, from the workspace"),
		note(bench.Summarize("connect from the host directly", connHost), "TCP connect to the same server"))

	// Preview: the app on 8000, over a link and from inside.
	if _, err := call(id, "writeFile", map[string]any{"path": "app.py", "contents": previewBenchApp}); err != nil {
		return rows, err
	}
	if _, err := call(id, "startProcess", map[string]any{"command": "python3", "args": []string{"app.py", "8000"}}); err != nil {
		return rows, err
	}
	link, err := svc.CreateLink(ctx, caller, id, 8000, time.Hour)
	if err != nil {
		return rows, err
	}
	linkURL := hs.URL + "/p/" + link.Token + "/"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	if err := waitGet(ctx, client, linkURL); err != nil {
		return rows, err
	}
	var get []time.Duration
	for range e.iterations(300) {
		t0 := time.Now()
		resp, err := client.Get(linkURL)
		if err != nil {
			return rows, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		get = append(get, time.Since(t0))
	}
	inside, err := py(id, "get", "8000", strconv.Itoa(e.iterations(300)))
	if err != nil {
		return rows, err
	}
	rows = append(rows, note(bench.Summarize("preview: GET over a link", get), "a keep-alive Go client on the host, through cws and the agent"),
		note(bench.Summarize("GET inside the sandbox", inside), "python http.client, keep-alive, to 127.0.0.1:8000"))
	ws, err := wsSamples(hs.Listener.Addr().String(), "/p/"+link.Token+"/ws", e.iterations(300))
	if err != nil {
		return rows, err
	}
	wsInside, err := py(id, "ws", "8000", strconv.Itoa(e.iterations(300)))
	if err != nil {
		return rows, err
	}
	rows = append(rows, note(bench.Summarize("preview: WebSocket echo over a link", ws), "one 4-byte text frame and its echo"),
		note(bench.Summarize("WebSocket echo inside the sandbox", wsInside), "the same, from python in the sandbox"))

	// 200 concurrent preview streams across 20 sessions.
	e.logf("20 sessions for the concurrent streams…")
	links := []string{linkURL}
	for len(links) < 20 {
		sid, err := newSession()
		if err != nil {
			return rows, err
		}
		if _, err := call(sid, "writeFile", map[string]any{"path": "app.py", "contents": previewBenchApp}); err != nil {
			return rows, err
		}
		if _, err := call(sid, "startProcess", map[string]any{"command": "python3", "args": []string{"app.py", "8000"}}); err != nil {
			return rows, err
		}
		l, err := svc.CreateLink(ctx, caller, sid, 8000, time.Hour)
		if err != nil {
			return rows, err
		}
		u := hs.URL + "/p/" + l.Token + "/"
		if err := waitGet(ctx, client, u); err != nil {
			return rows, err
		}
		links = append(links, u)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var mu sync.Mutex
	var streams []time.Duration
	start := time.Now()
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			resp, err := client.Get(links[i%len(links)] + "stream")
			if err != nil {
				failed.Add(1)
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || len(b) != streamBytes {
				failed.Add(1)
				return
			}
			mu.Lock()
			streams = append(streams, time.Since(t0))
			mu.Unlock()
		}()
	}
	wg.Wait()
	r := bench.Summarize("preview: 200 concurrent streams, 20 sessions", streams)
	r.Note = fmt.Sprintf("each 1 MiB streamed in 64 KiB chunks; %d of 200 failed; all done in %s", failed.Load(), time.Since(start).Round(time.Millisecond))
	rows = append(rows, r)
	if failed.Load() > 0 {
		return rows, fmt.Errorf("%d of 200 concurrent preview streams failed", failed.Load())
	}
	return rows, nil
}

// streamBytes is what /stream of previewBenchApp sends.
const streamBytes = 1 << 20

// previewBenchApp answers / with a small page, /stream with 1 MiB in chunks, and /ws
// with a WebSocket that echoes "echo: " + each text frame.
const previewBenchApp = `
import base64, hashlib, http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        if self.path == "/ws":
            key = self.headers["Sec-WebSocket-Key"]
            acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.send_response(101); self.send_header("Upgrade", "websocket"); self.send_header("Connection", "Upgrade"); self.send_header("Sec-WebSocket-Accept", acc); self.end_headers(); self.wfile.flush()
            r = self.rfile
            while True:
                h = r.read(2)
                if len(h) < 2: return
                n = h[1] & 127; mask = r.read(4) if h[1] & 128 else b"\0\0\0\0"
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
                if h[0] & 15 == 8: return
                out = b"echo: " + data
                self.wfile.write(bytes([0x81, len(out)]) + out); self.wfile.flush()
        if self.path == "/stream":
            self.send_response(200); self.send_header("Content-Length", str(1 << 20)); self.end_headers()
            chunk = b"x" * 65536
            for _ in range(16): self.wfile.write(chunk)
            return
        body = b"<h1>hello</h1>"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// waitGet waits until url answers 200 (the app starting).
func waitGet(ctx context.Context, c *http.Client, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not answer: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wsSamples times n echoes over one WebSocket at path on addr.
func wsSamples(addr, path string, n int) ([]time.Duration, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var k [16]byte
	_, _ = rand.Read(k[:])
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
		path, addr, base64.StdEncoding.EncodeToString(k[:]))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, fmt.Errorf("websocket handshake: %v %v", resp, err)
	}
	frame := []byte{0x81, 0x84, 0, 0, 0, 0, 'p', 'i', 'n', 'g'}
	want := 2 + len("echo: ping")
	buf := make([]byte, want)
	var out []time.Duration
	for range n {
		t0 := time.Now()
		if _, err := conn.Write(frame); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// seconds parses benchPy's JSON list of seconds.
func seconds(s string) ([]time.Duration, error) {
	var f []float64
	if err := json.Unmarshal([]byte(strings.TrimSpace(s)), &f); err != nil {
		return nil, fmt.Errorf("bench output %q: %w", s, err)
	}
	out := make([]time.Duration, len(f))
	for i, v := range f {
		out[i] = time.Duration(v * float64(time.Second))
	}
	return out, nil
}

// withRate sets a row's Rate to MB/s of size bytes over its samples' p50.
func withRate(r bench.Row, size int64, _ []time.Duration) bench.Row {
	if r.P50 > 0 {
		r.Rate = float64(size) / (1 << 20) / r.P50.Seconds()
		r.Note += fmt.Sprintf("; %.0f MB/s", r.Rate)
	}
	return r
}
