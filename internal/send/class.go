package send

import "strings"

// Failure classes name, for people, what went wrong with an attempt: the
// API's last_failure.class, which the dashboard puts in words. They are read
// back from the status and the error text classifyErr and Send write, so
// the two live here together (TestErrorClassReadsOwnTexts holds them in step).
const (
	FailTimeout           = "timeout"
	FailConnectionRefused = "connection_refused"
	FailConnectionReset   = "connection_reset"
	FailConnectionClosed  = "connection_closed" // closed before an answer
	FailUnreachable       = "unreachable"
	FailDNS               = "dns"
	FailTLS               = "tls"
	FailBlocked           = "blocked" // the SSRF guard refused the address
	FailProxy             = "proxy"   // the egress proxy, not the endpoint
	FailHTTP3xx           = "http_3xx"
	FailHTTP4xx           = "http_4xx"
	FailHTTP5xx           = "http_5xx"
	FailOther             = "other"
)

// FailureClass classifies one failed attempt: by its status when it got an
// HTTP answer, else by the error text. "" for a success (2xx).
func FailureClass(status int, errText string) string {
	switch {
	case status >= 200 && status <= 299:
		return ""
	case status >= 500:
		return FailHTTP5xx
	case status >= 400:
		return FailHTTP4xx
	case status >= 300:
		return FailHTTP3xx
	case status > 0:
		return FailOther
	}
	for _, c := range []struct{ prefix, class string }{
		{"timeout", FailTimeout},
		{"connection refused", FailConnectionRefused},
		{"connection reset", FailConnectionReset},
		{"connection closed", FailConnectionClosed},
		{"host unreachable", FailUnreachable},
		{"dns:", FailDNS},
		{"tls", FailTLS},
		{ErrBlocked.Error(), FailBlocked},
		{errProxy.Error(), FailProxy},
	} {
		if strings.HasPrefix(errText, c.prefix) {
			return c.class
		}
	}
	return FailOther
}
