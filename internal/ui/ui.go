// Package ui serves the dashboard: static pages that call the /v1 API from
// the browser with the user's own token. The dashboard can therefore do
// nothing that token could not, tenancy is enforced where it always is, and
// no server logic is written twice.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// csp allows only the dashboard's own files and API calls: rendered data
// (payloads, endpoint answers) can never run as script or load anything.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard under /ui/.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Small files: always revalidate, so an upgraded node serves its own.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
