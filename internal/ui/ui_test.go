package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Every file goes out with the policy that keeps rendered data inert, and
// with its own content type (nosniff makes a wrong one fatal).
func TestServesAssetsWithPolicy(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", Handler(nil))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		"/ui/":        "text/html",
		"/ui/app.js":  "text/javascript",
		"/ui/app.css": "text/css",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(body) == 0 {
			t.Errorf("%s: %d with %d bytes", path, resp.StatusCode, len(body))
		}
		if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, want) {
			t.Errorf("%s: Content-Type %q, want %s", path, ct, want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
	}
	resp, err := http.Get(srv.URL + "/ui/missing.js")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("a missing file answers %d, want 404", resp.StatusCode)
	}
}

// Framing: none by default; an operator's origins only when named, each
// checked to be an origin so the policy cannot be bent.
func TestFrameAncestors(t *testing.T) {
	if got := csp(nil); !strings.HasSuffix(got, "frame-ancestors 'none'") {
		t.Errorf("default policy %q, want frame-ancestors 'none'", got)
	}
	if got := csp([]string{"https://app.example.com", "https://b.example:8443"}); !strings.HasSuffix(got, "frame-ancestors https://app.example.com https://b.example:8443") {
		t.Errorf("policy %q", got)
	}
	for _, ok := range []string{"https://app.example.com", "http://localhost:3000", "https://app.example.com/", "http://[::1]:8080", "HTTP://A.COM"} {
		if _, err := ParseOrigin(ok); err != nil {
			t.Errorf("ParseOrigin(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "*", "app.example.com", "https://*.example.com", "https://a.example.com/path",
		"https://a.example.com; script-src *", "javascript:alert(1)", "https://u:p@a.example.com", "https://a.example.com?x",
		`http://a.com"`, "http://a.com)", "http://a.com:", "http://a.com:99999", "http://a.com:0"} { // each would be written into the CSP
		if _, err := ParseOrigin(bad); err == nil {
			t.Errorf("ParseOrigin(%q) accepted it", bad)
		}
	}
}
