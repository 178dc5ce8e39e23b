package e2e_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cwsdev/cws/internal/testenv"
	"github.com/cwsdev/cws/sandbox/agent/tartest"
)

// netPolicy is the open tenant's policy in the network tests: an allow list by name,
// with a wildcard and a deny, and preview ports.
const netPolicy = `{
  "allowedPaths": ["**"],
  "maxSessions": 10,
  "network": {"allow": ["allowed.test", "*.wild.test", "private.test", "git.test", "127.0.0.1"], "deny": ["bad.wild.test"]},
  "egress": {"maxConnections": 8},
  "previewPorts": [8000, "9000-9010"]
}`

// netFixture is the e2e fixture with the open tenant's policy replaced by pol.
func netFixture(t *testing.T, pol string) *fixture {
	t.Helper()
	fx := newFixture(t)
	if err := os.WriteFile(filepath.Join(filepath.Dir(fx.path), "open.cws-policy.json"), []byte(pol), 0o600); err != nil {
		t.Fatal(err)
	}
	return fx
}

// egressProbe fetches each URL given on its command line with urllib (which follows
// HTTP_PROXY and HTTPS_PROXY, as most clients do) and prints one JSON line each:
// {"url", "status", "body"}; certificates are not checked (the test servers' are
// self-signed).
const egressProbe = `
import json, ssl, sys, urllib.request, urllib.error
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
for u in sys.argv[1:]:
    try:
        r = urllib.request.urlopen(u, timeout=10, context=ctx)
        print(json.dumps({"url": u, "status": r.status, "body": r.read().decode()}))
    except urllib.error.HTTPError as e:
        print(json.dumps({"url": u, "status": e.code, "body": e.read().decode()}))
    except Exception as e:
        print(json.dumps({"url": u, "status": 0, "body": repr(e)}))
`

type probeResult struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
	Body   string `json:"body"`
}

func egressFetch(t *testing.T, c *mcpClient, urls ...string) map[string]probeResult {
	t.Helper()
	r := c.call(t, "runCommand", map[string]any{"command": "python3", "args": append([]string{"-c", egressProbe}, urls...),
		"options": map[string]any{"timeout": 120}})
	out := map[string]probeResult{}
	for _, line := range strings.Split(strings.TrimSpace(fmt.Sprint(r["stdout"])), "\n") {
		var p probeResult
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("probe output %q (stderr %v): %v", line, r["stderr"], err)
		}
		out[p.URL] = p
	}
	return out
}

// listenLocal serves h on 127.0.0.1 (plain or TLS) and returns its port.
func listenLocal(t *testing.T, h http.Handler, tls bool) (*httptest.Server, int) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, srv.Listener.Addr().(*net.TCPAddr).Port
}

// TestEgressE2E: a workspace with an allow list reaches allowed names over HTTP and
// HTTPS (CONNECT) through the proxy, wildcards included, and nothing else: an unlisted
// name, a denied one, and an allowed name that resolves to a private address each get
// a 403 naming the rule; --egress-allow-private opens a range; a Host header that
// differs from the target is refused; a client that ignores the proxy has no route;
// git clones over HTTPS through it; the decisions are counted by tenant.
func TestEgressE2E(t *testing.T) {
	requireRealDeps(t)
	fx := netFixture(t, netPolicy)
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Host, r.URL.Path)
	})
	_, httpPort := listenLocal(t, hello, false)
	_, tlsPort := listenLocal(t, hello, true)
	gitPort := gitServer(t)
	var resolve []string
	for _, n := range []string{"allowed.test", "a.wild.test", "x.y.wild.test", "bad.wild.test", "other.test", "git.test"} {
		resolve = append(resolve, "--egress-resolve", n+"=127.0.0.1")
	}
	resolve = append(resolve, "--egress-resolve", "private.test=127.0.0.2", "--egress-allow-private", "127.0.0.1")
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), resolve...)
	t.Cleanup(func() { p.deleteAll(t, fx, tenantOpen) })
	tok := fx.token(t, tenantOpen, "net", "")
	r := p.post(t, tok, "/v1/sessions", map[string]any{})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")

	env := c.call(t, "runCommand", map[string]any{"command": "sh", "args": []string{"-c", "echo $HTTPS_PROXY $http_proxy $NO_PROXY"}})
	if got := strings.TrimSpace(fmt.Sprint(env["stdout"])); got != "http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1" {
		t.Errorf("a command's proxy environment = %q", got)
	}

	u := func(scheme, host string, port int, path string) string {
		return fmt.Sprintf("%s://%s:%d%s", scheme, host, port, path)
	}
	cases := []struct {
		url    string
		status int
		body   string
	}{
		{u("http", "allowed.test", httpPort, "/plain"), 200, fmt.Sprintf("hello allowed.test:%d /plain", httpPort)},
		{u("https", "allowed.test", tlsPort, "/tls"), 200, fmt.Sprintf("hello allowed.test:%d /tls", tlsPort)},
		{u("http", "a.wild.test", httpPort, "/"), 200, "hello a.wild.test"},
		{u("https", "x.y.wild.test", tlsPort, "/deep"), 200, "hello x.y.wild.test"},
		{u("http", "other.test", httpPort, "/"), 403, "egress: other.test is not in the allow list"},
		{u("https", "other.test", tlsPort, "/"), 0, "403"},
		{u("http", "bad.wild.test", httpPort, "/"), 403, "bad.wild.test"},
		{u("http", "wild.test", httpPort, "/"), 403, "not in the allow list"},
		{u("http", "private.test", httpPort, "/"), 403, "127.0.0.2 is a loopback address"},
	}
	var urls []string
	for _, tc := range cases {
		urls = append(urls, tc.url)
	}
	got := egressFetch(t, c, urls...)
	for _, tc := range cases {
		g := got[tc.url]
		if g.Status != tc.status || !strings.Contains(g.Body, tc.body) {
			t.Errorf("%s through the proxy: %d %q, want %d with %q", tc.url, g.Status, g.Body, tc.status, tc.body)
		}
	}

	// The proxy is the only way out: a client that ignores it has no route (on Docker no
	// network device; on Kubernetes the default-deny egress NetworkPolicy, which the
	// local cluster enforces) to a server on the host that answers anyone, and the proxy
	// judges the Host header against the request's target.
	outside := listenAny(t)
	raw := c.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"-c", fmt.Sprintf(`
import socket
def send(data):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10); s.sendall(data)
    out = b""
    while True:
        b = s.recv(65536)
        if not b: break
        out += b
    return out.decode(errors="replace")
print(send(b"GET http://allowed.test:%[1]d/ HTTP/1.1\r\nHost: other.test\r\n\r\n").split("\r\n")[0])
print(send(b"CONNECT allowed.test:%[1]d HTTP/1.1\r\nHost: other.test:%[1]d\r\n\r\n").split("\r\n")[0])
import struct
gw = "1.1.1.1"
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000":
        gw = socket.inet_ntoa(struct.pack("<L", int(f[2], 16)))
try:
    socket.create_connection((gw, %[2]d), timeout=5); print("direct: connected to", gw)
except OSError as e:
    print("direct:", gw, e)
`, httpPort, outside)}})
	lines := strings.Split(strings.TrimSpace(fmt.Sprint(raw["stdout"])), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], " 403 ") || !strings.Contains(lines[1], " 403 ") {
		t.Errorf("Host header mismatch through the proxy: %q (stderr %v)", lines, raw["stderr"])
	}
	if len(lines) < 3 || strings.HasPrefix(lines[2], "direct: connected") {
		t.Errorf("a client that ignores the proxy: %q, want no route", lines)
	}

	// git over HTTPS, through the proxy, from a local git server.
	clone := c.call(t, "runCommand", map[string]any{"command": "git", "args": []string{"-c", "http.sslVerify=false", "clone",
		fmt.Sprintf("https://git.test:%d/repo.git", gitPort), "cloned"}, "options": map[string]any{"timeout": 120}})
	if fmt.Sprint(clone["exitCode"]) != "0" {
		t.Errorf("git clone through the proxy: %v", clone)
	} else if r := c.call(t, "readFile", map[string]any{"path": "cloned/README.md"}); r["content"] != "cloned through cws\n" {
		t.Errorf("the clone's README.md = %v", r)
	}

	// The workspace's .cws-policy.json narrows the tenant's list (uploaded by the
	// platform: tools may not write it): a.wild.test goes, allowed.test stays.
	up := do(t, nil, p.url, http.MethodPut, "/v1/sessions/"+id+"/archive", tok,
		tartest.Build(tartest.File(".cws-policy.json", `{"network": {"allow": ["allowed.test"]}}`)), map[string]string{"Content-Type": "application/x-tar"})
	if up.status != http.StatusOK {
		t.Fatalf("upload the workspace policy: %d %s", up.status, up.body)
	}
	time.Sleep(1500 * time.Millisecond) // the policy cache's second
	narrowed, kept := u("http", "a.wild.test", httpPort, "/narrowed"), u("http", "allowed.test", httpPort, "/kept")
	got = egressFetch(t, c, narrowed, kept)
	if g := got[narrowed]; g.Status != 403 || !strings.Contains(g.Body, "a.wild.test") {
		t.Errorf("a name the workspace file took away: %d %q", g.Status, g.Body)
	}
	if g := got[kept]; g.Status != 200 {
		t.Errorf("a name both lists allow: %d %q", g.Status, g.Body)
	}

	// 300 parallel CONNECTs from one session: its cap (egress.maxConnections 8) holds,
	// and another session of the tenant gets through meanwhile.
	c.call(t, "writeFile", map[string]any{"path": "flood.py", "contents": fmt.Sprintf(`
import json, socket, time
socks, codes = [], {}
for i in range(300):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
    s.sendall(b"CONNECT allowed.test:%[1]d HTTP/1.1\r\nHost: allowed.test:%[1]d\r\n\r\n")
    socks.append(s)
for s in socks:
    try:
        line = s.recv(200).split(b"\r\n")[0].decode()
        code = line.split(" ")[1]
    except Exception as e:
        code = type(e).__name__
    codes[code] = codes.get(code, 0) + 1
open("codes.json", "w").write(json.dumps(codes))
time.sleep(15)
`, httpPort)})
	c.call(t, "startProcess", map[string]any{"command": "python3", "args": []string{"flood.py"}})
	var codes map[string]int
	for deadline := time.Now().Add(90 * time.Second); codes == nil; time.Sleep(200 * time.Millisecond) {
		if r, err := c.callRaw("readFile", map[string]any{"path": "codes.json"}, nil); err == nil && !r.IsError {
			var v struct{ Content string }
			if json.Unmarshal([]byte(text(r)), &v) == nil {
				_ = json.Unmarshal([]byte(v.Content), &codes)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the flood of CONNECTs never finished")
		}
	}
	id2 := decode[lifeView](t, p.post(t, tok, "/v1/sessions", map[string]any{})).ID
	c2 := connect(t, p.url+"/v1/sessions/"+id2+"/mcp", tok, "")
	u2 := u("http", "allowed.test", httpPort, "/other-session")
	if g := egressFetch(t, c2, u2)[u2]; g.Status != 200 {
		t.Errorf("another session during the flood: %d %q", g.Status, g.Body)
	}
	if codes["200"] != 8 || codes["429"] != 292 {
		t.Errorf("300 parallel CONNECTs with a cap of 8: %v, want 8 × 200 and 292 × 429", codes)
	}

	m := p.metrics(t)
	if v, _ := metricValue(m, "cws_egress_connections_total", map[string]string{"tenant": tenantOpen, "decision": "denied"}); v < 5 {
		t.Errorf("cws_egress_connections_total{decision=denied} = %v, want >= 5", v)
	}
	if v, _ := metricValue(m, "cws_egress_bytes_total", map[string]string{"tenant": tenantOpen, "direction": "in"}); v <= 0 {
		t.Errorf("cws_egress_bytes_total{direction=in} = %v", v)
	}
}

// gitServer serves a one-commit repository over HTTPS (git http-backend) on 127.0.0.1
// and returns its port.
func gitServer(t *testing.T) int {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(root, "work")
	run := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	run(work, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte("cloned through cws\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run(work, "add", ".")
	run(work, "commit", "-qm", "first")
	run(root, "clone", "-q", "--bare", work, "repo.git")
	backend, err := exec.LookPath("git-http-backend")
	if err != nil {
		backend = "/usr/lib/git-core/git-http-backend"
	}
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	_, port := listenLocal(t, h, true)
	return port
}

// previewApp is a small server for the preview tests, run in the workspace: static
// files, /sse (three server-sent events, one every 100 ms), /ws (a WebSocket that echoes
// text frames) and /slow (a streamed body).
const previewApp = `
import base64, hashlib, http.server, socketserver, sys, time
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path == "/sse":
            self.send_response(200); self.send_header("Content-Type", "text/event-stream"); self.send_header("Cache-Control", "no-cache"); self.end_headers()
            for i in range(3):
                self.wfile.write(("data: tick %d\n\n" % i).encode()); self.wfile.flush(); time.sleep(0.1)
            self.close_connection = True
            return
        if self.path == "/ws":
            key = self.headers["Sec-WebSocket-Key"]
            acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
            self.send_response(101); self.send_header("Upgrade", "websocket"); self.send_header("Connection", "Upgrade"); self.send_header("Sec-WebSocket-Accept", acc); self.end_headers(); self.wfile.flush()
            r = self.rfile
            while True:
                h = r.read(2)
                if len(h) < 2: return
                op, n = h[0] & 15, h[1] & 127
                if n == 126: n = int.from_bytes(r.read(2), "big")
                mask = r.read(4) if h[1] & 128 else b"\0\0\0\0"
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
                if op == 8: return
                out = b"echo: " + data
                self.wfile.write(bytes([0x81, len(out)]) + out); self.wfile.flush()
        return super().do_GET()
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// TestPreviewE2E: a port the policy allows is reached with a token and through a
// link (no token), with WebSocket and server-sent events; a port it doesn't allow is
// 403, nothing listening is 502, a bad port 400; a revoked, forged or dead session's
// link and another tenant's session are 404.
func TestPreviewE2E(t *testing.T) {
	requireRealDeps(t)
	fx := netFixture(t, netPolicy)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t))
	t.Cleanup(func() { p.deleteAll(t, fx, tenantOpen) })
	tok := fx.token(t, tenantOpen, "preview", "")
	id := startPreviewApp(t, p, tok, "<h1>preview works</h1>")
	base := "/v1/sessions/" + id + "/ports/"

	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"8001/", http.StatusForbidden, "previewPorts"},
		{"9005/", http.StatusBadGateway, "nothing is listening on port 9005"},
		{"0/", http.StatusBadRequest, "port"},
		{"65536/", http.StatusBadRequest, "port"},
		{"abc/", http.StatusBadRequest, "port"},
	} {
		if g := do(t, nil, p.url, http.MethodGet, base+tc.path, tok, nil, nil); g.status != tc.status || !strings.Contains(string(g.body), tc.body) {
			t.Errorf("GET %s: %d %s, want %d with %q", tc.path, g.status, g.body, tc.status, tc.body)
		}
	}
	other := fx.token(t, tenantAcme, "intruder", "")
	if g := do(t, nil, p.url, http.MethodGet, base+"8000/index.html", other, nil, nil); g.status != http.StatusNotFound {
		t.Errorf("another tenant's session: %d %s", g.status, g.body)
	}

	// Server-sent events arrive as they are sent, through a token.
	req, _ := http.NewRequest(http.MethodGet, p.url+base+"8000/sse", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" || strings.Count(string(events), "data: tick") != 3 {
		t.Errorf("SSE: %s %q", resp.Header.Get("Content-Type"), events)
	}

	// A link: no token, then revoked.
	lr := p.post(t, tok, base+"8000/link", map[string]any{"ttl": "10m"})
	var link struct {
		ID, URL   string
		ExpiresAt time.Time
	}
	if lr.status != http.StatusCreated || json.Unmarshal(lr.body, &link) != nil || !strings.Contains(link.URL, "/p/") {
		t.Fatalf("make a link: %d %s", lr.status, lr.body)
	}
	if time.Until(link.ExpiresAt) < 9*time.Minute || time.Until(link.ExpiresAt) > 11*time.Minute {
		t.Errorf("link expiresAt %v, want in 10m", link.ExpiresAt)
	}
	if g := do(t, nil, link.URL, http.MethodGet, "index.html", "", nil, nil); g.status != http.StatusOK || string(g.body) != "<h1>preview works</h1>" {
		t.Errorf("GET through the link: %d %s", g.status, g.body)
	}
	if echo := wsEcho(t, link.URL+"ws", "", "ping over a link"); echo != "echo: ping over a link" {
		t.Errorf("WebSocket through the link: %q", echo)
	}
	if echo := wsEcho(t, p.url+base+"8000/ws", tok, "ping over a token"); echo != "echo: ping over a token" {
		t.Errorf("WebSocket through a token: %q", echo)
	}
	forged := strings.Replace(link.URL, "/p/", "/p/x", 1)
	if g := do(t, nil, forged, http.MethodGet, "index.html", "", nil, nil); g.status != http.StatusNotFound {
		t.Errorf("a forged link: %d %s", g.status, g.body)
	}
	if g := do(t, nil, p.url, http.MethodDelete, base+"8000/link?id="+link.ID, tok, nil, nil); g.status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", g.status, g.body)
	}
	if g := do(t, nil, link.URL, http.MethodGet, "index.html", "", nil, nil); g.status != http.StatusNotFound {
		t.Errorf("a revoked link: %d %s", g.status, g.body)
	}

	// A slowloris client on a preview URL: its header never ends; cws drops it at its
	// header deadline, and serves others meanwhile.
	slow, err := net.Dial("tcp", strings.TrimPrefix(p.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	fmt.Fprintf(slow, "GET %s8000/ HTTP/1.1\r\nHost: x\r\nX-Slow: ", base)
	if g := do(t, nil, p.url, http.MethodGet, base+"8000/index.html", tok, nil, nil); g.status != http.StatusOK {
		t.Errorf("GET beside a slowloris client: %d %s", g.status, g.body)
	}
	_ = slow.SetReadDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	if _, err := io.ReadAll(slow); err != nil {
		t.Errorf("the slowloris connection was not closed by cws: %v", err)
	} else if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the slowloris connection lasted %v", d)
	}

	// cws port-forward: any TCP through the tunnel (Upgrade: cws-tcp), here HTTP.
	pf := exec.Command(cwsBinary, "port-forward", id, "8000:0", "--server", p.url, "--token", tok)
	pfOut, err := pf.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := pf.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pf.Process.Kill(); _ = pf.Wait() })
	line, err := bufio.NewReader(pfOut).ReadString('\n')
	var local string
	if _, serr := fmt.Sscanf(line, "Forwarding from %s -> 8000", &local); err != nil || serr != nil {
		t.Fatalf("cws port-forward printed %q (%v)", line, err)
	}
	if g := do(t, nil, "http://"+local, http.MethodGet, "/index.html", "", nil, nil); g.status != http.StatusOK || string(g.body) != "<h1>preview works</h1>" {
		t.Errorf("GET through cws port-forward: %d %s", g.status, g.body)
	}

	// A link dies with its session.
	lr = p.post(t, tok, base+"8000/link", nil)
	_ = json.Unmarshal(lr.body, &link)
	if g := do(t, nil, link.URL, http.MethodGet, "index.html", "", nil, nil); g.status != http.StatusOK {
		t.Errorf("GET through a second link: %d %s", g.status, g.body)
	}
	if g := do(t, nil, p.url, http.MethodDelete, "/v1/sessions/"+id, tok, nil, nil); g.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", g.status, g.body)
	}
	if g := do(t, nil, link.URL, http.MethodGet, "index.html", "", nil, nil); g.status != http.StatusNotFound {
		t.Errorf("a link of a deleted session: %d %s", g.status, g.body)
	}
}

// wsEcho sends one text frame over a WebSocket at url and returns the answer's text.
func wsEcho(t *testing.T, url, tok, msg string) string {
	t.Helper()
	conn, br := wsOpen(t, url, tok)
	defer conn.Close()
	mask := [4]byte{1, 2, 3, 4}
	frame := []byte{0x81, 0x80 | byte(len(msg))}
	frame = append(frame, mask[:]...)
	for i := range len(msg) {
		frame = append(frame, msg[i]^mask[i%4])
	}
	if _, err := conn.Write(frame); err != nil {
		t.Fatal(err)
	}
	h := make([]byte, 2)
	if _, err := io.ReadFull(br, h); err != nil {
		t.Fatalf("WebSocket answer: %v", err)
	}
	body := make([]byte, h[1]&127)
	if _, err := io.ReadFull(br, body); err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// wsOpen opens a WebSocket at url (with tok, if any) and returns it once upgraded.
func wsOpen(t *testing.T, url, tok string) (net.Conn, *bufio.Reader) {
	t.Helper()
	u := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(u, "/")
	conn, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	var k [16]byte
	_, _ = rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	auth := ""
	if tok != "" {
		auth = "Authorization: Bearer " + tok + "\r\n"
	}
	fmt.Fprintf(conn, "GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n%s\r\n", path, host, key, auth)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("WebSocket handshake: %v", err)
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		conn.Close()
		t.Fatalf("WebSocket handshake: %d %s", resp.StatusCode, b)
	}
	return conn, br
}

// startPreviewApp creates a session of p as tok, starts previewApp on its port 8000
// with index.html holding index, and returns the session once a GET of index.html over
// the token serves it.
func startPreviewApp(t *testing.T, p *cwsProc, tok, index string) string {
	t.Helper()
	r := p.post(t, tok, "/v1/sessions", map[string]any{})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := decode[lifeView](t, r).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "app.py", "contents": previewApp})
	c.call(t, "writeFile", map[string]any{"path": "index.html", "contents": index})
	c.call(t, "startProcess", map[string]any{"command": "python3", "args": []string{"app.py", "8000"}})
	var g rest
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if g = do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/ports/8000/index.html", tok, nil, nil); g.status != http.StatusBadGateway || time.Now().After(deadline) {
			break
		}
	}
	if g.status != http.StatusOK || string(g.body) != index {
		t.Fatalf("GET over a token: %d %s", g.status, g.body)
	}
	return id
}

// TestPreviewCap: a session's exchanges with its ports are capped by cws serve
// --preview-max-conns: with 2 WebSockets open, a third request is 429 quota_exceeded
// naming the flag; once one closes, requests pass again. Another session is unaffected.
func TestPreviewCap(t *testing.T) {
	requireRealDeps(t)
	fx := netFixture(t, netPolicy)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), "--preview-max-conns", "2")
	t.Cleanup(func() { p.deleteAll(t, fx, tenantOpen) })
	tok := fx.token(t, tenantOpen, "cap", "")
	id, other := startPreviewApp(t, p, tok, "up"), startPreviewApp(t, p, tok, "up")
	base := p.url + "/v1/sessions/" + id + "/ports/8000/"
	ws1, _ := wsOpen(t, base+"ws", tok)
	defer ws1.Close()
	ws2, _ := wsOpen(t, base+"ws", tok)
	defer ws2.Close()

	g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/ports/8000/index.html", tok, nil, nil)
	if g.status != http.StatusTooManyRequests || !strings.Contains(string(g.body), "quota_exceeded") || !strings.Contains(string(g.body), "--preview-max-conns") {
		t.Fatalf("a 3rd exchange with 2 WebSockets open: %d %s, want 429 quota_exceeded naming --preview-max-conns", g.status, g.body)
	}
	if g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+other+"/ports/8000/index.html", tok, nil, nil); g.status != http.StatusOK {
		t.Errorf("another session meanwhile: %d %s", g.status, g.body)
	}
	ws1.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		g := do(t, nil, p.url, http.MethodGet, "/v1/sessions/"+id+"/ports/8000/index.html", tok, nil, nil)
		if g.status == http.StatusOK && string(g.body) == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a WebSocket closed, and still: %d %s", g.status, g.body)
		}
	}
}

// listenAny accepts TCP connections on every address of the host (and holds them)
// and returns its port: what a workspace would reach if it had a route.
func listenAny(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPreviewHostLinks: with --preview-domain a link is host-based
// (PORT-SESSION.DOMAIN): its first request moves the capability into a cookie of that
// host and drops it from the URL, later requests carry the cookie, and the app sees
// absolute paths as they are; the link of another port or session is not found there.
func TestPreviewHostLinks(t *testing.T) {
	requireRealDeps(t)
	fx := netFixture(t, netPolicy)
	p := startCWSWith(t, fx, testenv.Redis(t), freeAddr(t), "--preview-domain", "preview.test")
	t.Cleanup(func() { p.deleteAll(t, fx, tenantOpen) })
	tok := fx.token(t, tenantOpen, "preview", "")
	id := decode[lifeView](t, p.post(t, tok, "/v1/sessions", map[string]any{})).ID
	c := connect(t, p.url+"/v1/sessions/"+id+"/mcp", tok, "")
	c.call(t, "writeFile", map[string]any{"path": "app.py", "contents": previewApp})
	c.call(t, "runCommand", map[string]any{"command": "sh", "args": []string{"-c", "mkdir -p static && echo absolute > static/a.txt"}})
	c.call(t, "startProcess", map[string]any{"command": "python3", "args": []string{"app.py", "8000"}})
	lr := p.post(t, tok, "/v1/sessions/"+id+"/ports/8000/link", nil)
	var link struct{ URL string }
	if lr.status != http.StatusCreated || json.Unmarshal(lr.body, &link) != nil {
		t.Fatalf("make a link: %d %s", lr.status, lr.body)
	}
	host := "8000-" + id + ".preview.test"
	if !strings.HasPrefix(link.URL, "http://"+host+"/?cws-link=") {
		t.Fatalf("host-based link %q, want http://%s/?cws-link=…", link.URL, host)
	}
	// The test resolves the preview host to cws itself, as the wildcard DNS name would.
	client := &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, strings.TrimPrefix(p.url, "http://"))
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Get(link.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" || len(cookies) != 1 || !cookies[0].HttpOnly {
		t.Fatalf("the link's first request: %d Location %q cookies %v", resp.StatusCode, resp.Header.Get("Location"), cookies)
	}
	get := func(path string, withCookie bool) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+path, nil)
		if withCookie {
			req.AddCookie(cookies[0])
		}
		r, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	st, body := get("/static/a.txt", true)
	for deadline := time.Now().Add(30 * time.Second); st == http.StatusBadGateway && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st, body = get("/static/a.txt", true) // the app starting
	}
	if st != http.StatusOK || body != "absolute\n" {
		t.Errorf("an absolute path with the cookie: %d %q", st, body)
	}
	if st, _ := get("/static/a.txt", false); st != http.StatusNotFound {
		t.Errorf("without the cookie: %d, want 404", st)
	}
	// The same capability on another port's host is not found.
	other := "8001-" + id + ".preview.test"
	req, _ := http.NewRequest(http.MethodGet, "http://"+other+"/", nil)
	req.AddCookie(cookies[0])
	if r, err := client.Do(req); err != nil || r.StatusCode != http.StatusNotFound {
		t.Errorf("the cookie on another port's host: %v %v", r, err)
	}
}

// routeProbe prints the proxy variables a command gets, then tries a direct TCP
// connection (ignoring the proxy) to port argv[1] on the sandbox's default gateway (the
// host, on Docker's bridge): "direct: connected" or "direct: <error>".
const routeProbe = `
import os, socket, struct, sys
print("proxy:", os.environ.get("HTTPS_PROXY", ""))
gw = "1.1.1.1"
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000":
        gw = socket.inet_ntoa(struct.pack("<L", int(f[2], 16)))
try:
    socket.create_connection((gw, int(sys.argv[1])), timeout=5); print("direct: connected to", gw)
except OSError as e:
    print("direct:", gw, e)
`

// TestNetworkTrueE2E: a tenant's network: true goes through cws's egress proxy — any
// public name, but the cloud metadata address (literal or behind a name), private and
// loopback addresses are refused with a 403 naming why, and the sandbox has no route of
// its own. Only network: "direct" in the tenants file gives it one (and no proxy).
func TestNetworkTrueE2E(t *testing.T) {
	requireRealDeps(t)
	fx := netFixture(t, `{"allowedPaths": ["**"], "maxSessions": 10, "network": true}`)
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello %s", r.Host) })
	_, httpPort := listenLocal(t, hello, false)
	_, tlsPort := listenLocal(t, hello, true)
	outside := listenAny(t)
	redis := testenv.Redis(t)
	p := startCWSWith(t, fx, redis, freeAddr(t),
		"--egress-resolve", "any.test=127.0.0.1", "--egress-resolve", "meta.test=169.254.169.254",
		"--egress-resolve", "private.test=10.1.2.3", "--egress-resolve", "loop.test=127.0.0.2",
		"--egress-allow-private", "127.0.0.1")
	tok := fx.token(t, tenantOpen, "net", "")
	r := p.post(t, tok, "/v1/sessions", map[string]any{})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	c := connect(t, p.url+"/v1/sessions/"+decode[lifeView](t, r).ID+"/mcp", tok, "")
	cases := []struct {
		url    string
		status int
		body   string
	}{
		{fmt.Sprintf("http://any.test:%d/", httpPort), 200, "hello any.test"},
		{fmt.Sprintf("https://any.test:%d/", tlsPort), 200, "hello any.test"},
		{"http://169.254.169.254/latest/meta-data/", 403, "169.254.169.254 is a cloud metadata address"},
		{"http://meta.test/latest/meta-data/", 403, "169.254.169.254 is a cloud metadata address"},
		{"http://private.test/", 403, "10.1.2.3 is a private address"},
		{fmt.Sprintf("http://loop.test:%d/", httpPort), 403, "127.0.0.2 is a loopback address"},
	}
	var urls []string
	for _, tc := range cases {
		urls = append(urls, tc.url)
	}
	got := egressFetch(t, c, urls...)
	for _, tc := range cases {
		if g := got[tc.url]; g.Status != tc.status || !strings.Contains(g.Body, tc.body) {
			t.Errorf("network true, %s: %d %q, want %d with %q", tc.url, g.Status, g.Body, tc.status, tc.body)
		}
	}
	probe := func(c *mcpClient) []string {
		t.Helper()
		r := c.call(t, "runCommand", map[string]any{"command": "python3", "args": []string{"-c", routeProbe, fmt.Sprint(outside)}})
		return strings.Split(strings.TrimSpace(fmt.Sprint(r["stdout"])), "\n")
	}
	if lines := probe(c); len(lines) != 2 || lines[0] != "proxy: http://127.0.0.1:3128" || strings.HasPrefix(lines[1], "direct: connected") {
		t.Errorf("network true: %q, want the proxy and no route of its own", lines)
	}
	m := p.metrics(t)
	if v, _ := metricValue(m, "cws_egress_connections_total", map[string]string{"tenant": tenantOpen, "decision": "denied"}); v < 4 {
		t.Errorf("cws_egress_connections_total{decision=denied} = %v, want >= 4 (each refusal is counted and audited)", v)
	}
	p.deleteAll(t, fx, tenantOpen)
	p.kill()

	// network: "direct": a route of its own, no proxy.
	if err := os.WriteFile(filepath.Join(filepath.Dir(fx.path), "open.cws-policy.json"),
		[]byte(`{"allowedPaths": ["**"], "maxSessions": 10, "network": "direct"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p = startCWS(t, fx, redis, freeAddr(t))
	t.Cleanup(func() { p.deleteAll(t, fx, tenantOpen) })
	r = p.post(t, tok, "/v1/sessions", map[string]any{})
	if r.status != http.StatusCreated {
		t.Fatalf("create with network direct: %d %s", r.status, r.body)
	}
	c = connect(t, p.url+"/v1/sessions/"+decode[lifeView](t, r).ID+"/mcp", tok, "")
	lines := probe(c)
	if len(lines) != 2 || strings.TrimSpace(lines[0]) != "proxy:" {
		t.Errorf("network direct: %q, want no proxy", lines)
	}
	// On Docker the gateway is the host, where the listener answers anyone. A pod's
	// gateway is the node's, which the host's listener may not be behind.
	if !onKube() && (len(lines) < 2 || !strings.HasPrefix(lines[1], "direct: connected")) {
		t.Errorf("network direct: %q, want a route of its own", lines)
	}
}
