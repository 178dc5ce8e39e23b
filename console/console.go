// Package console is cws's web console: static assets (built from src/ by esbuild and
// committed in dist/, so building cws needs no npm) served by cws itself at /console.
// It calls the same REST API a client calls, with the token a person pastes; it adds
// no privileged endpoint.
package console

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed dist
var dist embed.FS

// Handler serves the console's files under prefix (e.g. "/console/"). The assets are
// immutable per build of cws; the page itself is never cached, so a new build is
// picked up on reload.
func Handler(prefix string) http.Handler {
	sub, _ := fs.Sub(dist, "dist")
	files := http.StripPrefix(prefix, http.FileServer(http.FS(sub)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'")
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
