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

// classifyErr turns a failed request into a Class and a short human
// message. Only a guard refusal is permanent: it would never succeed.
func classifyErr(parent, attempt context.Context, err error, timeout time.Duration) (Class, string) {
	if errors.Is(err, ErrBlocked) {
		var msg string
		for e := err; e != nil; e = errors.Unwrap(e) {
			msg = e.Error() // the innermost wrapper of ErrBlocked names the address
			if errors.Unwrap(e) == ErrBlocked {
				break
			}
		}
		return Fail, msg
	}
	switch {
	case parent.Err() != nil:
		return Retry, "canceled before an answer"
	case errors.Is(attempt.Err(), context.DeadlineExceeded):
		return Retry, "timeout after " + timeout.String()
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
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return Retry, "dns: no such host " + dnsErr.Name
		}
		return Retry, "dns: " + dnsErr.Err
	case errors.Is(err, syscall.ECONNREFUSED):
		return Retry, "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return Retry, "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return Retry, "host unreachable"
	case errors.As(err, &certErr), errors.As(err, &hostErr), errors.As(err, &authErr):
		return Retry, short("tls certificate: " + innermost(err).Error())
	case errors.As(err, &alert), errors.As(err, &recErr):
		return Retry, short("tls: " + innermost(err).Error())
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return Retry, "connection closed before an answer"
	case errors.As(err, &netErr) && netErr.Timeout():
		return Retry, short("timeout: " + innermost(err).Error())
	}
	return Retry, short(innermost(err).Error())
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
