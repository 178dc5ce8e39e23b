// Package console is cws's web console: static assets (built from src/ by esbuild and
// committed in dist/, so building cws needs no npm) served by cws itself at /console.
// It calls the same REST API a client calls, with the token a person pastes; it adds
// no privileged endpoint.
package console

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
)

//go:embed dist
var dist embed.FS

// asset is one file of the console, as it is sent.
type asset struct {
	body, gz    []byte
	contentType string
	immutable   bool // named by its content's hash: cached for a year
}

// assets reads dist once: every asset under its content-hashed name (app.3f2a9c1d.js)
// and, for a page that an old build's tab still loads, its plain name; the page
// (index.html), which names the hashed ones, under "" and "index.html". Each is
// gzip-compressed here, once.
func assets() map[string]*asset {
	out := map[string]*asset{}
	hashed := map[string]string{} // plain name → hashed name
	entries, _ := fs.ReadDir(dist, "dist")
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == "index.html" {
			continue
		}
		b, _ := fs.ReadFile(dist, "dist/"+name)
		sum := sha256.Sum256(b)
		ext := path.Ext(name)
		hashed[name] = strings.TrimSuffix(name, ext) + "." + hex.EncodeToString(sum[:4]) + ext
		out[hashed[name]] = newAsset(name, b, true)
		out[name] = newAsset(name, b, false)
	}
	page, _ := fs.ReadFile(dist, "dist/index.html")
	for plain, h := range hashed {
		page = bytes.ReplaceAll(page, []byte(`"`+plain+`"`), []byte(`"`+h+`"`))
	}
	out["index.html"] = newAsset("index.html", page, false)
	out[""] = out["index.html"]
	return out
}

func newAsset(name string, b []byte, immutable bool) *asset {
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	_, _ = zw.Write(b)
	_ = zw.Close()
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	return &asset{body: b, gz: gz.Bytes(), contentType: ct, immutable: immutable}
}

// Handler serves the console's files under prefix (e.g. "/console/"). The page is never
// cached, so a new build is picked up on reload; the assets it names are immutable and
// cached for a year. Clients that accept gzip get every file gzip-encoded.
func Handler(prefix string) http.Handler {
	files := assets()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
		a, ok := files[strings.TrimPrefix(r.URL.Path, prefix)]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-cache")
		if a.immutable {
			h.Set("Cache-Control", "public, max-age=31536000, immutable")
		}
		h.Set("Vary", "Accept-Encoding")
		body := a.body
		if acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.Set("Content-Encoding", "gzip")
			body = a.gz
		}
		_, _ = w.Write(body)
	})
}

// acceptsGzip reports whether an Accept-Encoding header accepts gzip (not with q=0).
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(part, ";")
		if c := strings.TrimSpace(coding); c != "gzip" && c != "*" {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
