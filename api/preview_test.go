package api_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/cwsdev/cws/api"
	"github.com/cwsdev/cws/auth"
)

const previewDomain = "preview.test"

// previewApp is an app on a host port that sets the cookies an app may set, one with
// the shared preview domain, and answers "app".
func previewApp(t *testing.T) int {
	t.Helper()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Add("Set-Cookie", "sid=abc; Domain="+previewDomain+"; Path=/; HttpOnly; SameSite=Lax")
		w.Header().Add("Set-Cookie", "theme=dark;domain=."+previewDomain+";Max-Age=60; Secure")
		w.Header().Add("Set-Cookie", "plain=1; Path=/app")
		_, _ = io.WriteString(w, "app")
	}))
	t.Cleanup(app.Close)
	return app.Listener.Addr().(*net.TCPAddr).Port
}

// previewLink serves acme with previewPorts [port] under the preview domain, and makes
// a link to port of a new session: the server, the session and the link's capability.
func previewLink(t *testing.T, port int) (*scopeServer, string, string) {
	t.Helper()
	s := newServerWith(t, "", fmt.Sprintf(`{"previewPorts": [%d]}`, port), func(c *api.Config) { c.PreviewDomain = previewDomain })
	id := s.session(t)
	a := s.do(t, http.MethodPost, fmt.Sprintf("/v1/sessions/%s/ports/%d/link", id, port), s.token(t, "ci", "", auth.AllScopes()...), nil)
	if a.status != http.StatusCreated {
		t.Fatalf("create link: %d %s", a.status, a.body)
	}
	var l struct{ URL string }
	_ = json.Unmarshal(a.body, &l)
	u, err := url.Parse(l.URL)
	if err != nil || u.Query().Get("cws-link") == "" {
		t.Fatalf("link URL %q has no capability", l.URL)
	}
	return s, id, u.Query().Get("cws-link")
}

// get requests path of the server as host, without following redirects.
func (s *scopeServer) get(t *testing.T, host, path, cookie string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestPreviewLinkSpelling: a link's capability has one spelling. Changing the last
// character of either part to one with the same high bits (which a lenient base64
// decoder reads as the same bytes), or adding a line break, gives 404.
func TestPreviewLinkSpelling(t *testing.T) {
	port := previewApp(t)
	s, _, tok := previewLink(t, port)
	if r := s.get(t, "cws.test", "/p/"+tok+"/", ""); r.StatusCode != http.StatusOK {
		t.Fatalf("the link as made: %d", r.StatusCode)
	}
	payload, mac, _ := strings.Cut(tok, ".")
	variants := map[string]string{
		"mac's last character":  payload + "." + sameHighBits(t, mac),
		"line break in the mac": payload + "." + mac[:4] + "%0A" + mac[4:],
	}
	if len(payload)%4 != 0 { // the payload's last character has unused bits
		variants["payload's last character"] = sameHighBits(t, payload) + "." + mac
	}
	for name, v := range variants {
		if r := s.get(t, "cws.test", "/p/"+v+"/", ""); r.StatusCode != http.StatusNotFound {
			t.Errorf("%s changed: %d, want 404", name, r.StatusCode)
		}
	}
}

// sameHighBits returns s, unpadded base64url, with its last character changed to the
// one that differs in the lowest bit, which encodes no bit of the bytes: a lenient
// decoder reads both as the same bytes.
func sameHighBits(t *testing.T, s string) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, s[len(s)-1])
	out := s[:len(s)-1] + string(alphabet[i^1])
	a, err1 := base64.RawURLEncoding.DecodeString(s)
	b, err2 := base64.RawURLEncoding.DecodeString(out)
	if err1 != nil || err2 != nil || string(a) != string(b) {
		t.Fatalf("%q and %q are not the same bytes to a lenient decoder", s, out)
	}
	return out
}

// TestPreviewHostCookieDomain: an app behind a host link can't set a cookie for the
// preview domain (every tenant's previews): Domain is removed from its Set-Cookie, the
// rest is kept as the app wrote it.
func TestPreviewHostCookieDomain(t *testing.T) {
	port := previewApp(t)
	s, id, tok := previewLink(t, port)
	host := fmt.Sprintf("%d-%s.%s", port, id, previewDomain)
	first := s.get(t, host, "/?cws-link="+url.QueryEscape(tok), "")
	if first.StatusCode != http.StatusSeeOther || len(first.Cookies()) != 1 {
		t.Fatalf("the link's first request: %d, cookies %v", first.StatusCode, first.Header["Set-Cookie"])
	}
	c := first.Cookies()[0]
	r := s.get(t, host, "/", c.Name+"="+c.Value)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("the app through the host link: %d", r.StatusCode)
	}
	want := []string{"sid=abc; Path=/; HttpOnly; SameSite=Lax", "theme=dark;Max-Age=60; Secure", "plain=1; Path=/app"}
	if got := r.Header.Values("Set-Cookie"); !slices.Equal(got, want) {
		t.Errorf("Set-Cookie = %q, want %q", got, want)
	}
}
