package core_test

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"hookd/internal/core"
	"hookd/internal/subs"
)

// FuzzEndpointURL feeds subscription URLs to EndpointHost and one endpoint
// header to ValidateHeaders. An accepted URL is an absolute http(s) URL
// with a host, no credentials and no fragment, and its host key is what
// the sender dials: the lowercase ASCII host and a port from 1 to 65535,
// written once (so one server is one admission key). An accepted header is
// a token name hookd does not set, with a value that cannot end the
// header: a request carrying it reads back with that header and no other.
func FuzzEndpointURL(f *testing.F) {
	for _, s := range [][3]string{
		{"https://hooks.example.com/in", "Authorization", "Bearer abc"},
		{"http://[::1]:9000/", "X-Api-Key", "k"},
		{"http://user:pass@example.com/", "X-A", "a\r\nX-Injected: 1"},
		{"http://example.com:080/", "webhook-id", "x"},
		{"http://example.com:65536/", "Content-Type", "text/plain"},
		{"http://１２７．０．０．１/", "x a", "\x00"},
		{"", "", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, raw, name, value string) {
		checkEndpointURL(t, raw)
		checkHeader(t, name, value)
	})
}

func checkEndpointURL(t *testing.T, raw string) {
	host, err := core.EndpointHost("url", raw)
	if err != nil {
		var fe *core.FieldError
		if !errors.As(err, &fe) || fe.Field != "url" || fe.Message == "" {
			t.Fatalf("EndpointHost(%q) = %v, want a FieldError naming url", raw, err)
		}
		return
	}
	if len(raw) > 2048 {
		t.Errorf("EndpointHost accepted a URL of %d bytes, over 2048", len(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("EndpointHost accepted %q, which net/url refuses: %v", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		t.Errorf("EndpointHost accepted %q with scheme %q", raw, u.Scheme)
	}
	if u.Hostname() == "" || u.User != nil || u.Fragment != "" {
		t.Errorf("EndpointHost accepted %q: host %q, userinfo %v, fragment %q", raw, u.Hostname(), u.User, u.Fragment)
	}
	h, port, err := net.SplitHostPort(host)
	if err != nil {
		t.Fatalf("EndpointHost(%q) = %q, not host:port: %v", raw, host, err)
	}
	// One server, one key: lowercase, without the root's dot, an IP
	// address in its one form.
	want := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		want = a.String()
	}
	if h == "" || h != want {
		t.Errorf("EndpointHost(%q) host %q, want the URL's host as one key, %q", raw, h, want)
	}
	// A name of letters, digits, -, _ and . (ASCII only: net/http maps any
	// other name, IDNA, before it dials, and "１２７．０．０．１" reaches
	// 127.0.0.1 out of sight of the checks at registration), or an IP.
	if _, err := netip.ParseAddr(h); err != nil && strings.Trim(h, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
		t.Errorf("EndpointHost(%q) = %q: the host is neither a DNS name nor an IP address", raw, host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		t.Errorf("EndpointHost(%q) port %q, want a number from 1 to 65535 without leading zeros", raw, port)
	}
	wantPort := u.Port()
	if wantPort == "" {
		wantPort = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if w, err := strconv.Atoi(wantPort); err != nil || w != n {
		t.Errorf("EndpointHost(%q) port %q, want the URL's %q", raw, port, wantPort)
	}
}

func checkHeader(t *testing.T, name, value string) {
	out, err := core.ValidateHeaders("headers", map[string]string{name: value})
	if err != nil {
		var fe *core.FieldError
		if !errors.As(err, &fe) || (fe.Field != "headers" && fe.Field != "headers."+name) {
			t.Fatalf("ValidateHeaders(%q: %q) = %v, want a FieldError naming headers.%s", name, value, err, name)
		}
		return
	}
	canon := textproto.CanonicalMIMEHeaderKey(name)
	if len(out) != 1 || out[canon] != value {
		t.Fatalf("ValidateHeaders(%q: %q) = %q, want {%q: %q}", name, value, out, canon, value)
	}
	if name == "" || strings.Trim(name, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		t.Errorf("ValidateHeaders accepted name %q, not an HTTP token", name)
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "webhook-") || strings.HasPrefix(lower, "svix-") || strings.HasPrefix(lower, "proxy-") || slices.Contains([]string{
		"content-type", "content-length", "host", "user-agent",
		"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade",
	}, lower) {
		t.Errorf("ValidateHeaders accepted %q, which hookd sets or which governs the connection", name)
	}
	if strings.ContainsFunc(value, func(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f }) {
		t.Errorf("ValidateHeaders accepted value %q with a control character", value)
	}
	// Sent and read back, the request has this header and no other.
	req, err := http.NewRequest(http.MethodPost, "http://example.com/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(canon, value)
	req.Header.Set("User-Agent", "hookd")
	var wire bytes.Buffer
	if err := req.Write(&wire); err != nil {
		t.Fatalf("writing a request with %q: %q: %v", canon, value, err)
	}
	got, err := http.ReadRequest(bufio.NewReader(&wire))
	if err != nil {
		t.Fatalf("reading back a request with %q: %q: %v\n%s", canon, value, err, wire.String())
	}
	got.Header.Del("User-Agent")
	got.Header.Del("Content-Length")
	if len(got.Header) != 1 || got.Header.Get(canon) != strings.Trim(value, " \t") {
		t.Errorf("header %q: %q read back as %q", canon, value, got.Header)
	}
}

// FuzzPatterns feeds event-type patterns and types to their validation and
// matching. A pattern is accepted exactly when it is an event type, a type
// followed by ".*", or "*"; an accepted pattern selects an accepted type
// exactly as the API documents (worked out here segment by segment); and
// the registry's index selects what Matches does.
func FuzzPatterns(f *testing.F) {
	for _, s := range [][3]string{
		{"order.*", "*", "order.created"},
		{"order.created", "order.*", "order"},
		{"a.*", "b", "a..b"},
		{"*.x", "a.*.b", "a.x.b"},
		{"HOOKD.x", "hookd.x", "hookd.x"},
		{"order.*", "ord.*", "order-x.y"},
		{"", "*", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, p1, p2, typ string) {
		ps := []string{p1, p2}
		err := core.ValidatePatterns("event_types", ps)
		if want := validPattern(p1) && validPattern(p2); (err == nil) != want {
			t.Fatalf("ValidatePatterns(%q) = %v, want accepted %v", ps, err, want)
		}
		if err != nil {
			var fe *core.FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "event_types[") {
				t.Fatalf("ValidatePatterns(%q) = %v, want a FieldError naming event_types[i]", ps, err)
			}
		}
		typeOK := core.ValidateEventType("type", typ) == nil
		if typeOK != validType(typ) {
			t.Fatalf("ValidateEventType(%q) accepted %v, want %v", typ, typeOK, validType(typ))
		}
		for _, p := range ps {
			m := core.Matches(p, typ)
			if validPattern(p) && typeOK && m != selects(p, typ) {
				t.Errorf("Matches(%q, %q) = %v, want %v", p, typ, m, !m)
			}
		}
		if err != nil {
			return // the registry holds only accepted patterns
		}
		reg := subs.New([]core.Subscription{
			{ID: "sub_1", TenantID: "t", EventTypes: ps, State: core.SubActive},
			{ID: "sub_2", TenantID: "t", EventTypes: []string{p2}, State: core.SubActive},
		})
		var want []string
		if core.Matches(p1, typ) || core.Matches(p2, typ) {
			want = append(want, "sub_1")
		}
		if core.Matches(p2, typ) {
			want = append(want, "sub_2")
		}
		var got []string
		for _, s := range reg.Match("t", typ) {
			got = append(got, s.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("registry of %q and %q matched %q to %v, Matches says %v", ps, p2, typ, got, want)
		}
		if other := reg.Match("u", typ); len(other) != 0 {
			t.Errorf("another tenant's Match(%q) = %d subscriptions, want none", typ, len(other))
		}
	})
}

// validType: dot-separated segments of a-z, 0-9, _ and -, none empty, at
// most 128 bytes in all.
func validType(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, seg := range strings.Split(s, ".") {
		if seg == "" || strings.Trim(seg, "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
			return false
		}
	}
	return true
}

func validPattern(p string) bool {
	if prefix, ok := strings.CutSuffix(p, ".*"); ok {
		return validType(prefix)
	}
	return p == "*" || validType(p)
}

// selects: "*" selects every type, "a.b.*" every type whose first segments
// are a and b and that has more, anything else only itself.
func selects(p, typ string) bool {
	if p == "*" {
		return true
	}
	prefix, ok := strings.CutSuffix(p, ".*")
	if !ok {
		return p == typ
	}
	want, segs := strings.Split(prefix, "."), strings.Split(typ, ".")
	return len(segs) > len(want) && slices.Equal(segs[:len(want)], want)
}
