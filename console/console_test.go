package console

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"
)

func get(t *testing.T, h http.Handler, path, acceptEncoding string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

func body(t *testing.T, r *http.Response) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("gzip body: %v", err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestAssets: the page is never cached and names its script and style by content hash;
// those are cached for a year; every file is gzip-encoded for a client that accepts it,
// and is the file in dist/ once decoded.
func TestAssets(t *testing.T) {
	h := Handler("/console/")
	page := get(t, h, "/console/", "gzip, deflate, br")
	if page.StatusCode != http.StatusOK || page.Header.Get("Cache-Control") != "no-cache" || page.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("the page: %d %v", page.StatusCode, page.Header)
	}
	html := body(t, page)
	names := regexp.MustCompile(`"(app\.[0-9a-f]{8}\.(js|css))"`).FindAllSubmatch(html, -1)
	if len(names) != 2 {
		t.Fatalf("the page names %d hashed assets, want app.js and app.css:\n%s", len(names), html)
	}
	for _, m := range names {
		name, ext := string(m[1]), string(m[2])
		want, err := os.ReadFile("dist/app." + ext)
		if err != nil {
			t.Fatal(err)
		}
		r := get(t, h, "/console/"+name, "gzip")
		wire, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(wire))
		if got := body(t, r); r.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
			t.Errorf("%s: %d, %d bytes, want dist/app.%s", name, r.StatusCode, len(got), ext)
		}
		if cc := r.Header.Get("Cache-Control"); cc != "public, max-age=31536000, immutable" {
			t.Errorf("%s: Cache-Control %q", name, cc)
		}
		if r.Header.Get("Vary") != "Accept-Encoding" {
			t.Errorf("%s: Vary %q", name, r.Header.Get("Vary"))
		}
		t.Logf("%s: %d bytes, %d on the wire gzip-encoded", name, len(want), len(wire))
		plain := get(t, h, "/console/"+name, "")
		if plain.Header.Get("Content-Encoding") != "" || !bytes.Equal(body(t, plain), want) {
			t.Errorf("%s without Accept-Encoding: encoded %q", name, plain.Header.Get("Content-Encoding"))
		}
		if q0 := get(t, h, "/console/"+name, "gzip;q=0, identity"); q0.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s with gzip;q=0: encoded %q", name, q0.Header.Get("Content-Encoding"))
		}
	}
	if r := get(t, h, "/console/app.00000000.js", "gzip"); r.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown asset: %d", r.StatusCode)
	}
}
