package core

import (
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// FieldError is bad input, naming the field at fault. The API answers it
// with 400/422 and the field; nothing is written.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

var eventTypeRe = regexp.MustCompile(`^[a-z0-9_-]+(\.[a-z0-9_-]+)*$`)

const maxTypeLen = 128

// ValidateEventType checks a posted event's type: dotted lowercase names.
func ValidateEventType(field, t string) error {
	if t == "" {
		return fieldErr(field, "is required")
	}
	if len(t) > maxTypeLen || !eventTypeRe.MatchString(t) {
		return fieldErr(field, "must be a dotted lowercase name like payment.succeeded (letters, digits, _ and -; at most %d characters)", maxTypeLen)
	}
	return nil
}

// ValidatePatterns checks a subscription's event_types: exact names,
// "prefix.*" or "*".
func ValidatePatterns(field string, ps []string) error {
	if len(ps) == 0 {
		return fieldErr(field, "must list at least one event type")
	}
	if len(ps) > 100 {
		return fieldErr(field, "may list at most 100 event types")
	}
	for i, p := range ps {
		f := fmt.Sprintf("%s[%d]", field, i)
		if p == "*" {
			continue
		}
		if err := ValidateEventType(f, strings.TrimSuffix(p, ".*")); err != nil {
			return fieldErr(f, "must be an event type, prefix.* or *")
		}
	}
	return nil
}

// Matches reports whether pattern p selects event type t.
func Matches(p, t string) bool {
	if p == "*" || p == t {
		return true
	}
	if prefix, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(t, prefix)
	}
	return false
}

// EndpointHost parses a subscription URL and returns its destination key,
// lowercase host:port (default port filled in, leading zeros dropped).
// Only absolute http(s) URLs without credentials or fragments, naming an
// ASCII host and a port from 1 to 65535, are accepted.
func EndpointHost(field, raw string) (string, error) {
	if raw == "" {
		return "", fieldErr(field, "is required")
	}
	if len(raw) > 2048 {
		return "", fieldErr(field, "must be at most 2048 characters")
	}
	// Go sends a query as given: a raw space would split the request line
	// ("POST /x?a=b HTTP/1.0 HTTP/1.1") for the receiver or a proxy to misread.
	if strings.ContainsFunc(raw, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return "", fieldErr(field, "must be printable ASCII without spaces: percent-encode the rest (a space is %%20)")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fieldErr(field, "is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fieldErr(field, "must use http or https")
	}
	if u.Hostname() == "" {
		return "", fieldErr(field, "must name a host")
	}
	if u.User != nil {
		// The URL is shown in every answer and stored in the clear.
		return "", fieldErr(field, `must not hold credentials (user:password@); give them in headers instead, e.g. {"Authorization": "Basic …"}, which are sealed at rest and never shown`)
	}
	if u.Fragment != "" {
		return "", fieldErr(field, "must not have a fragment")
	}
	host := u.Hostname()
	if strings.ContainsFunc(host, func(r rune) bool { return r >= utf8.RuneSelf }) {
		// net/http maps such a name (IDNA) before it dials: "１２７．０．０．１"
		// reaches 127.0.0.1, past the check of IP literals at registration.
		return "", fieldErr(field, "must name its host in ASCII (an internationalised domain name in its xn-- form)")
	}
	if a, err := netip.ParseAddr(host); err != nil && !validHostName(host) {
		// net/url lets "]", "a!b" or "(x)" stand as a host; none can be
		// resolved, and each would be retried for a day.
		return "", fieldErr(field, "must name its host as a DNS name (letters, digits, -, _ and .) or an IP address")
	} else if err != nil && endsInNumber(host) {
		// Browsers and inet_aton read 127.1, 0x7f000001 or 2130706433 as
		// an IPv4 address; the sender's resolver takes them for names that
		// never resolve, and each would be retried for a day.
		return "", fieldErr(field, "must write an IPv4 address as four decimal numbers (127.0.0.1), or name its host by a DNS name whose last label is not a number")
	} else if err == nil && a.Zone() != "" {
		// A zone names an interface of the sending machine, and may hold
		// anything: "[fe80::1%25eth0]:0]:90" read as zone "eth0]:0" made
		// a host key no dialler can split.
		return "", fieldErr(field, "must not name an IPv6 zone (%%…)")
	}
	port := uint64(80)
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		// Parsed, so "080" and "80" are one destination, and a port
		// nothing can be dialled on is refused now, not retried for a day.
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return "", fieldErr(field, "must have a port from 1 to 65535")
		}
		port = n
	}
	// One server, one key (and one concurrency cap): "Example.COM." is
	// example.com, and an IPv6 address has one written form.
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if a, err := netip.ParseAddr(host); err == nil {
		name = a.String()
	} else if name == "" {
		return "", fieldErr(field, "must name a host") // "http://." is the root alone
	}
	return net.JoinHostPort(name, strconv.FormatUint(port, 10)), nil
}

// endsInNumber: the host's last label (a trailing dot aside) is a decimal
// or 0x-hex number, which makes it an IPv4 address to a URL parser (the
// WHATWG URL standard), never a DNS name.
func endsInNumber(host string) bool {
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := strings.ToLower(labels[len(labels)-1])
	if hex, ok := strings.CutPrefix(last, "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// validHostName: letters, digits, '-', '_' and '.' (underscores appear in
// service names), as a resolver takes them.
func validHostName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || c == '-' || c == '_' || c == '.' {
			continue
		}
		return false
	}
	return s != ""
}

// ParseRetrySchedule parses Go durations ("5s", "1m") into a schedule.
func ParseRetrySchedule(field string, in []string) ([]time.Duration, error) {
	if len(in) > MaxRetrySteps {
		return nil, fieldErr(field, "may have at most %d steps", MaxRetrySteps)
	}
	out := make([]time.Duration, 0, len(in))
	for i, s := range in {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "is not a duration like \"5s\" or \"2h\"")
		}
		if d < MinRetryDelay || d > MaxRetryDelay {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", field, i), "must be between %s and %s", MinRetryDelay, MaxRetryDelay)
		}
		out = append(out, d)
	}
	return out, nil
}

// FormatDurations is the inverse of ParseRetrySchedule.
func FormatDurations(ds []time.Duration) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

// ValidateHeaders checks a subscription's endpoint headers (field
// "headers") and returns them with canonical names. Refused, naming
// headers.<name>: names hookd sets itself (webhook-*, content-type,
// content-length, host, user-agent), hop-by-hop headers, names that are not
// HTTP tokens, values with control characters (CR, LF, NUL, ...), one name
// given twice in different cases; and more than MaxHeaders, or more than
// MaxHeadersBytes of names and values together.
func ValidateHeaders(field string, h map[string]string) (map[string]string, error) {
	if len(h) > MaxHeaders {
		return nil, fieldErr(field, "may have at most %d headers", MaxHeaders)
	}
	names := make([]string, 0, len(h))
	size := 0
	for name, v := range h {
		names = append(names, name)
		size += len(name) + len(v)
	}
	if size > MaxHeadersBytes {
		return nil, fieldErr(field, "names and values together must be at most %d bytes", MaxHeadersBytes)
	}
	slices.Sort(names) // the same input always names the same field
	out := make(map[string]string, len(h))
	for _, name := range names {
		f := field + "." + name
		if !validHeaderName(name) {
			return nil, fieldErr(f, "is not a valid header name (letters, digits and !#$%%&'*+-.^_`|~)")
		}
		if why := reservedHeader(strings.ToLower(name)); why != "" {
			return nil, fieldErr(f, "%s", why)
		}
		if !validHeaderValue(h[name]) {
			return nil, fieldErr(f, "must not hold control characters (CR, LF, NUL, ...)")
		}
		c := textproto.CanonicalMIMEHeaderKey(name)
		if _, dup := out[c]; dup {
			return nil, fieldErr(f, "is given twice (header names are case-insensitive)")
		}
		out[c] = h[name]
	}
	return out, nil
}

// reservedHeader says why an endpoint may not set header name (lowercase):
// hookd sets it, or it governs the connection rather than the request.
func reservedHeader(name string) string {
	switch {
	case strings.HasPrefix(name, "webhook-"), strings.HasPrefix(name, "svix-"), name == "content-type", name == "content-length",
		name == "host", name == "user-agent":
		return "is set by hookd"
	case strings.HasPrefix(name, "proxy-"), name == "connection", name == "keep-alive", name == "te",
		name == "trailer", name == "transfer-encoding", name == "upgrade":
		return "is a hop-by-hop header"
	}
	return ""
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// validHeaderValue: visible characters, spaces and tabs (RFC 9110
// field-value); bytes over 0x7f pass, as obs-text.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
