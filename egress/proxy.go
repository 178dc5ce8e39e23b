package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a session's network policy lets out.
type Mode int

const (
	Off    Mode = iota // network: false — nothing
	Open               // network: true — any public address
	Listed             // network: {"allow", "deny"} — what Policy.Rules allows
)

// Policy is one session's egress policy, as the proxy applies it.
type Policy struct {
	Mode  Mode
	Rules Rules
	// MaxConns caps the session's concurrent connections; 0 means DefaultMaxConns.
	MaxConns int
}

// DefaultMaxConns is a session's cap on concurrent egress connections.
const DefaultMaxConns = 64

// Target is who a proxied connection belongs to.
type Target struct {
	Tenant, Session string
	// Policy returns the session's policy in force; it is asked once per request.
	Policy func(ctx context.Context) (Policy, error)
	// Secrets returns the session's secrets in force (nil: it has none); it is asked
	// when a CONNECT may need its TLS opened and when a request carries a placeholder.
	Secrets func(ctx context.Context) ([]Secret, error)
}

func (t Target) secrets(ctx context.Context) ([]Secret, error) {
	if t.Secrets == nil {
		return nil, nil
	}
	return t.Secrets(ctx)
}

// Record is one connection's outcome, for the audit stream and the metrics.
type Record struct {
	Tenant, Session string
	Host            string
	Port            int
	Method          string // CONNECT, or the plain HTTP request's method
	Decision        string // "allowed", "denied" or "failed"
	Reason          string // why, when not allowed
	BytesOut        int64  // from the workspace to the remote end
	BytesIn         int64  // from the remote end to the workspace
	Took            time.Duration
	// Secrets are the names of the secrets put into the connection's requests (or, when
	// refused, the one that was refused: "" for a placeholder not of this session),
	// never a value.
	Secrets []string
}

// Proxy is cws's side of the workspace's HTTP proxy: the agent hands it each
// connection a workspace process makes to the proxy, and it judges, resolves, dials
// and pipes. The workspace never resolves a name nor reaches an address itself.
type Proxy struct {
	Guard    *Guard
	Resolver *net.Resolver // nil: net.DefaultResolver
	// DialTimeout bounds a connect; IdleTimeout ends a connection that moved nothing
	// either way for that long; HeaderTimeout bounds reading a request's header.
	DialTimeout, IdleTimeout, HeaderTimeout time.Duration
	// Observe gets every decision (may be nil).
	Observe func(Record)
	// Self are cws's own listeners: never a destination, whatever the policy.
	Self []netip.AddrPort
	// Hosts pin names to addresses ahead of DNS (cws serve --egress-resolve), for
	// on-prem names without DNS and for tests. The addresses are checked as resolved ones.
	Hosts map[string][]netip.Addr
	// CA mints the certificates of the hosts whose TLS the proxy opens to put a
	// secret in (terminate.go); nil: a CONNECT to a secret's host is refused (503),
	// never piped.
	CA *CA
	// UpstreamRoots verify the upstreams of opened tunnels; nil: the system roots
	// (which honour SSL_CERT_FILE and SSL_CERT_DIR).
	UpstreamRoots *x509.CertPool

	mu    sync.Mutex
	conns map[string]int // open connections by session

	upOnce      sync.Once
	upTransport *http.Transport
}

func (p *Proxy) dialTimeout() time.Duration   { return orDur(p.DialTimeout, 10*time.Second) }
func (p *Proxy) idleTimeout() time.Duration   { return orDur(p.IdleTimeout, 5*time.Minute) }
func (p *Proxy) headerTimeout() time.Duration { return orDur(p.HeaderTimeout, 30*time.Second) }

func orDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Open returns the number of egress connections session has open.
func (p *Proxy) Open(session string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int64(p.conns[session])
}

// hold counts a connection of session against max; false when the session is at it.
func (p *Proxy) hold(session string, max int) (release func(), ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		p.conns = map[string]int{}
	}
	if p.conns[session] >= max {
		return nil, false
	}
	p.conns[session]++
	var once sync.Once
	return func() { once.Do(func() { p.drop(session) }) }, true
}

func (p *Proxy) drop(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns[session]--; p.conns[session] <= 0 {
		delete(p.conns, session)
	}
}

// maxConns is pol's cap on a session's concurrent connections.
func maxConns(pol Policy) int {
	if pol.MaxConns > 0 {
		return pol.MaxConns
	}
	return DefaultMaxConns
}

// maxHeader is the largest request header the proxy reads.
const maxHeader = 64 << 10

// Serve runs the proxy protocol on conn (HTTP CONNECT, or plain HTTP requests with an
// absolute URI) for t until conn ends. It owns conn.
func (p *Proxy) Serve(ctx context.Context, conn net.Conn, t Target) {
	defer conn.Close()
	// Every connection counts against the session's cap from the moment it is
	// accepted, whether or not it ever sends a request.
	pol, err := t.Policy(ctx)
	if err != nil {
		refuse(conn, http.StatusServiceUnavailable, "egress: the session's policy is unavailable: "+err.Error())
		return
	}
	release, ok := p.hold(t.Session, maxConns(pol))
	if !ok {
		p.deny(conn, Record{Tenant: t.Tenant, Session: t.Session}, http.StatusTooManyRequests,
			fmt.Sprintf("egress: the session has %d connections open, its limit (egress.maxConnections)", maxConns(pol)))
		return
	}
	defer release()
	br := bufio.NewReaderSize(conn, maxHeader)
	first := true
	var up *upstream
	defer func() {
		if up != nil {
			up.close()
		}
	}()
	for {
		_ = conn.SetReadDeadline(time.Now().Add(p.headerTimeout()))
		hdr, err := peekHeader(br)
		if err != nil {
			if first && !errors.Is(err, io.EOF) {
				status := http.StatusBadRequest
				if errors.Is(err, errHeaderTooLarge) {
					status = http.StatusRequestHeaderFieldsTooLarge
				}
				refuse(conn, status, "egress: "+err.Error())
			}
			return
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			refuse(conn, http.StatusBadRequest, "egress: malformed request: "+err.Error())
			return
		}
		_ = conn.SetReadDeadline(time.Time{})
		first = false
		pol, err = t.Policy(ctx) // the policy in force now, for each request
		if err != nil {
			refuse(conn, http.StatusServiceUnavailable, "egress: the session's policy is unavailable: "+err.Error())
			return
		}
		rec := Record{Tenant: t.Tenant, Session: t.Session, Method: req.Method}
		host, port, err := target(req, hdr)
		rec.Host, rec.Port = host, port
		if err != nil {
			p.deny(conn, rec, http.StatusForbidden, err.Error())
			return
		}
		if req.Method == http.MethodConnect {
			if t.Secrets != nil {
				secs, err := t.Secrets(ctx)
				if err != nil {
					p.deny(conn, rec, http.StatusServiceUnavailable, "egress: the session's secrets are unavailable: "+err.Error())
					return
				}
				if anyFor(secs, host, port) {
					if p.CA == nil { // fail closed: never pipe a placeholder to a secret's host
						p.deny(conn, rec, http.StatusServiceUnavailable, "egress: the secrets of "+host+" can't be put in: cws's egress CA is unavailable (see its log)")
						return
					}
					p.terminate(ctx, conn, br, rec, t)
					return
				}
			}
			p.connect(ctx, conn, br, rec, pol)
			return
		}
		if hasPlaceholder(req.Header, req.RequestURI) {
			secs, err := t.secrets(ctx)
			if err == nil {
				rec.Secrets, err = injectPlain(ctx, req, host, port, secs)
			}
			if err != nil {
				rf := asRefusal(err)
				rec.Secrets = rf.names()
				p.deny(conn, rec, rf.status, rf.reason)
				return
			}
		}
		var keep bool
		keep, up = p.forward(ctx, conn, br, req, rec, pol, up)
		if !keep {
			return
		}
	}
}

// errHeaderTooLarge: a request header over maxHeader.
var errHeaderTooLarge = errors.New("request header too large")

// peekHeader returns the request's header lines (request line first) without
// consuming them: http.ReadRequest drops the Host header of an absolute-URI request,
// and the proxy compares it with the target.
func peekHeader(br *bufio.Reader) (textproto.MIMEHeader, error) {
	if err := waitHeader(br); err != nil {
		return nil, err
	}
	b, _ := br.Peek(br.Buffered())
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(b[:headerEnd(b)])))
	if _, err := tp.ReadLine(); err != nil {
		return nil, err
	}
	return tp.ReadMIMEHeader()
}

// waitHeader waits until br holds a whole header block (through its blank line), at
// most maxHeader bytes (errHeaderTooLarge), scanning each byte once.
func waitHeader(br *bufio.Reader) error {
	scanned := 0
	for {
		n := br.Buffered()
		if n > 0 {
			b, _ := br.Peek(n)
			from := max(0, scanned-3)
			if headerEnd(b[from:]) >= 0 { // from overlaps a terminator split across reads
				return nil
			}
			scanned = n
			if n >= maxHeader {
				return errHeaderTooLarge
			}
		}
		// Wait for more: Peek reads until it has n+1 bytes or fails.
		if _, err := br.Peek(n + 1); err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return errHeaderTooLarge
			}
			if n > 0 && errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
}

// headerEnd is the length of the header block at the start of b (through its blank
// line, CRLF or bare LF), or -1 while it is incomplete.
func headerEnd(b []byte) int {
	crlf, lf := bytes.Index(b, []byte("\r\n\r\n")), bytes.Index(b, []byte("\n\n"))
	switch {
	case crlf >= 0 && (lf < 0 || crlf+2 <= lf):
		return crlf + 4
	case lf >= 0:
		return lf + 2
	}
	return -1
}

// target is the host and port a request goes to, checked against its Host header.
func target(req *http.Request, hdr textproto.MIMEHeader) (string, int, error) {
	authority := req.Host
	defPort := 80
	if req.Method == http.MethodConnect {
		authority, defPort = req.RequestURI, 443
	} else if req.URL.IsAbs() {
		if req.URL.Scheme != "http" {
			return "", 0, fmt.Errorf("egress: scheme %q is not proxied; use http:// or CONNECT", req.URL.Scheme)
		}
		authority = req.URL.Host
	}
	host, port, err := splitAuthority(authority, defPort)
	if err != nil {
		return "", 0, err
	}
	if h := hdr.Get("Host"); h != "" {
		hh, hp, err := splitAuthority(h, defPort)
		if err != nil || !strings.EqualFold(hh, host) || (hp != port && req.Method != http.MethodConnect) {
			return host, port, fmt.Errorf("egress: Host header %q differs from the request's target %s", h, net.JoinHostPort(host, strconv.Itoa(port)))
		}
	}
	return host, port, nil
}

// splitAuthority splits host[:port]; a missing port is def.
func splitAuthority(a string, def int) (string, int, error) {
	if a == "" {
		return "", 0, errors.New("egress: the request names no host")
	}
	host, ps, err := net.SplitHostPort(a)
	if err != nil {
		host, ps = strings.Trim(a, "[]"), strconv.Itoa(def)
	}
	port, perr := strconv.Atoi(ps)
	if perr != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("egress: invalid port in %q", a)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", 0, fmt.Errorf("egress: invalid host in %q", a)
	}
	return host, port, nil
}

// judge decides host:port under pol and returns the addresses to dial.
func (p *Proxy) judge(ctx context.Context, host string, port int, pol Policy) ([]netip.Addr, error) {
	if pol.Mode == Off {
		return nil, errors.New("egress: this session has no network (its policy's network is false)")
	}
	hp := net.JoinHostPort(host, strconv.Itoa(port))
	ip, literal := netip.ParseAddr(host)
	if pol.Mode == Listed {
		if ok, rule := pol.Rules.Allows(host, port); !ok {
			return nil, fmt.Errorf("egress: %s", rule)
		}
	}
	var addrs []netip.Addr
	if literal == nil {
		addrs = []netip.Addr{ip.Unmap()}
	} else if pinned, ok := p.Hosts[host]; ok {
		addrs = pinned
	} else {
		r := p.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		rctx, cancel := context.WithTimeout(ctx, p.dialTimeout())
		found, err := r.LookupNetIP(rctx, "ip", host)
		cancel()
		if err != nil || len(found) == 0 {
			return nil, fmt.Errorf("egress: %s does not resolve", host)
		}
		addrs = found
	}
	var ok []netip.Addr
	var why error
	for _, a := range addrs {
		a = a.Unmap()
		if err := p.Guard.Check(a); err != nil {
			why = fmt.Errorf("egress: %s resolves to %v", hp, err)
			if literal == nil {
				why = fmt.Errorf("egress: %v", err)
			}
			continue
		}
		if p.self(a, port) {
			why = fmt.Errorf("egress: %s is cws itself", netip.AddrPortFrom(a, uint16(port)))
			continue
		}
		if pol.Mode == Listed {
			if denied, rule := pol.Rules.DeniesIP(a, port); denied {
				why = fmt.Errorf("egress: %s (%s): %s", hp, a, rule)
				continue
			}
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		return nil, why
	}
	return ok, nil
}

// self reports whether a:port is one of cws's own listeners.
func (p *Proxy) self(a netip.Addr, port int) bool {
	for _, s := range p.Self {
		if s.Port() == uint16(port) && (s.Addr() == a || a.IsLoopback() && s.Addr().IsLoopback()) {
			return true
		}
	}
	return false
}

// dial connects to the first of addrs that answers.
func (p *Proxy) dial(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: p.dialTimeout()}
	var err error
	for _, a := range addrs {
		var c net.Conn
		if c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String()); err == nil {
			return c, nil
		}
	}
	return nil, err
}

func (p *Proxy) observe(r Record) {
	if p.Observe != nil {
		p.Observe(r)
	}
}

func (p *Proxy) deny(conn net.Conn, rec Record, status int, reason string) {
	rec.Decision, rec.Reason = "denied", reason
	if status >= 500 {
		rec.Decision = "failed"
	}
	p.observe(rec)
	refuse(conn, status, reason)
}

// Refuse answers a proxy request with status and a one-line reason; the caller then
// closes conn.
func Refuse(conn net.Conn, status int, reason string) { refuse(conn, status, reason) }

// refuse answers a proxy request with status and a one-line reason, and ends it.
func refuse(conn net.Conn, status int, reason string) {
	body := reason + "\n"
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\nProxy-Connection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	// Read what the client sent before the caller closes: a close with unread data
	// resets the connection, and the client may lose the answer.
	closeWrite(conn)
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 64<<10))
}

// connect serves a CONNECT: judge, dial, 200, then pipe.
func (p *Proxy) connect(ctx context.Context, conn net.Conn, br *bufio.Reader, rec Record, pol Policy) {
	start := time.Now()
	addrs, err := p.judge(ctx, rec.Host, rec.Port, pol)
	if err != nil {
		p.deny(conn, rec, http.StatusForbidden, err.Error())
		return
	}
	up, err := p.dial(ctx, addrs, rec.Port)
	if err != nil {
		p.deny(conn, rec, http.StatusBadGateway, fmt.Sprintf("egress: connect %s: %v", net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port)), err))
		return
	}
	defer up.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// What the client sends goes on only once its first bytes are judged: a TLS
	// ClientHello must name the CONNECT host (or nothing). What the server sends flows
	// at once, so a protocol whose server speaks first (ssh) works.
	var refused string
	gate := func() bool {
		if err := checkHello(br, rec.Host); err != nil {
			refused = err.Error()
			return false
		}
		return true
	}
	rec.BytesOut, rec.BytesIn = p.pipe(conn, br, up, nil, gate)
	rec.Decision, rec.Took = "allowed", time.Since(start)
	if refused != "" {
		rec.Decision, rec.Reason = "denied", refused
	}
	p.observe(rec)
}

// forward serves one plain HTTP request (absolute URI) on up, dialling a new upstream
// when the target changed. It reports whether the client connection may carry another.
func (p *Proxy) forward(ctx context.Context, conn net.Conn, br *bufio.Reader, req *http.Request, rec Record, pol Policy, up *upstream) (bool, *upstream) {
	start := time.Now()
	key := net.JoinHostPort(rec.Host, strconv.Itoa(rec.Port))
	if up != nil && (up.key != key || !up.alive()) {
		up.close() // another target, or closed by the server since the last exchange
		up = nil
	}
	if up == nil {
		addrs, err := p.judge(ctx, rec.Host, rec.Port, pol)
		if err != nil {
			p.deny(conn, rec, http.StatusForbidden, err.Error())
			return false, nil
		}
		c, err := p.dial(ctx, addrs, rec.Port)
		if err != nil {
			p.deny(conn, rec, http.StatusBadGateway, fmt.Sprintf("egress: connect %s: %v", key, err))
			return false, nil
		}
		up = &upstream{key: key, conn: c}
		up.br = bufio.NewReaderSize(touchReader{c, &up.last}, maxHeader)
	} else {
		// Same target, but the policy may have changed: judge it again (no dial).
		if pol.Mode == Off {
			p.deny(conn, rec, http.StatusForbidden, "egress: this session has no network (its policy's network is false)")
			return false, up
		}
		if pol.Mode == Listed {
			if ok, rule := pol.Rules.Allows(rec.Host, rec.Port); !ok {
				p.deny(conn, rec, http.StatusForbidden, "egress: "+rule)
				return false, up
			}
		}
	}
	up.used = true
	for _, h := range []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate"} {
		req.Header.Del(h)
	}
	req.RequestURI = ""
	// Nothing moving either way for IdleTimeout ends the exchange (a request body that
	// stalls, an upstream that never answers).
	last := &up.last
	last.Store(time.Now().UnixNano())
	stop := p.watchdog(last, conn, up.conn)
	defer stop()
	out := &counter{w: up.conn, last: last}
	upDone := make(chan error, 1)
	go func() { upDone <- req.Write(out) }()
	in := &counter{w: conn, last: last}
	var resp *http.Response
	for {
		// The response's header, at most maxHeader bytes; informational answers
		// (100 Continue, 103) go to the client as they come.
		err := waitHeader(up.br)
		if err == nil {
			resp, err = http.ReadResponse(up.br, req)
		}
		if err != nil {
			stop()
			up.conn.Close() // ends the request's write, if it is stuck
			<-upDone
			p.deny(conn, rec, http.StatusBadGateway, fmt.Sprintf("egress: %s answered no HTTP response: %v", key, err))
			return false, up
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			// Its head as it came (resp.Write would add a Content-Length a 1xx must not have).
			if _, err := in.Write(head(resp)); err != nil {
				return false, up
			}
			continue
		}
		break
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		uerr := <-upDone
		if err := resp.Write(in); err != nil || uerr != nil {
			return false, up
		}
		stop()
		o, i := p.pipe(conn, br, up.conn, up.br, nil)
		rec.BytesOut, rec.BytesIn = out.n.Load()+o, in.n.Load()+i
		rec.Decision, rec.Took = "allowed", time.Since(start)
		p.observe(rec)
		return false, up
	}
	var werr error
	if sized(req, resp) {
		werr = writeSized(conn, in, resp, up)
	} else {
		werr = resp.Write(in)
		resp.Body.Close()
	}
	uerr := <-upDone
	rec.BytesOut, rec.BytesIn = out.n.Load(), in.n.Load()
	rec.Decision, rec.Took = "allowed", time.Since(start)
	p.observe(rec)
	if werr != nil || uerr != nil || req.Close || resp.Close {
		return false, up
	}
	return true, up
}

// sized reports whether resp is an HTTP/1.1 answer with a body of known length, as
// plain as writeSized passes on: no transfer coding, a body its status and req allow.
func sized(req *http.Request, resp *http.Response) bool {
	return resp.ProtoMajor == 1 && resp.ProtoMinor == 1 && resp.ContentLength > 0 &&
		len(resp.TransferEncoding) == 0 && len(resp.Trailer) == 0 && req.Method != http.MethodHead &&
		resp.StatusCode >= 200 && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified &&
		resp.Header.Get("Content-Length") == strconv.FormatInt(resp.ContentLength, 10)
}

// writeSized sends a sized response to the client: its head as it came, then its body
// straight from the upstream connection (relay: spliced where both are sockets). resp's
// Body is left unread and must not be closed (closing would read the body again).
func writeSized(conn net.Conn, in *counter, resp *http.Response, up *upstream) error {
	if resp.Close && resp.Header.Get("Connection") == "" {
		// http.ReadResponse took the origin's "Connection: close" out of the header
		// and set Close: the client must hear it, or it would send its next request
		// on a connection about to end (resp.Write puts it back the same way).
		resp.Header.Set("Connection", "close")
	}
	if _, err := in.Write(head(resp)); err != nil {
		return err
	}
	n, err := relay(conn, up.br, up.conn, resp.ContentLength, &up.last)
	in.n.Add(n)
	return err
}

// head is resp's status line and header as they came.
func head(resp *http.Response) []byte {
	var h bytes.Buffer
	code := strconv.Itoa(resp.StatusCode)
	reason := strings.TrimPrefix(strings.TrimPrefix(resp.Status, code), " ")
	fmt.Fprintf(&h, "HTTP/%d.%d %s %s\r\n", resp.ProtoMajor, resp.ProtoMinor, code, reason)
	_ = resp.Header.Write(&h)
	h.WriteString("\r\n")
	return h.Bytes()
}

// touchReader records when bytes last came through it.
type touchReader struct {
	r    io.Reader
	last *atomic.Int64
}

func (t touchReader) Read(b []byte) (int, error) {
	n, err := t.r.Read(b)
	if n > 0 {
		t.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// upstream is a plain-HTTP connection to one target, kept across requests.
type upstream struct {
	key  string
	conn net.Conn
	br   *bufio.Reader // reads conn, touching last
	last atomic.Int64  // UnixNano of the latest byte of the exchange under way
	used bool          // it carried an exchange before this one
}

func (u *upstream) close() { u.conn.Close() }

// alive reports whether a kept-alive upstream is still open and quiet: a server that
// closed it (its idle timeout) or sent something unasked can't take the next request.
func (u *upstream) alive() bool {
	if u.br.Buffered() > 0 {
		return false
	}
	_ = u.conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := u.br.Peek(1)
	_ = u.conn.SetReadDeadline(time.Time{})
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// counter counts what is written through it, and when.
type counter struct {
	w    io.Writer
	n    atomic.Int64
	last *atomic.Int64
}

func (c *counter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	if n > 0 && c.last != nil {
		c.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// ReadFrom is what net/http's body copy uses when it can (a body of known length): it
// moves what each read gives at once, as io.Copy does, but in reads of up to 256 KiB
// instead of 32 KiB, so a large body crosses the agent connection in a few large
// frames, not thousands of small ones.
func (c *counter) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			w, werr := c.Write(buf[:k])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// pipe copies both ways until both are done or nothing moved for IdleTimeout; it
// returns the bytes sent out (client → remote) and in. br reads client; from, if not
// nil, reads remote. gate, if not nil, runs before anything goes out; false ends the
// connection.
func (p *Proxy) pipe(client net.Conn, br *bufio.Reader, remote net.Conn, from *bufio.Reader, gate func() bool) (out, in int64) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	stop := p.watchdog(&last, client, remote)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if gate != nil && !gate() {
			client.Close()
			remote.Close()
			return
		}
		out, _ = relay(remote, br, client, -1, &last)
		closeWrite(remote)
	}()
	in, _ = relay(client, from, remote, -1, &last)
	closeWrite(client)
	wg.Wait()
	return out, in
}

// watchdog closes conns once last (UnixNano of the latest byte moved) is IdleTimeout
// old; the returned func stops it.
func (p *Proxy) watchdog(last *atomic.Int64, conns ...net.Conn) func() {
	idle := p.idleTimeout()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(min(idle/4, time.Second))
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if time.Since(time.Unix(0, last.Load())) > idle {
					for _, c := range conns {
						c.Close()
					}
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop) }) }
}

// closeWrite half-closes c where it can (TCP, a yamux stream's Close), else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// maxHello bounds the ClientHello the proxy reads (its records, together).
const maxHello = 64 << 10

// checkHello reads the client's first bytes without consuming them. If they are a TLS
// handshake, the ClientHello (over as many records as it takes) must name host, or no
// name at all; one that can't be read is refused. Anything else passes.
func checkHello(br *bufio.Reader, host string) error {
	b, err := br.Peek(1)
	if err != nil || b[0] != 0x16 { // not a TLS handshake record (or nothing at all)
		return nil
	}
	var name string
	called := false
	off := 0
	var hs []byte // the handshake messages gathered from the records
	for len(hs) < 4 || len(hs) < 4+hsLen(hs) {
		hdr, err := br.Peek(off + 5)
		if err != nil {
			return fmt.Errorf("egress: an incomplete TLS ClientHello")
		}
		h := hdr[off:]
		n := int(h[3])<<8 | int(h[4])
		if h[0] != 0x16 || off+5+n > maxHello {
			return fmt.Errorf("egress: a TLS ClientHello that can't be read")
		}
		rec, err := br.Peek(off + 5 + n)
		if err != nil {
			return fmt.Errorf("egress: an incomplete TLS ClientHello")
		}
		hs = append(hs, rec[off+5:]...)
		off += 5 + n
	}
	// One record with the whole message, for crypto/tls to parse.
	msgLen := 4 + hsLen(hs)
	if msgLen > maxHello {
		return fmt.Errorf("egress: a TLS ClientHello that can't be read")
	}
	one := append([]byte{0x16, 3, 1, byte(msgLen >> 8), byte(msgLen)}, hs[:msgLen]...)
	_ = tls.Server(helloConn{r: bytes.NewReader(one)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, called = h.ServerName, true
			return nil, errors.New("read")
		},
	}).Handshake()
	if !called {
		return fmt.Errorf("egress: a TLS ClientHello that can't be read")
	}
	if name != "" && !strings.EqualFold(strings.TrimSuffix(name, "."), host) {
		return fmt.Errorf("egress: TLS server name %q differs from the CONNECT host %s", name, host)
	}
	return nil
}

// hsLen is the length of the handshake message whose 4-byte header starts hs.
func hsLen(hs []byte) int { return int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3]) }

// helloConn feeds a ClientHello to crypto/tls and swallows its answer.
type helloConn struct {
	net.Conn
	r io.Reader
}

func (c helloConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c helloConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c helloConn) Close() error                     { return nil }
func (c helloConn) SetDeadline(time.Time) error      { return nil }
func (c helloConn) SetReadDeadline(time.Time) error  { return nil }
func (c helloConn) SetWriteDeadline(time.Time) error { return nil }
func (c helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
