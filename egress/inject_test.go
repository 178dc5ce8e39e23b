package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cwsdev/cws/secrets"
)

// seen is what an upstream received: each request's headers, URL and body.
type seen struct {
	mu   sync.Mutex
	reqs []string
}

func (s *seen) handler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s\n", r.Method, r.URL.RequestURI())
		_ = r.Header.Write(&b)
		b.Write(body)
		s.mu.Lock()
		s.reqs = append(s.reqs, b.String())
		s.mu.Unlock()
		fmt.Fprintf(w, "ok %s", r.Proto)
	}
}

func (s *seen) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.reqs, "\n---\n")
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// secretPx is a proxy with a CA, whose upstreams are verified against the test TLS
// server's certificate, serving one session (with secs) on a loopback listener; it
// returns the proxy's URL and a client that trusts the CA.
func secretPx(t *testing.T, p *Proxy, mode *atomic.Int32, secs func() []Secret) (*http.Client, *pxRecorder) {
	t.Helper()
	ca, _, err := NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p.CA = ca
	rec := &pxRecorder{}
	p.Observe = rec.observe
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	target := Target{Tenant: "acme", Session: "s1",
		Policy:  func(context.Context) (Policy, error) { return Policy{Mode: Mode(mode.Load())}, nil },
		Secrets: func(context.Context) ([]Secret, error) { return secs(), nil }}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.Serve(context.Background(), c, target)
		}
	}()
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	u, _ := url.Parse("http://" + ln.Addr().String())
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: roots}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, rec
}

// TestInjectSecrets: through an opened tunnel, the upstream gets the value where the
// placeholder was (a Bearer header, Basic auth), the workspace never does; a body is
// passed as it was; every other use of a placeholder is refused (another host, another
// session's, a secret that can't be opened) or passed unchanged (split, encoded)
// without the value; a rotation applies to the next request; one leaf is minted per
// host.
func TestInjectSecrets(t *testing.T) {
	up := &seen{}
	srv := httptest.NewUnstartedServer(up.handler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	plain := &seen{}
	psrv := httptest.NewServer(plain.handler())
	t.Cleanup(psrv.Close)
	port, pport := srvPort(t, srv), srvPort(t, psrv)

	p, _ := newPx()
	p.Hosts["example.com"] = pxAddrs("127.0.0.1")
	p.UpstreamRoots = x509.NewCertPool()
	p.UpstreamRoots.AddCert(srv.Certificate())
	var value atomic.Value
	value.Store("ghp_REALVALUE1")
	var broken atomic.Bool
	gh := Secret{Env: "GITHUB_TOKEN", Name: "gh", Placeholder: secrets.NewPlaceholder("GITHUB_TOKEN"),
		Hosts: mustRules(t, []string{"example.com"}, nil),
		Value: func(context.Context) (string, error) {
			if broken.Load() {
				return "", secrets.ErrKey
			}
			return value.Load().(string), nil
		}}
	npm := Secret{Env: "NPM_TOKEN", Name: "npm", Placeholder: secrets.NewPlaceholder("NPM_TOKEN"),
		Hosts: mustRules(t, []string{"registry.test"}, nil), Value: func(context.Context) (string, error) { return "npm_REALVALUE2", nil }}
	var mode atomic.Int32
	mode.Store(int32(Open))
	var npmPort atomic.Bool // npm's hosts name the plain server's port
	c, rec := secretPx(t, p, &mode, func() []Secret {
		n := npm
		if npmPort.Load() {
			n.Hosts = mustRules(t, []string{fmt.Sprintf("registry.test:%d", pport)}, nil)
		}
		return []Secret{gh, n}
	})
	secretURL := fmt.Sprintf("https://example.com:%d", port)

	do := func(t *testing.T, method, u string, h map[string]string, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, u, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("bearer", func(t *testing.T) {
		st, body := do(t, "GET", secretURL+"/user", map[string]string{"Authorization": "Bearer " + gh.Placeholder}, "")
		if st != 200 || !strings.HasPrefix(body, "ok HTTP/2") {
			t.Fatalf("%d %q, want 200 over HTTP/2 to the upstream", st, body)
		}
		if !strings.Contains(up.all(), "Authorization: Bearer ghp_REALVALUE1") || strings.Contains(up.all(), gh.Placeholder) {
			t.Errorf("the upstream got:\n%s", up.all())
		}
		c.Transport.(*http.Transport).CloseIdleConnections() // the tunnel's record comes when it ends
		r := rec.wait(t, "the tunnel's record", func(r Record) bool { return r.Decision == "allowed" && len(r.Secrets) > 0 })
		if r.Secrets[0] != "gh" || r.Host != "example.com" {
			t.Errorf("record %+v, want secret gh to example.com", r)
		}
	})
	t.Run("basic", func(t *testing.T) {
		st, _ := do(t, "GET", secretURL+"/repo.git/info/refs", map[string]string{
			"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+gh.Placeholder))}, "")
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:ghp_REALVALUE1"))
		if st != 200 || !strings.Contains(up.all(), want) {
			t.Errorf("%d; the upstream got:\n%s", st, up.all())
		}
	})
	t.Run("body passed unchanged", func(t *testing.T) {
		st, _ := do(t, "POST", secretURL+"/echo", nil, "token="+gh.Placeholder)
		if st != 200 || !strings.Contains(up.all(), "token="+gh.Placeholder) {
			t.Errorf("%d; the upstream got:\n%s", st, up.all())
		}
	})
	t.Run("rotation applies to the next request", func(t *testing.T) {
		value.Store("ghp_ROTATED3")
		defer value.Store("ghp_REALVALUE1")
		st, _ := do(t, "GET", secretURL+"/rotated", map[string]string{"Authorization": "Bearer " + gh.Placeholder}, "")
		if st != 200 || !strings.Contains(up.all(), "Bearer ghp_ROTATED3") {
			t.Errorf("%d; the upstream got:\n%s", st, up.all())
		}
	})

	refused := []struct {
		name, method, url string
		header            map[string]string
		status            int
		reason            string
	}{
		{"another host, plain HTTP", "GET", fmt.Sprintf("http://other.test:%d/", pport), map[string]string{"Authorization": "Bearer " + gh.Placeholder},
			403, "secret GITHUB_TOKEN (gh) may not be sent to other.test"},
		{"another secret's host", "GET", secretURL + "/", map[string]string{"X-Npm": npm.Placeholder},
			403, "secret NPM_TOKEN (npm) may not be sent to example.com"},
		{"another session's placeholder", "GET", secretURL + "/", map[string]string{"Authorization": "Bearer " + secrets.NewPlaceholder("GITHUB_TOKEN")},
			403, "a secret placeholder that is not this session's may not be sent (GITHUB_TOKEN)"},
		{"another session's, in Basic", "GET", secretURL + "/", map[string]string{"Authorization": "Basic " +
			base64.StdEncoding.EncodeToString([]byte("u:"+secrets.NewPlaceholder("GITHUB_TOKEN")))},
			403, "not this session's"},
		{"in the query", "GET", secretURL + "/?t=" + gh.Placeholder, nil, 403, "not in the URL's path or query"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			before, pbefore := up.count(), plain.count()
			st, body := do(t, tc.method, tc.url, tc.header, "")
			if st != tc.status || !strings.Contains(body, tc.reason) {
				t.Errorf("%d %q, want %d with %q", st, body, tc.status, tc.reason)
			}
			if up.count() != before || plain.count() != pbefore {
				t.Error("a refused request reached an upstream")
			}
			r := rec.wait(t, "the refusal", func(r Record) bool { return r.Decision == "denied" && strings.Contains(r.Reason, tc.reason) })
			if strings.Contains(tc.reason, "(gh)") && (len(r.Secrets) != 1 || r.Secrets[0] != "gh") {
				t.Errorf("the refusal's record names secrets %q, want gh", r.Secrets)
			}
		})
	}
	t.Run("a value that can't be opened", func(t *testing.T) {
		broken.Store(true)
		defer broken.Store(false)
		before := up.count()
		st, body := do(t, "GET", secretURL+"/", map[string]string{"Authorization": "Bearer " + gh.Placeholder}, "")
		if st != 502 || !strings.Contains(body, "secret GITHUB_TOKEN (gh) can't be used, nothing was sent") || up.count() != before {
			t.Errorf("%d %q (upstream requests %d → %d)", st, body, before, up.count())
		}
		if !strings.Contains(body, "secrets key") {
			t.Errorf("the refusal does not say why: %q", body)
		}
	})
	t.Run("split or encoded: passed unchanged, no value", func(t *testing.T) {
		half := len(gh.Placeholder) / 2
		st, _ := do(t, "GET", secretURL+"/split/"+strings.ReplaceAll(gh.Placeholder, "-", "%2D"), map[string]string{
			"X-A": gh.Placeholder[:half], "X-B": gh.Placeholder[half:]}, "")
		if st != 200 {
			t.Errorf("status %d", st)
		}
	})
	if strings.Contains(up.all(), "npm_REALVALUE2") || strings.Count(up.all(), "ghp_") != 2 { // the Bearer and the rotated one (Basic is encoded)
		t.Errorf("values reached the upstream where no placeholder was allowed:\n%s", up.all())
	}

	t.Run("URL userinfo, plain HTTP", func(t *testing.T) {
		p.Hosts["registry.test"] = pxAddrs("127.0.0.1")
		pu, _ := c.Transport.(*http.Transport).Proxy(nil)
		get := func() string {
			conn, err := net.Dial("tcp", pu.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "GET http://u:%s@registry.test:%d/pkg HTTP/1.1\r\nHost: registry.test:%d\r\nConnection: close\r\n\r\n", npm.Placeholder, pport, pport)
			b, _ := io.ReadAll(conn)
			return string(b)
		}
		want := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:npm_REALVALUE2"))
		// hosts "registry.test" means HTTPS: over plain HTTP the value would be readable
		// by anyone on the path.
		if b := get(); !strings.HasPrefix(b, "HTTP/1.1 403") || !strings.Contains(b, "only over HTTPS") || strings.Contains(plain.all(), "npm_REALVALUE2") {
			t.Errorf("plain HTTP to a secret's host without its port named: %q; the server got:\n%s", b, plain.all())
		}
		npmPort.Store(true)
		defer npmPort.Store(false)
		if b := get(); !strings.HasPrefix(b, "HTTP/1.1 200") || !strings.Contains(plain.all(), want) || strings.Contains(plain.all(), npm.Placeholder) {
			t.Errorf("answer %q; the server got:\n%s", b, plain.all())
		}
	})
	t.Run("the policy in force for each request of a tunnel", func(t *testing.T) {
		if st, _ := do(t, "GET", secretURL+"/before", nil, ""); st != 200 {
			t.Fatalf("status %d", st)
		}
		mode.Store(int32(Off)) // the same tunnel, kept alive
		defer mode.Store(int32(Open))
		before := up.count()
		if st, body := do(t, "GET", secretURL+"/after", map[string]string{"Authorization": "Bearer " + gh.Placeholder}, ""); st != 403 ||
			!strings.Contains(body, "no network") || up.count() != before {
			t.Errorf("after network went off: %d %q", st, body)
		}
	})
	t.Run("one leaf per host", func(t *testing.T) {
		for range 20 {
			c.Transport.(*http.Transport).CloseIdleConnections() // a new tunnel each time
			if st, _ := do(t, "GET", secretURL+"/again", nil, ""); st != 200 {
				t.Fatalf("status %d", st)
			}
		}
		if n := p.CA.Minted(); n != 1 {
			t.Errorf("minted %d leaves for one host, want 1", n)
		}
	})
}
