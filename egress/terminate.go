package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The TLS of a host a session's secret may go to is opened by the proxy: it shows the
// workspace a leaf of the deployment's CA (which only sandboxes with secrets trust),
// reads each request with net/http's server, puts the secret's value where its
// placeholder stands (inject.go), and sends the request on with net/http's transport,
// which verifies the upstream against the system roots (SSL_CERT_FILE honoured) and
// speaks HTTP/2 to it where it offers it. Every other host keeps the piped path.

// terminate serves a CONNECT to a secret's host: judge, 200, then TLS with the
// workspace and one exchange after another until it ends.
func (p *Proxy) terminate(ctx context.Context, conn net.Conn, br *bufio.Reader, rec Record, t Target) {
	start := time.Now()
	pol, err := t.Policy(ctx)
	if err != nil {
		p.deny(conn, rec, http.StatusServiceUnavailable, "egress: the session's policy is unavailable: "+err.Error())
		return
	}
	addrs, err := p.judge(ctx, rec.Host, rec.Port, pol)
	if err != nil {
		p.deny(conn, rec, http.StatusForbidden, err.Error())
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var out, in atomic.Int64
	cc := &countConn{Conn: conn, r: br, out: &out, in: &in}
	tconn := tls.Server(cc, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if h.ServerName != "" && !strings.EqualFold(strings.TrimSuffix(h.ServerName, "."), rec.Host) {
				return nil, fmt.Errorf("TLS server name %q differs from the CONNECT host %s", h.ServerName, rec.Host)
			}
			return p.CA.Leaf(rec.Host)
		},
	})
	var mu sync.Mutex
	var injected []string
	h := &exchange{p: p, t: t, rec: rec, addrs: addrs, note: func(names []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, n := range names {
			if !slices.Contains(injected, n) {
				injected = append(injected, n)
			}
		}
	}}
	done := make(chan struct{})
	var once sync.Once
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: p.headerTimeout(),
		IdleTimeout:       p.idleTimeout(),
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				once.Do(func() { close(done) })
			}
		},
	}
	_ = srv.Serve(&oneConn{conn: tconn, done: done})
	<-done
	rec.BytesOut, rec.BytesIn = out.Load(), in.Load()
	rec.Decision, rec.Took = "allowed", time.Since(start)
	mu.Lock()
	rec.Secrets = injected
	mu.Unlock()
	p.observe(rec)
}

// exchange serves the requests of one opened tunnel.
type exchange struct {
	p    *Proxy
	t    Target
	rec  Record // the CONNECT's: host and port
	note func(secrets []string)

	mu    sync.Mutex
	addrs []netip.Addr // resolved and checked by the tunnel's first request
}

// judge decides the tunnel's target under pol: the first request resolves and checks
// its addresses; later ones judge the name again under the policy in force, without
// resolving (as a plain-HTTP connection kept alive does).
func (x *exchange) judge(ctx context.Context, pol Policy) ([]netip.Addr, error) {
	x.mu.Lock()
	addrs := x.addrs
	x.mu.Unlock()
	if addrs == nil {
		addrs, err := x.p.judge(ctx, x.rec.Host, x.rec.Port, pol)
		if err == nil {
			x.mu.Lock()
			x.addrs = addrs
			x.mu.Unlock()
		}
		return addrs, err
	}
	switch pol.Mode {
	case Off:
		return nil, errors.New("egress: this session has no network (its policy's network is false)")
	case Listed:
		if ok, rule := pol.Rules.Allows(x.rec.Host, x.rec.Port); !ok {
			return nil, errors.New("egress: " + rule)
		}
	}
	return addrs, nil
}

// dialKey carries the judged addresses of a request to the transport's dial.
type dialKey struct{}

func (x *exchange) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	rec := x.rec
	rec.Method = r.Method
	fail := func(status int, reason string) {
		rec.Decision, rec.Reason = "denied", reason
		if status >= 500 {
			rec.Decision = "failed"
		}
		x.p.observe(rec)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, reason+"\n")
	}
	if h, port, err := splitAuthority(r.Host, x.rec.Port); err != nil || !strings.EqualFold(h, x.rec.Host) || port != x.rec.Port {
		fail(http.StatusForbidden, fmt.Sprintf("egress: Host header %q differs from the CONNECT target %s", r.Host, net.JoinHostPort(x.rec.Host, strconv.Itoa(x.rec.Port))))
		return
	}
	// The policy and the secrets in force now, for each request.
	pol, err := x.t.Policy(ctx)
	if err != nil {
		fail(http.StatusServiceUnavailable, "egress: the session's policy is unavailable: "+err.Error())
		return
	}
	addrs, err := x.judge(ctx, pol)
	if err != nil {
		fail(http.StatusForbidden, err.Error())
		return
	}
	var used []string
	if hasPlaceholder(r.Header, r.RequestURI) {
		secs, err := x.t.secrets(ctx)
		if err != nil {
			fail(http.StatusServiceUnavailable, "egress: the session's secrets are unavailable: "+err.Error())
			return
		}
		if used, err = injectRequest(ctx, r, x.rec.Host, x.rec.Port, secs); err != nil {
			rf := asRefusal(err)
			rec.Secrets = rf.names()
			fail(rf.status, rf.reason)
			return
		}
	}
	x.note(used)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = net.JoinHostPort(x.rec.Host, strconv.Itoa(x.rec.Port))
			pr.Out.Host = r.Host
		},
		Transport:     x.p.upstream(),
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			fail(http.StatusBadGateway, fmt.Sprintf("egress: %s: %v", x.rec.Host, scrub(err)))
		},
	}
	rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, dialKey{}, addrs)))
}

// scrub keeps an upstream error short and free of what the request carried (a
// *url.Error quotes the URL, never a header).
func scrub(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// upstream is the transport of opened tunnels, shared by every session so that
// connections to a host are reused; each request's addresses are judged before it
// (dialKey), and a new connection dials only those.
func (p *Proxy) upstream() *http.Transport {
	p.upOnce.Do(func() {
		d := &net.Dialer{Timeout: p.dialTimeout()}
		p.upTransport = &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				addrs, _ := ctx.Value(dialKey{}).([]netip.Addr)
				_, ps, _ := net.SplitHostPort(addr)
				port, _ := strconv.Atoi(ps)
				if len(addrs) == 0 {
					return nil, errors.New("no judged address")
				}
				var err error
				for _, a := range addrs {
					var c net.Conn
					if c, err = d.DialContext(ctx, network, netip.AddrPortFrom(a, uint16(port)).String()); err == nil {
						return c, nil
					}
				}
				return nil, err
			},
			TLSClientConfig:       &tls.Config{RootCAs: p.UpstreamRoots, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   16,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   p.dialTimeout(),
			ResponseHeaderTimeout: p.idleTimeout(),
		}
	})
	return p.upTransport
}

// oneConn is a listener of one connection: Accept hands it out once, then waits until
// it is done.
type oneConn struct {
	conn net.Conn
	once sync.Once
	done chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = l.conn })
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return l.conn.LocalAddr() }

// countConn reads through r (what the proxy already buffered) and counts each way:
// out is from the workspace.
type countConn struct {
	net.Conn
	r       io.Reader
	out, in *atomic.Int64
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.out.Add(int64(n))
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.in.Add(int64(n))
	return n, err
}
