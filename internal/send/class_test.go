package send

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"
)

// Every error text classifyErr writes reads back as its class: a new text
// or a reworded one that FailureClass does not know fails here, not in
// front of a customer as "other".
func TestFailureClassReadsOwnTexts(t *testing.T) {
	live := context.Background()
	expired, cancel := context.WithDeadline(live, time.Now())
	defer cancel()
	<-expired.Done()
	canceled, stop := context.WithCancel(live)
	stop()
	opErr := func(err error) error {
		return &url.Error{Op: "Post", URL: "https://h.example/", Err: &net.OpError{Op: "dial", Net: "tcp", Err: err}}
	}
	for _, c := range []struct {
		name            string
		parent, attempt context.Context
		err             error
		connected       bool
		want            string
	}{
		{"connect timeout", live, expired, context.DeadlineExceeded, false, FailTimeout},
		{"answer timeout", live, expired, context.DeadlineExceeded, true, FailTimeout},
		{"refused", live, live, opErr(syscall.ECONNREFUSED), false, FailConnectionRefused},
		{"reset", live, live, opErr(syscall.ECONNRESET), true, FailConnectionReset},
		{"unreachable", live, live, opErr(syscall.EHOSTUNREACH), false, FailUnreachable},
		{"no such host", live, live, &net.DNSError{Err: "no such host", Name: "h.example", IsNotFound: true}, false, FailDNS},
		{"dns server", live, live, &net.DNSError{Err: "server misbehaving", Name: "h.example"}, false, FailDNS},
		{"certificate", live, live, &tls.CertificateVerificationError{Err: errors.New("x509: expired")}, false, FailTLS},
		{"alert", live, live, tls.AlertError(40), false, FailTLS},
		{"closed", live, live, io.EOF, true, FailConnectionClosed},
		{"net timeout", live, live, opErr(timeoutErr{}), true, FailTimeout},
		{"blocked", live, live, fmt.Errorf("%w: address 10.0.0.1 is not allowed (private)", ErrBlocked), false, FailBlocked},
		{"proxy", live, live, fmt.Errorf("%w 127.0.0.1:3128 unreachable: %w", errProxy, syscall.ECONNREFUSED), false, FailProxy},
		{"canceled by us", canceled, live, context.Canceled, false, FailOther},
	} {
		_, text, _ := classifyErr(c.parent, c.attempt, c.err, time.Second, c.connected)
		if got := FailureClass(0, text); got != c.want {
			t.Errorf("%s: %q reads as %q, want %q", c.name, text, got, c.want)
		}
	}
	for status, want := range map[int]string{200: "", 204: "", 301: FailHTTP3xx, 400: FailHTTP4xx, 429: FailHTTP4xx, 410: FailHTTP4xx,
		500: FailHTTP5xx, 503: FailHTTP5xx, 101: FailOther} {
		if got := FailureClass(status, ""); got != want {
			t.Errorf("status %d reads as %q, want %q", status, got, want)
		}
	}
	// Send's own refusals before any request.
	for _, text := range []string{"invalid endpoint URL", "subscription secret is malformed"} {
		if got := FailureClass(0, text); got != FailOther {
			t.Errorf("%q reads as %q, want other", text, got)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
