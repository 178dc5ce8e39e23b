package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/cwsdev/cws/workspace"
)

// Preview: a workspace's ports, reached from outside through the agent's connection
// (workspace.DialPort). Three ways in, one proxy:
//
//   - with a token (scope ports): ANY /v1/sessions/{id}/ports/{port}/{path...};
//   - with a link, path-based: /p/{capability}/{path...};
//   - with a link, host-based: {port}-{session}.{preview domain}, when cws serve
//     --preview-domain is set (the link's first request sets a cookie for the host).
//
// POST and DELETE of .../ports/{port}/link make and revoke links (the app's own /link
// path is therefore not reachable with a token; through a link it is). A request with
// "Upgrade: cws-tcp" becomes a raw TCP tunnel to the port (cws port-forward).

// TunnelProtocol is the Upgrade token of a raw TCP tunnel to a workspace port.
const TunnelProtocol = "cws-tcp"

// linkCookie carries a host-based link's capability after its first request;
// secureLinkCookie on https, where the __Host- prefix keeps a sibling preview host from
// setting it for the whole domain.
const (
	linkCookie       = "cws_preview"
	secureLinkCookie = "__Host-cws_preview"
)

// linkParam is the query parameter of a host-based link's first request.
const linkParam = "cws-link"

// ports serves everything under /v1/sessions/:id/ports/:port/.
func (s *Server) ports(c *gin.Context) {
	id := c.Param("id")
	port, err := workspace.ValidPort(c.Param("port"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	rest := restPath(c.Request.URL, 6)
	if rest == "/link" && (c.Request.Method == http.MethodPost || c.Request.Method == http.MethodDelete) {
		if c.Request.Method == http.MethodPost {
			s.createLink(c, id, port)
		} else {
			s.revokeLinks(c, id, port)
		}
		return
	}
	s.proxyPort(c.Writer, c.Request, caller(c), id, port, rest, false)
}

// restPath is the escaped path after its first skip segments ("/" when none).
func restPath(u *url.URL, skip int) string {
	segs := strings.SplitN(u.EscapedPath(), "/", skip+1)
	if len(segs) <= skip {
		return "/"
	}
	return "/" + segs[skip]
}

type linkRequest struct {
	TTL string `json:"ttl"`
}

type linkResponse struct {
	workspace.Link
	URL string `json:"url"`
}

func (s *Server) createLink(c *gin.Context, id string, port int) {
	var req linkRequest
	if err := decodeOptionalJSON(c, &req); err != nil {
		fail(c, s.log, err)
		return
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil {
			fail(c, s.log, fmt.Errorf("%w: ttl %q is not a duration such as \"1h\"", workspace.ErrInvalid, req.TTL))
			return
		}
		ttl = d
	}
	l, err := s.cfg.Service.CreateLink(c.Request.Context(), caller(c), id, port, ttl)
	if err != nil {
		fail(c, s.log, err)
		return
	}
	c.JSON(http.StatusCreated, linkResponse{Link: *l, URL: s.linkURL(l)})
}

// linkURL is where a link is opened: host-based under the preview domain, else
// path-based under the public URL.
func (s *Server) linkURL(l *workspace.Link) string {
	base, _ := url.Parse(s.cfg.PublicURL)
	if base == nil || base.Host == "" {
		base = &url.URL{Scheme: "http", Host: "localhost"}
	}
	if d := s.cfg.PreviewDomain; d != "" {
		return fmt.Sprintf("%s://%d-%s.%s/?%s=%s", base.Scheme, l.Port, l.Session, d, linkParam, url.QueryEscape(l.Token))
	}
	return strings.TrimSuffix(base.String(), "/") + "/p/" + l.Token + "/"
}

func (s *Server) revokeLinks(c *gin.Context, id string, port int) {
	if err := s.cfg.Service.RevokeLinks(c.Request.Context(), caller(c), id, port, c.Query("id")); err != nil {
		fail(c, s.log, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// pathLink serves /p/:cap/*path.
func (s *Server) pathLink(c *gin.Context) {
	who, id, port, err := s.cfg.Service.OpenLink(c.Request.Context(), c.Param("cap"))
	if err != nil {
		fail(c, s.log, err)
		return
	}
	s.proxyPort(c.Writer, c.Request, who, id, port, restPath(c.Request.URL, 3), false)
}

// previewHost reports whether r is for a host-based preview ({port}-{session}.{domain})
// and serves it if so.
func (s *Server) previewHost(w http.ResponseWriter, r *http.Request) bool {
	d := s.cfg.PreviewDomain
	if d == "" {
		return false
	}
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(host, "."+d)
	if !ok || strings.Contains(label, ".") {
		return false
	}
	ps, id, ok := strings.Cut(label, "-")
	if !ok {
		return false
	}
	port, err := workspace.ValidPort(ps)
	if err != nil {
		writeError(w, s.log, err)
		return true
	}
	token := r.URL.Query().Get(linkParam)
	fromQuery := token != ""
	secure := strings.HasPrefix(s.cfg.PublicURL, "https:")
	cookie := linkCookie
	if secure {
		cookie = secureLinkCookie
	}
	if !fromQuery {
		if ck, err := r.Cookie(cookie); err == nil {
			token = ck.Value
		}
	}
	who, lid, lport, err := s.cfg.Service.OpenLink(r.Context(), token)
	if err == nil && (lid != id || lport != port) {
		err = fmt.Errorf("preview link: %w", workspace.ErrNotFound) // another host's link
	}
	if err != nil {
		writeError(w, s.log, err)
		return true
	}
	if fromQuery {
		// Keep the capability in a cookie of this host only, and drop it from the URL.
		http.SetCookie(w, &http.Cookie{Name: cookie, Value: token, Path: "/", HttpOnly: true,
			Secure: secure, SameSite: http.SameSiteLaxMode})
		q := r.URL.Query()
		q.Del(linkParam)
		u := *r.URL
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return true
	}
	s.proxyPort(w, r, who, id, port, r.URL.EscapedPath(), true)
	return true
}

// writeError writes err as the API's JSON error body.
func writeError(w http.ResponseWriter, log *slog.Logger, err error) {
	status, body := errorResponse(nil, log, err)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// proxyPort proxies r to port of session id as who, with path as the request's path.
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, who workspace.Caller, id string, port int, path string, ownOrigin bool) {
	release, err := s.cfg.Service.HoldPort(r.Context(), who, id, port)
	if err != nil {
		writeError(w, s.log, err)
		return
	}
	defer release()
	if strings.EqualFold(r.Header.Get("Upgrade"), TunnelProtocol) {
		s.tunnel(w, r, who, id, port)
		return
	}
	key := s.previews.target(who, id, port)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", key
			pr.Out.URL.RawPath = path
			pr.Out.URL.Path, _ = url.PathUnescape(path)
			pr.Out.Host = r.Host
			pr.Out.Header.Del("Authorization") // the caller's token is cws's, never the app's
			stripCookie(pr.Out, linkCookie)
			stripCookie(pr.Out, secureLinkCookie)
			pr.SetXForwarded()
		},
		Transport:     s.previews.transport,
		FlushInterval: -1, // server-sent events and streamed bodies pass as they come
		ModifyResponse: func(resp *http.Response) error {
			if !ownOrigin {
				// The app is served from cws's own origin (a token or a path-based link):
				// it runs in an opaque origin, so it can't read the console's storage,
				// register a service worker over cws, or set cookies for cws's host.
				// Apps that need cookies or absolute paths get --preview-domain.
				resp.Header.Del("Set-Cookie")
				resp.Header.Del("Service-Worker-Allowed")
				resp.Header.Add("Content-Security-Policy", "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads")
				return nil
			}
			// The app has a host of its own under the preview domain: its cookies stay
			// on that host, never set for the domain every tenant's previews share.
			stripCookieDomain(resp.Header)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			if !isDomainError(err) {
				// The app accepted and then closed, or answered something that isn't HTTP.
				err = fmt.Errorf("%w: the app on port %d answered no HTTP response (%v)", workspace.ErrNoListener, port, err)
			}
			writeError(w, s.log, err)
		},
	}
	rp.ServeHTTP(w, r)
}

// isDomainError reports whether err is one of the workspace's kinds (a refusal, a
// lost session, …) rather than the app's failure.
func isDomainError(err error) bool {
	for _, k := range workspace.Kinds {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// stripCookieDomain removes the Domain attribute from every Set-Cookie of h, and keeps
// the rest as the app wrote it: a cookie without Domain is the setting host's only.
func stripCookieDomain(h http.Header) {
	cookies := h["Set-Cookie"]
	for i, v := range cookies {
		attrs := strings.Split(v, ";")
		kept := attrs[:1] // name=value
		for _, a := range attrs[1:] {
			name, _, _ := strings.Cut(a, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "domain") {
				kept = append(kept, a)
			}
		}
		cookies[i] = strings.Join(kept, ";")
	}
}

// stripCookie removes the cookie named name from r.
func stripCookie(r *http.Request, name string) {
	cs := r.Cookies()
	if len(cs) == 0 {
		return
	}
	r.Header.Del("Cookie")
	for _, c := range cs {
		if c.Name != name {
			r.AddCookie(c)
		}
	}
}

// tunnel turns r into a raw TCP connection to the port (Upgrade: cws-tcp).
func (s *Server) tunnel(w http.ResponseWriter, r *http.Request, who workspace.Caller, id string, port int) {
	conn, err := s.cfg.Service.DialPort(r.Context(), who, id, port)
	if err != nil {
		writeError(w, s.log, err)
		return
	}
	defer conn.Close()
	hj, ok := w.(http.Hijacker)
	if !ok {
		writeError(w, s.log, fmt.Errorf("%w: this connection can't be upgraded", workspace.ErrInvalid))
		return
	}
	client, brw, err := hj.Hijack()
	if err != nil {
		return
	}
	defer client.Close()
	_, _ = io.WriteString(client, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: "+TunnelProtocol+"\r\nConnection: Upgrade\r\n\r\n")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if n := brw.Reader.Buffered(); n > 0 {
			b, _ := brw.Reader.Peek(n)
			_, _ = conn.Write(b)
		}
		_, _ = io.Copy(conn, client)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(client, conn)
	if cw, ok := client.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	// The app is done: the client gets a moment to finish its side, and no more (a
	// client that keeps its socket open must not pin the stream).
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	client.Close()
	conn.Close()
	<-done
}

// previews holds the transport every preview request goes through. Its connections
// are pooled by (tenant, session, port): the URL host of a request names its target,
// and the dial opens a stream to the port through the agent.
type previews struct {
	svc       *workspace.Service
	transport *http.Transport
	targets   sync.Map // host key → previewTarget
}

type previewTarget struct {
	who  workspace.Caller
	id   string
	port int
}

func newPreviews(svc *workspace.Service) *previews {
	p := &previews{svc: svc}
	p.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(addr)
			v, ok := p.targets.Load(host)
			if !ok {
				return nil, fmt.Errorf("preview: %w", workspace.ErrNotFound)
			}
			t := v.(previewTarget)
			return p.svc.DialPort(ctx, t.who, t.id, t.port)
		},
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       60 * time.Second,
		ResponseHeaderTimeout: 0, // a long poll is the app's business
		DisableCompression:    true,
	}
	return p
}

// target names (who's tenant, id, port) as a URL host, remembering who may dial it.
func (p *previews) target(who workspace.Caller, id string, port int) string {
	sum := sha256.Sum256([]byte(who.Tenant + "\x00" + id + "\x00" + strconv.Itoa(port)))
	key := hex.EncodeToString(sum[:12]) + ".preview.invalid"
	p.targets.Store(key, previewTarget{who: who, id: id, port: port})
	return key
}
