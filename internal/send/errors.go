package send

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"
)

const maxErrLen = 200

// classifyErr turns a failed request into a Class, a short human message
// and whether it failed at the connection (see Outcome.Conn); connected
// says a connection was made before the error. Only a guard refusal is
// permanent: it would never succeed.
func classifyErr(parent, attempt context.Context, err error, timeout time.Duration, connected bool) (Class, string, bool) {
	if errors.Is(err, ErrBlocked) {
		var msg string
		for e := err; e != nil; e = errors.Unwrap(e) {
			msg = e.Error() // the innermost wrapper of ErrBlocked names the address
			if errors.Unwrap(e) == ErrBlocked {
				break
			}
		}
		return Fail, msg, false
	}
	switch {
	case parent.Err() != nil:
		return Retry, "canceled before an answer", false // ours, not the host's
	case errors.Is(attempt.Err(), context.DeadlineExceeded):
		if !connected {
			return Retry, "timeout after " + timeout.String() + " connecting", true
		}
		return Retry, "timeout after " + timeout.String(), false
	}
	var (
		dnsErr  *net.DNSError
		netErr  net.Error
		certErr *tls.CertificateVerificationError
		alert   tls.AlertError
		recErr  tls.RecordHeaderError
		hostErr x509.HostnameError
		authErr x509.UnknownAuthorityError
	)
	switch {
	case errors.Is(err, errProxy):
		// The proxy's failure, not the endpoint's: say so, whatever the cause.
		return Retry, short(innermost(err).Error()), true
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return Retry, "dns: no such host " + dnsErr.Name, true
		}
		return Retry, "dns: " + dnsErr.Err, true
	case errors.Is(err, syscall.ECONNREFUSED):
		return Retry, "connection refused", true
	case errors.Is(err, syscall.ECONNRESET):
		// Reset while connecting is the host's; once connected, one path's
		// handler (or a WAF rule) may reset its own connection.
		return Retry, "connection reset", !connected
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Retry, "host unreachable", true
	case errors.As(err, &certErr), errors.As(err, &hostErr), errors.As(err, &authErr):
		return Retry, short("tls certificate: " + innermost(err).Error()), true
	case errors.As(err, &alert), errors.As(err, &recErr):
		return Retry, short("tls: " + innermost(err).Error()), true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// Once connected, one path's handler can close its connection
		// without bringing down its neighbours: the endpoint's evidence.
		return Retry, "connection closed before an answer", !connected
	case errors.As(err, &netErr) && netErr.Timeout():
		return Retry, short("timeout: " + innermost(err).Error()), !connected
	case strings.Contains(err.Error(), "server response headers exceeded"):
		// net/http aborts the answer before its status is read: say what
		// the endpoint did, not the transport's words for it.
		return Retry, "the answer's headers exceeded 64 KiB (its status was not read)", false
	}
	return Retry, short(innermost(err).Error()), !connected
}

// innermost strips a url.Error ("Post \"https://…\": "), which repeats the URL.
func innermost(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

func short(s string) string {
	if len(s) > maxErrLen {
		return strings.ToValidUTF8(s[:maxErrLen], "") + "…"
	}
	return s
}
