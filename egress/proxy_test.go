package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The tests below drive Proxy.Serve in process over real loopback TCP pairs (so
// half-close works), with httptest servers and raw TCP sinks on 127.0.0.1 as
// destinations. Names are pinned with Proxy.Hosts; 127.0.0.1/32 is the only
// private range the Guard lets through.

// pxRules is the allow/deny list most tests use.
func pxRules(t *testing.T) Rules {
	t.Helper()
	r, err := ParseRules(
		[]string{"allowed.test", "*.wild.test", "loop2.test", "mapped.test", "mapped1.test"},
		[]string{"bad.wild.test"},
	)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// pxRecorder collects what Proxy.Observe gets.
type pxRecorder struct {
	mu   sync.Mutex
	recs []Record
}

func (r *pxRecorder) observe(rec Record) {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
}

func (r *pxRecorder) all() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.recs...)
}

// wait returns the first record for which match is true, failing after a few seconds.
func (r *pxRecorder) wait(t *testing.T, what string, match func(Record) bool) Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, rec := range r.all() {
			if match(rec) {
				return rec
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Observe record for %s; have %+v", what, r.all())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func pxAddrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// newPx is a proxy that may reach 127.0.0.1 only, with the test names pinned.
func newPx() (*Proxy, *pxRecorder) {
	rec := &pxRecorder{}
	p := &Proxy{
		Guard: NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil),
		Hosts: map[string][]netip.Addr{
			"allowed.test":  pxAddrs("127.0.0.1"),
			"other.test":    pxAddrs("127.0.0.1"),
			"ok.wild.test":  pxAddrs("127.0.0.1"),
			"bad.wild.test": pxAddrs("127.0.0.1"),
			"loop2.test":    pxAddrs("127.0.0.2"),
			"mapped.test":   pxAddrs("::ffff:127.0.0.2"),
			"mapped1.test":  pxAddrs("::ffff:127.0.0.1"),
		},
		Observe:     rec.observe,
		DialTimeout: 2 * time.Second,
	}
	return p, rec
}

func listed(r Rules, max int) func(context.Context) (Policy, error) {
	return func(context.Context) (Policy, error) { return Policy{Mode: Listed, Rules: r, MaxConns: max}, nil }
}

// dialPx connects a client to a fresh p.Serve over loopback TCP and returns the
// client side. Cleanup closes it and checks that Serve returned.
func dialPx(t *testing.T, p *Proxy, session string, pol func(context.Context) (Policy, error)) net.Conn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		client.Close()
		t.Fatal(r.err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Serve(context.Background(), r.c, Target{Tenant: "t", Session: session, Policy: pol})
	}()
	t.Cleanup(func() {
		client.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return within 5s of the client closing")
		}
	})
	return client
}

// readHead reads a response head byte by byte (so nothing after it is buffered),
// returning the status code and the head.
func readHead(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var b []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(b, []byte("\r\n\r\n")) {
		if _, err := c.Read(one); err != nil {
			t.Fatalf("reading the response head (have %q): %v", b, err)
		}
		b = append(b, one[0])
		if len(b) > 8<<10 {
			t.Fatalf("response head too long: %q", b)
		}
	}
	line, _, _ := strings.Cut(string(b), "\r\n")
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") {
		t.Fatalf("bad status line %q", line)
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("bad status line %q", line)
	}
	return code, string(b)
}

// readResp reads a whole response (status and body) from br.
func readResp(t *testing.T, c net.Conn, br *bufio.Reader) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return resp.StatusCode, string(body)
}

// expectClosed asserts the server side ends c (EOF or reset) within d.
func expectClosed(t *testing.T, c net.Conn, br io.Reader, d time.Duration) {
	t.Helper()
	if br == nil {
		br = c
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	n, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %d more bytes)", d, n)
	}
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func connectReq(host string, port int) string {
	hp := net.JoinHostPort(host, strconv.Itoa(port))
	return "CONNECT " + hp + " HTTP/1.1\r\nHost: " + hp + "\r\n\r\n"
}

// pxSink is a raw TCP destination on 127.0.0.1: it counts connections and the bytes
// they send, optionally echoes, and closes a connection when its client does.
type pxSink struct {
	port     int
	accepted atomic.Int64
	open     atomic.Int64
	got      atomic.Int64
}

func newSink(t *testing.T, echo bool) *pxSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &pxSink{port: ln.Addr().(*net.TCPAddr).Port}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.open.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer s.open.Add(-1)
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					s.got.Add(int64(n))
					if n > 0 && echo {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func srvPort(t *testing.T, s *httptest.Server) int {
	t.Helper()
	return s.Listener.Addr().(*net.TCPAddr).Port
}

// 1. CONNECT to an allowed name, then TLS through the tunnel.
func TestServeConnectTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello over tls, sni=%s host=%s", r.TLS.ServerName, r.Host)
	}))
	defer srv.Close()
	port := srvPort(t, srv)
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))

	write(t, c, connectReq("allowed.test", port))
	if code, head := readHead(t, c); code != 200 || !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatalf("CONNECT answered %q, want HTTP/1.1 200", head)
	}
	if n := p.Open("s1"); n != 1 {
		t.Errorf("Open(s1) = %d during the tunnel, want 1", n)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "allowed.test", InsecureSkipVerify: true})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS handshake through the tunnel: %v", err)
	}
	if _, err := io.WriteString(tc, "GET /x HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("reading the response through the tunnel: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := "hello over tls, sni=allowed.test host=allowed.test"; resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("through the tunnel: %d %q, want 200 %q", resp.StatusCode, body, want)
	}
	tc.Close()

	r := rec.wait(t, "the CONNECT", func(r Record) bool { return r.Method == http.MethodConnect })
	if r.Decision != "allowed" || r.Reason != "" {
		t.Errorf("Decision, Reason = %q, %q; want allowed, \"\"", r.Decision, r.Reason)
	}
	if r.Host != "allowed.test" || r.Port != port || r.Tenant != "t" || r.Session != "s1" {
		t.Errorf("record %+v: want Host allowed.test Port %d Tenant t Session s1", r, port)
	}
	// The ClientHello alone is a few hundred bytes; the answer carries the cert too.
	if r.BytesOut < 200 || r.BytesIn < int64(len(body)) {
		t.Errorf("BytesOut, BytesIn = %d, %d; want > 200 and >= %d", r.BytesOut, r.BytesIn, len(body))
	}
	if r.Took <= 0 {
		t.Errorf("Took = %v", r.Took)
	}
	waitOpen(t, p, "s1", 0)
}

// waitOpen waits for p.Open(session) to be want.
func waitOpen(t *testing.T, p *Proxy, session string, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.Open(session) != want {
		if time.Now().After(deadline) {
			t.Fatalf("Open(%s) = %d, want %d", session, p.Open(session), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// 2. A ClientHello naming another server than the CONNECT host is refused.
func TestServeConnectSNIMismatch(t *testing.T) {
	t.Parallel()
	sink := newSink(t, true)
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))

	write(t, c, connectReq("allowed.test", sink.port))
	if code, head := readHead(t, c); code != 200 {
		t.Fatalf("CONNECT answered %q", head)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	err := tc.Handshake()
	if err == nil {
		t.Fatal("TLS handshake with SNI evil.test succeeded")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("handshake timed out instead of the proxy closing: %v", err)
	}
	expectClosed(t, c, nil, 3*time.Second)

	r := rec.wait(t, "the CONNECT", func(r Record) bool { return r.Method == http.MethodConnect })
	if r.Decision != "denied" {
		t.Errorf("Decision = %q, want denied", r.Decision)
	}
	if !strings.Contains(r.Reason, `"evil.test"`) || !strings.Contains(r.Reason, "allowed.test") {
		t.Errorf("Reason %q should name both evil.test and allowed.test", r.Reason)
	}
	if r.Host != "allowed.test" || r.Port != sink.port || r.BytesOut != 0 || r.BytesIn != 0 {
		t.Errorf("record %+v", r)
	}
	// Not one byte of the ClientHello reached the destination.
	time.Sleep(50 * time.Millisecond)
	if n := sink.got.Load(); n != 0 {
		t.Errorf("the destination got %d bytes of the refused ClientHello", n)
	}
	waitOpen(t, p, "s1", 0)
}

// 3. Plain HTTP with an absolute URI, keep-alive, and a Host header mismatch.
func TestServePlainHTTP(t *testing.T) {
	t.Parallel()
	var newConns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "plain %s %s %s proxy-auth=%q", r.Method, r.Host, r.URL.Path, r.Header.Get("Proxy-Authorization"))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			newConns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	port := srvPort(t, srv)
	hp := net.JoinHostPort("allowed.test", strconv.Itoa(port))
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	br := bufio.NewReader(c)

	write(t, c, "GET http://"+hp+"/one HTTP/1.1\r\nHost: "+hp+"\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\n\r\n")
	if code, body := readResp(t, c, br); code != 200 || body != "plain GET "+hp+" /one proxy-auth=\"\"" {
		t.Fatalf("first request: %d %q", code, body)
	}
	write(t, c, "GET http://"+hp+"/two HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	if code, body := readResp(t, c, br); code != 200 || body != "plain GET "+hp+" /two proxy-auth=\"\"" {
		t.Fatalf("second request on the same connection: %d %q", code, body)
	}
	if n := newConns.Load(); n != 1 {
		t.Errorf("the destination saw %d connections for two requests, want 1 (kept alive)", n)
	}
	if n := p.Open("s1"); n != 1 {
		t.Errorf("Open(s1) = %d with a kept upstream, want 1", n)
	}
	write(t, c, "GET http://"+hp+"/three HTTP/1.1\r\nHost: evil.test:"+strconv.Itoa(port)+"\r\n\r\n")
	code, body := readResp(t, c, br)
	if code != 403 || !strings.Contains(body, "Host header") || !strings.Contains(body, "evil.test") {
		t.Fatalf("Host mismatch: %d %q, want 403 naming the Host header", code, body)
	}
	expectClosed(t, c, br, 3*time.Second)

	var gets []Record
	for _, r := range rec.all() {
		if r.Method == "GET" && r.Decision == "allowed" {
			gets = append(gets, r)
		}
	}
	if len(gets) != 2 {
		t.Fatalf("allowed GET records: %+v, want 2", gets)
	}
	for _, r := range gets {
		if r.Host != "allowed.test" || r.Port != port || r.BytesOut <= 0 || r.BytesIn <= 0 {
			t.Errorf("record %+v", r)
		}
	}
	r := rec.wait(t, "the mismatch", func(r Record) bool { return r.Decision == "denied" })
	if !strings.Contains(r.Reason, "Host header") {
		t.Errorf("Reason %q", r.Reason)
	}
	waitOpen(t, p, "s1", 0)
	if n := newConns.Load(); n != 1 {
		t.Errorf("the destination saw %d connections, want 1", n)
	}
}

// 4. Refusals: unlisted, denied, network false, a private address, cws itself.
func TestServeRefusals(t *testing.T) {
	t.Parallel()
	rules := pxRules(t)
	ipDeny, err := ParseRules([]string{"allowed.test"}, []string{"127.0.0.1/32"})
	if err != nil {
		t.Fatal(err)
	}
	type tc struct {
		name   string
		req    func(port int) string
		pol    func(context.Context) (Policy, error)
		self   bool // put the sink among Proxy.Self
		status int
		body   func(port int) string // the exact body, "" to skip
		has    []string              // substrings of the body
	}
	ps := strconv.Itoa
	tests := []tc{
		{name: "unlisted CONNECT", req: func(port int) string { return connectReq("other.test", port) },
			pol: listed(rules, 0), status: 403,
			body: func(int) string { return "egress: other.test is not in the allow list\n" }},
		{name: "unlisted plain GET", req: func(port int) string {
			return "GET http://other.test:" + ps(port) + "/ HTTP/1.1\r\nHost: other.test:" + ps(port) + "\r\n\r\n"
		}, pol: listed(rules, 0), status: 403,
			body: func(int) string { return "egress: other.test is not in the allow list\n" }},
		{name: "deny entry", req: func(port int) string { return connectReq("bad.wild.test", port) },
			pol: listed(rules, 0), status: 403,
			body: func(port int) string {
				return `egress: bad.wild.test:` + ps(port) + ` is denied by "bad.wild.test"` + "\n"
			}},
		{name: "wildcard control", req: func(port int) string { return connectReq("ok.wild.test", port) },
			pol: listed(rules, 0), status: 200},
		{name: "deny CIDR of the resolved address", req: func(port int) string { return connectReq("allowed.test", port) },
			pol: listed(ipDeny, 0), status: 403,
			has: []string{"allowed.test:", "127.0.0.1", `denied by "127.0.0.1/32"`}},
		{name: "network false", req: func(port int) string { return connectReq("allowed.test", port) },
			pol:    func(context.Context) (Policy, error) { return Policy{Mode: Off}, nil },
			status: 403, has: []string{"network is false"}},
		{name: "network false plain", req: func(port int) string {
			return "GET http://allowed.test:" + ps(port) + "/ HTTP/1.1\r\n\r\n"
		}, pol: func(context.Context) (Policy, error) { return Policy{Mode: Off}, nil },
			status: 403, has: []string{"network is false"}},
		{name: "pinned to 127.0.0.2", req: func(port int) string { return connectReq("loop2.test", port) },
			pol: listed(rules, 0), status: 403, has: []string{"127.0.0.2", "loopback"}},
		{name: "open mode literal 127.0.0.2", req: func(port int) string { return connectReq("127.0.0.2", port) },
			pol:    func(context.Context) (Policy, error) { return Policy{Mode: Open}, nil },
			status: 403, body: func(int) string { return "egress: 127.0.0.2 is a loopback address\n" }},
		{name: "cws itself", req: func(port int) string { return connectReq("allowed.test", port) },
			pol: listed(rules, 0), self: true, status: 403,
			has: []string{"cws itself", "127.0.0.1:"}},
		{name: "policy error", req: func(port int) string { return connectReq("allowed.test", port) },
			pol:    func(context.Context) (Policy, error) { return Policy{}, errors.New("store down") },
			status: 503, has: []string{"store down"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sink := newSink(t, false)
			p, rec := newPx()
			if tt.self {
				p.Self = []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:" + ps(sink.port))}
			}
			c := dialPx(t, p, "s1", tt.pol)
			br := bufio.NewReader(c)
			write(t, c, tt.req(sink.port))
			if tt.status == 200 {
				if code, head := readHead(t, c); code != 200 {
					t.Fatalf("answered %q, want 200", head)
				}
				deadline := time.Now().Add(3 * time.Second)
				for sink.accepted.Load() != 1 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if n := sink.accepted.Load(); n != 1 {
					t.Errorf("the destination accepted %d connections, want 1", n)
				}
				return
			}
			code, body := readResp(t, c, br)
			if code != tt.status {
				t.Errorf("status %d (%q), want %d", code, body, tt.status)
			}
			if tt.body != nil {
				if want := tt.body(sink.port); body != want {
					t.Errorf("body %q, want %q", body, want)
				}
			}
			for _, s := range tt.has {
				if !strings.Contains(body, s) {
					t.Errorf("body %q lacks %q", body, s)
				}
			}
			expectClosed(t, c, br, 3*time.Second)
			if n := sink.accepted.Load(); n != 0 {
				t.Errorf("the destination accepted %d connections of a refused request", n)
			}
			if tt.status == 503 {
				return // refused before there is a record
			}
			r := rec.wait(t, "the refusal", func(Record) bool { return true })
			if r.Decision != "denied" || r.Reason+"\n" != body || r.Port != sink.port {
				t.Errorf("record %+v for body %q", r, body)
			}
			waitOpen(t, p, "s1", 0) // the slot goes once the refused connection has closed
		})
	}
	// The exact text is the rule's own.
	if ok, rule := rules.Allows("other.test", 443); ok || "egress: "+rule+"\n" != "egress: other.test is not in the allow list\n" {
		t.Errorf("Rules.Allows(other.test) = %v, %q", ok, rule)
	}
}

// 5. The per-session cap.
func TestServeMaxConns(t *testing.T) {
	t.Parallel()
	sink := newSink(t, false)
	p, rec := newPx()
	rules := pxRules(t)
	const max, n = 5, 200

	var maxSeen atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if o := p.Open("s1"); o > maxSeen.Load() {
				maxSeen.Store(o)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()

	conns := make([]net.Conn, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		conns[i] = dialPx(t, p, "s1", listed(rules, max))
	}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := conns[i]
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, connectReq("allowed.test", sink.port)); err != nil {
				codes[i] = -1
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil {
				codes[i] = -2
				return
			}
			codes[i] = resp.StatusCode
			if resp.StatusCode == 429 {
				b, _ := io.ReadAll(resp.Body)
				if want := "egress: the session has 5 connections open, its limit (egress.maxConnections)\n"; string(b) != want {
					t.Errorf("429 body %q, want %q", b, want)
				}
			}
			_ = c.SetDeadline(time.Time{})
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[200] != max || count[429] != n-max {
		t.Errorf("answers %v, want %d×200 and %d×429", count, max, n-max)
	}
	if a := sink.accepted.Load(); a != max {
		t.Errorf("the destination accepted %d connections, want %d", a, max)
	}
	if o := p.Open("s1"); o != max {
		t.Errorf("Open(s1) = %d with %d tunnels up, want %d", o, max, max)
	}

	// Another session is not held to s1's count.
	c2 := dialPx(t, p, "s2", listed(rules, max))
	write(t, c2, connectReq("allowed.test", sink.port))
	if code, head := readHead(t, c2); code != 200 {
		t.Errorf("s2's CONNECT answered %q, want 200", head)
	}
	if o := p.Open("s2"); o != 1 {
		t.Errorf("Open(s2) = %d, want 1", o)
	}

	for _, c := range conns {
		c.Close()
	}
	waitOpen(t, p, "s1", 0)
	close(stop)
	<-sampled
	if m := maxSeen.Load(); m > max {
		// hold adds before it compares, so refused attempts show in Open for a moment.
		t.Errorf("Open(s1) was sampled at %d, over the cap %d", m, max)
	}
	c2.Close()
	waitOpen(t, p, "s2", 0)
	denied := 0
	for _, r := range rec.all() {
		if r.Decision == "denied" && r.Session == "s1" && strings.Contains(r.Reason, "its limit") {
			denied++
		}
	}
	if denied != n-max {
		t.Errorf("%d denied records for the cap, want %d", denied, n-max)
	}
}

// 6a. Slowloris: a partial request line is cut off after HeaderTimeout.
func TestServeHeaderTimeout(t *testing.T) {
	t.Parallel()
	for _, trickle := range []bool{false, true} {
		t.Run(fmt.Sprintf("trickle=%v", trickle), func(t *testing.T) {
			t.Parallel()
			p, _ := newPx()
			p.HeaderTimeout = 200 * time.Millisecond
			c := dialPx(t, p, "s1", listed(pxRules(t), 0))
			start := time.Now()
			write(t, c, "GET http://allowed.te")
			if trickle { // a byte every 50ms must not extend the deadline
				go func() {
					for range 40 {
						time.Sleep(50 * time.Millisecond)
						if _, err := c.Write([]byte("s")); err != nil {
							return
						}
					}
				}()
			}
			br := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			took := time.Since(start)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 400 || !strings.Contains(string(body), "timeout") {
					t.Errorf("answered %d %q, want 400 (or a close)", resp.StatusCode, body)
				}
			} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("connection still open after %v", took)
				}
			}
			expectClosed(t, c, br, 2*time.Second)
			if took < 150*time.Millisecond || took > 2*time.Second {
				t.Errorf("cut off after %v, want about 200ms", took)
			}
		})
	}
}

// 6b. A request header over 64 KiB gets 431.
func TestServeHeaderTooLarge(t *testing.T) {
	t.Parallel()
	p, _ := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	// Exactly maxHeader bytes and no end of header: the proxy reads them all, so it
	// closes on an empty receive queue (no RST racing the answer).
	req := "GET http://allowed.test/ HTTP/1.1\r\nX-Big: "
	req += strings.Repeat("a", maxHeader-len(req))
	go func() {
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, req)
	}()
	br := bufio.NewReader(c)
	code, body := readResp(t, c, br)
	if code != 431 || !strings.Contains(body, "too large") {
		t.Fatalf("answered %d %q, want 431", code, body)
	}
	expectClosed(t, c, br, 2*time.Second)
}

// 7. A malformed request gets 400.
func TestServeMalformed(t *testing.T) {
	t.Parallel()
	for _, req := range []string{
		"garbage\r\n\r\n",
		"GET http://allowed.test/ HTTP/1.1\r\nno colon here\r\n\r\n",
		"GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", // not proxied: 403
	} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			p, _ := newPx()
			c := dialPx(t, p, "s1", listed(pxRules(t), 0))
			write(t, c, req)
			br := bufio.NewReader(c)
			code, body := readResp(t, c, br)
			want := 400
			if strings.HasPrefix(req, "GET https") {
				want = 403
			}
			if code != want || !strings.HasPrefix(body, "egress: ") {
				t.Errorf("%q answered %d %q, want %d", req, code, body, want)
			}
			expectClosed(t, c, br, 2*time.Second)
		})
	}
}

// 8. An idle tunnel is closed after IdleTimeout; a busy one is not.
func TestServeIdleTimeout(t *testing.T) {
	t.Parallel()
	sink := newSink(t, true)
	p, rec := newPx()
	p.IdleTimeout = 300 * time.Millisecond
	rules := pxRules(t)

	t.Run("idle", func(t *testing.T) {
		t.Parallel()
		c := dialPx(t, p, "idle", listed(rules, 0))
		write(t, c, connectReq("allowed.test", sink.port))
		if code, head := readHead(t, c); code != 200 {
			t.Fatalf("CONNECT answered %q", head)
		}
		start := time.Now()
		expectClosed(t, c, nil, 6*time.Second)
		// (2 * time.Second) (2s, nothing comes) + IdleTimeout + a tick.
		if took := time.Since(start); took < 300*time.Millisecond || took > 4*time.Second {
			t.Errorf("idle tunnel closed after %v", took)
		}
		r := rec.wait(t, "the idle tunnel", func(r Record) bool { return r.Session == "idle" })
		if r.Decision != "allowed" || r.BytesOut != 0 || r.BytesIn != 0 {
			t.Errorf("record %+v", r)
		}
		waitOpen(t, p, "idle", 0)
	})
	t.Run("busy", func(t *testing.T) {
		t.Parallel()
		c := dialPx(t, p, "busy", listed(rules, 0))
		write(t, c, connectReq("allowed.test", sink.port))
		if code, head := readHead(t, c); code != 200 {
			t.Fatalf("CONNECT answered %q", head)
		}
		// Five bytes, not TLS: the SNI peek lets it through at once.
		buf := make([]byte, 5)
		for i := range 10 { // ~1s of traffic every 100ms, over three IdleTimeouts
			write(t, c, fmt.Sprintf("ping%d", i))
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != fmt.Sprintf("ping%d", i) {
				t.Fatalf("echo %d: %q, %v", i, buf, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		start := time.Now()
		expectClosed(t, c, nil, 3*time.Second)
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("closed %v after the traffic stopped", took)
		}
		r := rec.wait(t, "the busy tunnel", func(r Record) bool { return r.Session == "busy" })
		if r.Decision != "allowed" || r.BytesOut != 50 || r.BytesIn != 50 {
			t.Errorf("record %+v, want 50 bytes each way", r)
		}
	})
}

// 9. A name pinned to a v4-mapped v6 loopback is checked as IPv4.
func TestServeMappedLoopback(t *testing.T) {
	t.Parallel()
	rules := pxRules(t)
	open := func(context.Context) (Policy, error) { return Policy{Mode: Open}, nil }
	for _, tt := range []struct {
		name, host string
		pol        func(context.Context) (Policy, error)
		status     int
	}{
		{"pinned ::ffff:127.0.0.2", "mapped.test", listed(rules, 0), 403},
		{"literal ::ffff:127.0.0.2", "::ffff:127.0.0.2", open, 403},
		{"pinned ::ffff:127.0.0.1 (allowed private)", "mapped1.test", listed(rules, 0), 200},
		{"literal ::ffff:127.0.0.1 (allowed private)", "::ffff:127.0.0.1", open, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sink := newSink(t, false)
			p, _ := newPx()
			c := dialPx(t, p, "s1", tt.pol)
			write(t, c, connectReq(tt.host, sink.port))
			br := bufio.NewReader(c)
			if tt.status == 200 {
				if code, head := readHead(t, c); code != 200 {
					t.Fatalf("answered %q, want 200", head)
				}
				return
			}
			code, body := readResp(t, c, br)
			if code != 403 || !strings.Contains(body, "127.0.0.2 is a loopback address") {
				t.Errorf("answered %d %q, want 403: 127.0.0.2 is a loopback address", code, body)
			}
			if n := sink.accepted.Load(); n != 0 {
				t.Errorf("the destination accepted %d connections", n)
			}
		})
	}
}

// fragConn splits the first TLS record written through it (the ClientHello) into two
// records, as TLS allows: the handshake message spans both.
type fragConn struct {
	net.Conn
	done bool
}

func (f *fragConn) Write(b []byte) (int, error) {
	if f.done || len(b) < 5 || b[0] != 0x16 {
		return f.Conn.Write(b)
	}
	f.done = true
	n := int(b[3])<<8 | int(b[4])
	if len(b) != 5+n || n <= 10 {
		return f.Conn.Write(b)
	}
	const k = 10
	out := append([]byte{0x16, b[1], b[2], 0, k}, b[5:5+k]...)
	out = append(out, 0x16, b[1], b[2], byte((n-k)>>8), byte(n-k))
	out = append(out, b[5+k:]...)
	if _, err := f.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// The SNI check must hold for a ClientHello split over two TLS records. peekSNI
// parses only the first record: crypto/tls then fails before GetConfigForClient,
// name stays "", seen is true, and connect lets "" through.
func TestServeFragmentedClientHello(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "sni=%s", r.TLS.ServerName)
	}))
	defer srv.Close()
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	write(t, c, connectReq("allowed.test", srvPort(t, srv)))
	if code, head := readHead(t, c); code != 200 {
		t.Fatalf("CONNECT answered %q", head)
	}
	tc := tls.Client(&fragConn{Conn: c}, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Errorf("TLS handshake with SNI evil.test through a CONNECT to allowed.test succeeded")
	}
	tc.Close()
	r := rec.wait(t, "the CONNECT", func(r Record) bool { return r.Method == http.MethodConnect })
	if r.Decision != "denied" {
		t.Errorf("record %+v, want denied", r)
	}
}

// The SNI check must not lapse when the ClientHello comes after (2 * time.Second).
func TestServeLateClientHello(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	write(t, c, connectReq("allowed.test", srvPort(t, srv)))
	if code, head := readHead(t, c); code != 200 {
		t.Fatalf("CONNECT answered %q", head)
	}
	time.Sleep((2 * time.Second) + 100*time.Millisecond)
	tc := tls.Client(c, &tls.Config{ServerName: "evil.test", InsecureSkipVerify: true})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Errorf("TLS handshake with SNI evil.test succeeded after waiting %v", (2 * time.Second))
	}
	tc.Close()
	if r := rec.wait(t, "the CONNECT", func(Record) bool { return true }); r.Decision != "denied" {
		t.Errorf("record %+v, want denied", r)
	}
}

// IdleTimeout must also end a plain HTTP request whose destination never answers.
// forward blocks in http.ReadResponse with no deadline: the client waits forever,
// the session's slot stays held, and Serve does not return even when the client
// closes.
func TestServePlainHTTPNoIdleTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ups []net.Conn
	defer func() { // before dialPx's cleanup waits for Serve
		ln.Close()
		mu.Lock()
		for _, c := range ups {
			c.Close()
		}
		mu.Unlock()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			ups = append(ups, c)
			mu.Unlock()
			go io.Copy(io.Discard, c) // reads the request, never answers
		}
	}()
	p, _ := newPx()
	p.IdleTimeout = 300 * time.Millisecond
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	hp := net.JoinHostPort("allowed.test", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	write(t, c, "GET http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("no answer and no close 2s into a request with IdleTimeout 300ms (read %d bytes); Open(s1) = %d", n, p.Open("s1"))
	}
}

// Under -race: forward's 101 path reads out.n while the goroutine that wrote the
// request through out is not waited for (upDone is not received).
func TestServeUpgradeRace(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
				_, _ = io.Copy(c, br)
			}()
		}
	}()
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	hp := net.JoinHostPort("allowed.test", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	write(t, c, "GET http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
	if code, head := readHead(t, c); code != 101 {
		t.Fatalf("answered %q, want 101", head)
	}
	write(t, c, "hello")
	buf := make([]byte, 5)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo after 101: %q, %v", buf, err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	r := rec.wait(t, "the upgrade", func(Record) bool { return true })
	if r.Decision != "allowed" || r.BytesOut <= 5 || r.BytesIn <= 5 {
		t.Errorf("record %+v", r)
	}
}

// hold must never let more than max connections of a session in at once. It
// takes the session's counter under p.mu but adds to it after unlocking; a drop to
// zero in between deletes the counter from p.conns, the add lands on the detached
// counter, and the next hold starts a fresh one at zero.
func TestHoldCapRace(t *testing.T) {
	t.Parallel()
	p := &Proxy{}
	var active, most atomic.Int64
	stop := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				release, ok := p.hold("s", 1)
				if !ok {
					continue
				}
				a := active.Add(1)
				for m := most.Load(); a > m && !most.CompareAndSwap(m, a); m = most.Load() {
				}
				active.Add(-1)
				release()
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > 1 {
		t.Errorf("%d connections held at once under a cap of 1", m)
	}
}

// Open must not count refused attempts: hold adds before it compares with max.
func TestOpenCountsRefused(t *testing.T) {
	t.Parallel()
	p := &Proxy{}
	release, ok := p.hold("s", 1)
	if !ok {
		t.Fatal("first hold refused")
	}
	defer release()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if r, ok := p.hold("s", 1); ok {
					r()
				}
			}
		}()
	}
	var most int64
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
		most = max(most, p.Open("s"))
	}
	close(stop)
	wg.Wait()
	if most > 1 {
		t.Errorf("Open(s) sampled at %d with 1 connection open", most)
	}
}

// pxRaw is a raw TCP destination on 127.0.0.1 that runs serve on each connection it
// accepts (n counts them from 1). stop closes the listener and every connection and
// waits for the serve goroutines; tests defer it so it runs before dialPx's cleanup
// waits for Serve, and t.Cleanup runs it too.
type pxRaw struct {
	port     int
	hp       func(host string) string
	accepted atomic.Int64
	stop     func()
}

func newRaw(t *testing.T, serve func(n int64, c net.Conn)) *pxRaw {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &pxRaw{port: ln.Addr().(*net.TCPAddr).Port}
	u.hp = func(host string) string { return net.JoinHostPort(host, strconv.Itoa(u.port)) }
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	var once sync.Once
	u.stop = func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(u.stop)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := u.accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(n, c)
			}()
		}
	}()
	return u
}

// rawAnswer writes a 200 with body msg and a Content-Length (and nothing about the
// connection's fate).
func rawAnswer(c net.Conn, msg string) error {
	_, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
	return err
}

// Expect: 100-continue through plain HTTP: the destination's 100 reaches the client
// before the client sends its body, then the final 200 with its body; the next
// request on the kept-alive connection gets its own answer, not a leftover.
func TestServeExpectContinue(t *testing.T) {
	t.Parallel()
	up := newRaw(t, func(n int64, c net.Conn) {
		br := bufio.NewReader(c)
		for i := 0; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.Header.Get("Expect") == "100-continue" {
				if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
					return
				}
			}
			body, err := io.ReadAll(req.Body)
			if err != nil {
				return
			}
			if rawAnswer(c, fmt.Sprintf("conn=%d req=%d %s %s body=%q", n, i, req.Method, req.URL.Path, body)) != nil {
				return
			}
		}
	})
	defer up.stop()
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	hp := up.hp("allowed.test")

	// The body goes only once the 100 is in: a proxy that held the 100 back (or
	// dropped Expect) leaves both sides waiting.
	write(t, c, "POST http://"+hp+"/upload HTTP/1.1\r\nHost: "+hp+"\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	code, head := readHead(t, c)
	if code != 100 {
		t.Fatalf("first answer %q, want 100 Continue", head)
	}
	write(t, c, "hello")
	br := bufio.NewReader(c)
	if code, body := readResp(t, c, br); code != 200 || body != `conn=1 req=0 POST /upload body="hello"` {
		t.Fatalf("after the 100: %d %q, want 200 %q", code, body, `conn=1 req=0 POST /upload body="hello"`)
	}
	write(t, c, "GET http://"+hp+"/two HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	if code, body := readResp(t, c, br); code != 200 || body != `conn=1 req=1 GET /two body=""` {
		t.Fatalf("the next request on the kept-alive connection: %d %q, want 200 %q", code, body, `conn=1 req=1 GET /two body=""`)
	}
	if n := up.accepted.Load(); n != 1 {
		t.Errorf("the destination accepted %d connections, want 1 (kept alive)", n)
	}
	// Nothing more is waiting on the client connection (no stray answer).
	_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if b, err := br.ReadByte(); err == nil {
		t.Errorf("a stray byte %q after the second answer", b)
	}
	_ = c.SetReadDeadline(time.Time{})
	r := rec.wait(t, "the POST", func(r Record) bool { return r.Method == http.MethodPost })
	if r.Decision != "allowed" || r.BytesOut < 5 || r.BytesIn < int64(len(`conn=1 req=0 POST /upload body="hello"`)) {
		t.Errorf("record %+v", r)
	}
}

// 101 through plain HTTP with the destination's first bytes in the same write as the
// 101: the client gets the 101, then those bytes, then bytes flow both ways.
func TestServeUpgradeFirstBytes(t *testing.T) {
	t.Parallel()
	up := newRaw(t, func(_ int64, c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\nHELLO"); err != nil {
			return
		}
		// Then echo, upper-cased, until the client half-closes.
		buf := make([]byte, 1024)
		for {
			n, err := br.Read(buf)
			if n > 0 {
				if _, werr := c.Write(bytes.ToUpper(buf[:n])); werr != nil {
					return
				}
			}
			if err != nil {
				_, _ = io.WriteString(c, "BYE")
				return
			}
		}
	})
	defer up.stop()
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	hp := up.hp("allowed.test")
	write(t, c, "GET http://"+hp+"/ws HTTP/1.1\r\nHost: "+hp+"\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
	if code, head := readHead(t, c); code != 101 {
		t.Fatalf("answered %q, want 101", head)
	}
	buf := make([]byte, 5)
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "HELLO" {
		t.Fatalf("the bytes sent with the 101: %q, %v; want HELLO", buf, err)
	}
	for _, s := range []string{"ping", "again"} {
		write(t, c, s)
		got := make([]byte, len(s))
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != strings.ToUpper(s) {
			t.Fatalf("after the 101, sent %q, got back %q, %v; want %q", s, got, err, strings.ToUpper(s))
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	rest, err := io.ReadAll(c)
	if err != nil || string(rest) != "BYE" {
		t.Errorf("after the client's half-close: %q, %v; want BYE then EOF", rest, err)
	}
	r := rec.wait(t, "the upgrade", func(Record) bool { return true })
	if r.Decision != "allowed" || r.BytesOut < int64(len("pingagain")) || r.BytesIn < int64(len("HELLOPINGAGAINBYE")) {
		t.Errorf("record %+v", r)
	}
	waitOpen(t, p, "s1", 0)
}

// A kept-alive destination connection that the server closed while idle (no
// Connection: close, it just closes after its answer): the client's next request
// goes on a fresh connection and gets a 200, not a 502.
func TestServeUpstreamClosedIdle(t *testing.T) {
	t.Parallel()
	up := newRaw(t, func(n int64, c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_ = rawAnswer(c, fmt.Sprintf("conn=%d %s", n, req.URL.Path))
		// and close at once, without saying so
	})
	defer up.stop()
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	br := bufio.NewReader(c)
	hp := up.hp("allowed.test")
	write(t, c, "GET http://"+hp+"/one HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	if code, body := readResp(t, c, br); code != 200 || body != "conn=1 /one" {
		t.Fatalf("first request: %d %q", code, body)
	}
	time.Sleep(200 * time.Millisecond) // the server's close reaches the proxy
	write(t, c, "GET http://"+hp+"/two HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	if code, body := readResp(t, c, br); code != 200 || body != "conn=2 /two" {
		t.Fatalf("second request after the destination closed its idle connection: %d %q, want 200 %q", code, body, "conn=2 /two")
	}
	if n := up.accepted.Load(); n != 2 {
		t.Errorf("the destination accepted %d connections, want 2", n)
	}
	if n := p.Open("s1"); n != 1 {
		t.Errorf("Open(s1) = %d, want 1", n)
	}
	for _, r := range rec.all() {
		if r.Decision != "allowed" {
			t.Errorf("record %+v", r)
		}
	}
}

// A destination whose response header never ends: the client gets a 502 and the
// proxy stops reading (it closes the destination connection) after a bounded amount,
// rather than buffering without end.
func TestServeUpstreamEndlessHeader(t *testing.T) {
	t.Parallel()
	type result struct {
		wrote int64
		err   error
		took  time.Duration
	}
	done := make(chan result, 1)
	line := []byte("X-A: " + strings.Repeat("a", 1017) + "\r\n") // 1 KiB
	up := newRaw(t, func(_ int64, c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			done <- result{err: err}
			return
		}
		start := time.Now()
		// A write that blocks this long means the proxy stopped reading but kept
		// the connection: the test reports it as a timeout.
		_ = c.SetWriteDeadline(start.Add(4 * time.Second))
		n, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		wrote := int64(n)
		for err == nil {
			n, err = c.Write(line)
			wrote += int64(n)
		}
		done <- result{wrote, err, time.Since(start)}
	})
	defer up.stop()
	p, rec := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	hp := up.hp("allowed.test")
	start := time.Now()
	write(t, c, "GET http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(4 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer %v into an endless response header: %v", time.Since(start), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || !strings.HasPrefix(string(body), "egress: ") {
		t.Errorf("answered %d %q, want 502", resp.StatusCode, body)
	}
	var ne net.Error
	select {
	case r := <-done:
		if errors.As(r.err, &ne) && ne.Timeout() {
			t.Errorf("the destination's writes blocked for %v (%d bytes written): the proxy stopped reading but kept the connection open", r.took, r.wrote)
		} else if r.took > 4*time.Second {
			t.Errorf("the destination could write for %v", r.took)
		}
		// What the proxy read is at most its 64 KiB header buffer; the rest sat in
		// the sockets' buffers.
		if r.wrote > 32<<20 {
			t.Errorf("the destination wrote %d bytes before the proxy stopped reading", r.wrote)
		}
		t.Logf("the destination wrote %d bytes in %v before %v", r.wrote, r.took, r.err)
	case <-time.After(5 * time.Second):
		t.Fatalf("the destination still writing 5s after the 502")
	}
	expectClosed(t, c, br, 2*time.Second)
	r := rec.wait(t, "the failure", func(Record) bool { return true })
	if r.Decision != "failed" {
		t.Errorf("record %+v, want failed", r)
	}
	waitOpen(t, p, "s1", 0)
}

// The session's cap counts connections from the moment Serve has them, before any
// request: three idle ones fill a cap of 3, a fourth is refused with 429, and closing
// an idle one frees its slot.
func TestServeMaxConnsIdle(t *testing.T) {
	t.Parallel()
	sink := newSink(t, false)
	p, rec := newPx()
	pol := listed(pxRules(t), 3)
	var idle []net.Conn
	for range 3 {
		idle = append(idle, dialPx(t, p, "s1", pol))
	}
	waitOpen(t, p, "s1", 3)

	c4 := dialPx(t, p, "s1", pol)
	write(t, c4, connectReq("allowed.test", sink.port))
	br := bufio.NewReader(c4)
	code, body := readResp(t, c4, br)
	if want := "egress: the session has 3 connections open, its limit (egress.maxConnections)\n"; code != 429 || body != want {
		t.Errorf("a 4th connection with 3 idle ones open: %d %q, want 429 %q", code, body, want)
	}
	expectClosed(t, c4, br, 3*time.Second)
	if n := sink.accepted.Load(); n != 0 {
		t.Errorf("the destination accepted %d connections of a refused CONNECT", n)
	}
	if n := p.Open("s1"); n != 3 {
		t.Errorf("Open(s1) = %d after the refusal, want 3", n)
	}
	r := rec.wait(t, "the refusal", func(r Record) bool { return r.Decision == "denied" })
	if r.Session != "s1" || r.Tenant != "t" || !strings.Contains(r.Reason, "its limit") {
		t.Errorf("record %+v", r)
	}

	idle[0].Close()
	waitOpen(t, p, "s1", 2)
	c5 := dialPx(t, p, "s1", pol)
	write(t, c5, connectReq("allowed.test", sink.port))
	if code, head := readHead(t, c5); code != 200 {
		t.Fatalf("a CONNECT after an idle connection closed: %q, want 200", head)
	}
	if n := p.Open("s1"); n != 3 {
		t.Errorf("Open(s1) = %d with 2 idle and a tunnel, want 3", n)
	}
}

// A request header dripped a byte at a time (20 KiB, its end split over four reads)
// is read in time: each byte is scanned once, and an end of header that arrives a
// byte at a time is seen.
func TestServeHeaderDrip(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "pad=%d", len(r.Header.Get("X-Pad")))
	}))
	defer srv.Close()
	p, _ := newPx()
	p.HeaderTimeout = 10 * time.Second
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	hp := net.JoinHostPort("allowed.test", strconv.Itoa(srvPort(t, srv)))
	head := "GET http://" + hp + "/ HTTP/1.1\r\nHost: " + hp + "\r\nX-Pad: "
	pad := 20<<10 - len(head) - 4
	req := head + strings.Repeat("a", pad) + "\r\n\r\n"
	start := time.Now()
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	for i := range len(req) {
		if _, err := c.Write([]byte{req[i]}); err != nil {
			t.Fatalf("write byte %d: %v", i, err)
		}
		// A byte every millisecond would take 20s, over HeaderTimeout: pause a
		// millisecond every 16 bytes, and between each of the last four.
		if i%16 == 15 || i >= len(req)-4 {
			time.Sleep(time.Millisecond)
		}
	}
	dripped := time.Since(start)
	br := bufio.NewReader(c)
	code, body := readResp(t, c, br)
	if want := fmt.Sprintf("pad=%d", pad); code != 200 || body != want {
		t.Fatalf("answered %d %q, want 200 %q", code, body, want)
	}
	if took := time.Since(start); took-dripped > 2*time.Second {
		t.Errorf("answered %v after the last byte (dripping took %v)", took-dripped, dripped)
	}
	t.Logf("dripped %d bytes in %v; answered %v after", len(req), dripped, time.Since(start)-dripped)
}

// waitHeader sees the end of a header whatever way the reads split it.
func TestWaitHeaderSplitEnd(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"\r\n\r\n", "\n\n", "\r\n\n"} {
		req := "GET http://allowed.test/ HTTP/1.1\nHost: allowed.test" + end + "BODY"
		for cut := 1; cut < len(req); cut++ {
			// The first read brings req[:cut], then a byte per read.
			r := &splitReader{b: []byte(req), first: cut}
			br := bufio.NewReaderSize(r, maxHeader)
			if err := waitHeader(br); err != nil {
				t.Errorf("end %q, first read %d bytes: %v", end, cut, err)
				continue
			}
			// It stops reading once the end is in (a byte at a time past the first read).
			if at := strings.Index(req, "BODY"); r.off > max(cut, at) {
				t.Errorf("end %q, first read %d bytes: read %d bytes, past the end of the header at %d", end, cut, r.off, at)
			}
		}
	}
	// Byte by byte, 60 KiB: linear, so well under a second even under -race.
	req := "GET http://allowed.test/ HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", 60<<10) + "\r\n\r\n"
	start := time.Now()
	if err := waitHeader(bufio.NewReaderSize(&splitReader{b: []byte(req), first: 1}, maxHeader)); err != nil {
		t.Fatalf("60 KiB byte by byte: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("60 KiB byte by byte took %v", took)
	}
	// One byte over the limit, byte by byte: errHeaderTooLarge, not a hang or EOF.
	big := "GET http://allowed.test/ HTTP/1.1\r\nX-Pad: " + strings.Repeat("a", maxHeader)
	if err := waitHeader(bufio.NewReaderSize(&splitReader{b: []byte(big), first: 1}, maxHeader)); !errors.Is(err, errHeaderTooLarge) {
		t.Errorf("a header over maxHeader: %v, want errHeaderTooLarge", err)
	}
}

// splitReader returns first bytes on its first Read, then one byte per Read.
type splitReader struct {
	b          []byte
	off, first int
}

func (s *splitReader) Read(p []byte) (int, error) {
	if s.off >= len(s.b) {
		return 0, io.EOF
	}
	n := 1
	if s.off == 0 {
		n = s.first
	}
	n = copy(p[:min(n, len(p))], s.b[s.off:])
	s.off += n
	return n, nil
}

// Interim answers reach the client as the destination sent them: 103 Early Hints
// with its Link header, 100 Continue, and a 101 before its switch. RFC 9110 §8.6: a
// 1xx response carries no Content-Length.
func TestServeInformationalHead(t *testing.T) {
	t.Parallel()
	up := newRaw(t, func(_ int64, c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.URL.Path == "/upgrade" {
			_, _ = io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
			_, _ = io.Copy(io.Discard, br)
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
		_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
		_, _ = io.ReadAll(req.Body)
		_ = rawAnswer(c, "done")
	})
	// (no defer up.stop(): the subtests run after this function returns)
	hp := up.hp("allowed.test")
	noLength := func(t *testing.T, head string) {
		t.Helper()
		if strings.Contains(strings.ToLower(head), "content-length") {
			t.Errorf("a 1xx answer with a Content-Length: %q", head)
		}
	}
	t.Run("103 and 100", func(t *testing.T) {
		t.Parallel()
		p, _ := newPx()
		c := dialPx(t, p, "s1", listed(pxRules(t), 0))
		write(t, c, "POST http://"+hp+"/ HTTP/1.1\r\nHost: "+hp+"\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
		code, head := readHead(t, c)
		if code != 103 || !strings.Contains(head, "\r\nLink: </style.css>; rel=preload\r\n") {
			t.Fatalf("first answer %q, want 103 with its Link", head)
		}
		noLength(t, head)
		code, head = readHead(t, c)
		if code != 100 {
			t.Fatalf("second answer %q, want 100", head)
		}
		noLength(t, head)
		write(t, c, "ok")
		if code, body := readResp(t, c, bufio.NewReader(c)); code != 200 || body != "done" {
			t.Fatalf("final answer %d %q, want 200 done", code, body)
		}
	})
	t.Run("101", func(t *testing.T) {
		t.Parallel()
		p, _ := newPx()
		c := dialPx(t, p, "s1", listed(pxRules(t), 0))
		write(t, c, "GET http://"+hp+"/upgrade HTTP/1.1\r\nHost: "+hp+"\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n")
		code, head := readHead(t, c)
		if code != 101 {
			t.Fatalf("answered %q, want 101", head)
		}
		noLength(t, head)
	})
}

// TestServePlainHTTPStreamsBody: a response body of known length goes to the client as
// the destination sends it (the proxy's large copy buffer must never wait to fill), and
// a large one arrives whole.
func TestServePlainHTTPStreamsBody(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = w.Write(big)
			return
		}
		w.Header().Set("Content-Length", "10")
		_, _ = io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		<-release // the rest only once the client has the first part
		_, _ = io.WriteString(w, "-last")
	}))
	defer srv.Close()
	defer close(release)
	hp := net.JoinHostPort("allowed.test", strconv.Itoa(srvPort(t, srv)))
	p, _ := newPx()
	c := dialPx(t, p, "s1", listed(pxRules(t), 0))
	br := bufio.NewReader(c)

	write(t, c, "GET http://"+hp+"/trickle HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first" {
		t.Fatalf("the first part of the body: %q, %v (held back until the body is whole?)", first, err)
	}
	release <- struct{}{}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "-last" {
		t.Fatalf("the rest: %q, %v", rest, err)
	}

	write(t, c, "GET http://"+hp+"/big HTTP/1.1\r\nHost: "+hp+"\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("1 MiB body: %d bytes, equal %v, %v", len(got), bytes.Equal(got, big), err)
	}
}
