// Package ui serves the dashboard: static pages that call the /v1 API from
// the browser with the user's own token. The dashboard can therefore do
// nothing that token could not, tenancy is enforced where it always is, and
// no server logic is written twice.
package ui

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

//go:embed assets
var assets embed.FS

// csp allows only the dashboard's own files and API calls: rendered data
// (payloads, endpoint answers) can never run as script or load anything.
// No page may frame it but those frameAncestors names (a platform
// embedding its customer portal), so no other can overlay it to steal
// clicks.
func csp(frameAncestors []string) string {
	frame := "'none'"
	if len(frameAncestors) > 0 {
		frame = strings.Join(frameAncestors, " ")
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors " + frame
}

// Handler serves the dashboard under /ui/. frameAncestors are the origins
// allowed to show it in a frame (none: no page may).
func Handler(frameAncestors []string) http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	policy := csp(frameAncestors)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", policy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Small files: always revalidate, so an upgraded node serves its own.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// ParseOrigin checks one --frame-ancestors value: an origin, scheme and
// host (and port), nothing else, so the policy stays well-formed.
func ParseOrigin(v string) (string, error) {
	bad := fmt.Errorf("%q is not an origin like https://app.example.com", v)
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", bad
	}
	// It is written into the CSP as given: only a host name or IP and a
	// port may pass, or a stray quote or bracket would break the header.
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if _, err := netip.ParseAddr(host); err != nil && (host == "" || strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789.-") != "") {
		return "", bad
	}
	if p, err := strconv.Atoi(port); strings.HasSuffix(u.Host, ":") || port != "" && (err != nil || p < 1 || p > 65535) {
		return "", bad
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), nil
}
