package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"time"

	"github.com/cwsdev/cws/egress"
	"github.com/cwsdev/cws/internal/bench"
	"github.com/cwsdev/cws/secrets"
)

func init() {
	sections = append(sections, section{
		Name:  "secrets",
		Order: 97,
		Doc:   "an HTTPS request with a secret put in by the egress proxy (TLS opened, leaf cached) vs the same request piped, on new and reused connections; leaves minted",
		Run:   benchSecrets,
	})
	goals = append(goals,
		goal{Order: 84, Figure: "secrets: added latency of a request whose secret is put in, new connection, p50", Row: "secrets: GET with a secret, new connection", Anchor: "secrets: GET piped, new connection", MaxOver: 2 * time.Millisecond},
		goal{Order: 85, Figure: "secrets: added latency of a request whose secret is put in, reused connection, p50", Row: "secrets: GET with a secret, reused connection", Anchor: "secrets: GET piped, reused connection", MaxOver: 500 * time.Microsecond},
	)
}

// benchSecrets runs the egress proxy in this process (as cws serve does), serving one
// session with one secret for secret.example.com; a local TLS server answers both
// names (httptest's certificate is for *.example.com).
// Each request carries the placeholder in its Authorization header; piped, it goes to
// plain.example.com, whose TLS the proxy does not open (and which has no secret).
func benchSecrets(ctx context.Context, e *env) ([]bench.Row, error) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	upRoots := x509.NewCertPool()
	upRoots.AddCert(srv.Certificate())
	ca, _, err := egress.NewCA(time.Now())
	if err != nil {
		return nil, err
	}
	loop := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	p := &egress.Proxy{Guard: egress.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, nil), CA: ca, UpstreamRoots: upRoots,
		Hosts: map[string][]netip.Addr{"secret.example.com": loop, "plain.example.com": loop}}
	hosts, _ := egress.ParseRules([]string{"secret.example.com"}, nil)
	ph := secrets.NewPlaceholder("TOKEN")
	sec := egress.Secret{Env: "TOKEN", Name: "token", Placeholder: ph, Hosts: hosts,
		Value: func(context.Context) (string, error) { return "value-of-the-token", nil }}
	target := egress.Target{Tenant: "bench", Session: "s1",
		Policy: func(context.Context) (egress.Policy, error) {
			return egress.Policy{Mode: egress.Open, MaxConns: 1 << 20}, nil
		},
		Secrets: func(context.Context) ([]egress.Secret, error) { return []egress.Secret{sec}, nil }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.Serve(context.Background(), c, target)
		}
	}()
	// The client trusts both the CA (the opened tunnel's leaf) and the server (piped).
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	roots.AddCert(srv.Certificate())
	proxyURL, _ := url.Parse("http://" + ln.Addr().String())
	client := func(reuse bool) *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL),
			TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: !reuse}}
	}
	get := func(c *http.Client, host string) func(context.Context) error {
		u := fmt.Sprintf("https://%s:%d/", host, port)
		return func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			req.Header.Set("Authorization", "Bearer "+ph)
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("%s: %s", u, resp.Status)
			}
			return nil
		}
	}
	var rows []bench.Row
	n := e.iterations(1000)
	for _, m := range []struct {
		name  string
		reuse bool
		host  string
	}{
		{"secrets: GET piped, new connection", false, "plain.example.com"},
		{"secrets: GET with a secret, new connection", false, "secret.example.com"},
		{"secrets: GET piped, reused connection", true, "plain.example.com"},
		{"secrets: GET with a secret, reused connection", true, "secret.example.com"},
	} {
		c := client(m.reuse)
		samples, err := bench.Run(ctx, 20, n, get(c, m.host))
		c.CloseIdleConnections()
		if err != nil {
			return rows, fmt.Errorf("%s: %w", m.name, err)
		}
		r := bench.Summarize(m.name, samples)
		r.Note = "in process, loopback TLS server"
		if m.host == "secret.example.com" {
			r.Note += fmt.Sprintf("; leaves minted so far: %d", ca.Minted())
		}
		rows = append(rows, r)
	}
	return rows, nil
}
