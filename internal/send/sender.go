package send

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"hookd/internal/core"
	"hookd/webhook"
)

const (
	dialTimeout = 10 * time.Second
	// drainLimit bounds how much of an unread answer we discard so the
	// connection can be reused; beyond it, closing is cheaper.
	drainLimit = 64 << 10
)

// bodyWait bounds the read of an answer's body once its status is in: the
// status is the answer, and an endpoint that trickles its body must not
// hold its slot of the host for the whole timeout (the attempt is judged,
// the connection closed). A variable for tests.
var bodyWait = 2 * time.Second

// heads holds the buffers answers' heads are read into: one per attempt
// in flight rather than one allocated per attempt.
var heads = sync.Pool{New: func() any { return new([core.MaxResponseHead]byte) }}

// Config configures a Sender.
type Config struct {
	Guard     *Guard // nil: NewGuard(nil), everything internal blocked
	UserAgent string // e.g. "hookd/1.2.3"; empty: "hookd"
	// Proxy, if set, is an HTTP CONNECT proxy every delivery goes through
	// (http://[user:password@]host:port; see proxyDialer).
	Proxy *url.URL
	// Resolver resolves endpoint names (nil: net.DefaultResolver).
	Resolver *net.Resolver
	// KeepSuccessResponse keeps a 2xx answer's headers and body head in
	// the Outcome, as a failure's always are; off, a success keeps its
	// status and timing only (serve --keep-success-response).
	KeepSuccessResponse bool
}

// Sender POSTs signed deliveries. It is safe for concurrent use and keeps
// connections to endpoints alive between attempts.
type Sender struct {
	// The transport is used directly, not through an http.Client: a round
	// trip never follows a redirect (the design says never follow one; the
	// 3xx is the answer), and the client's per-request header copy for
	// redirects cost 4% of hookd's CPU under load.
	transport   *http.Transport
	guard       *Guard
	userAgent   string
	keepSuccess bool
}

// New returns a Sender whose every dial is checked by cfg.Guard.
func New(cfg Config) *Sender {
	guard := cfg.Guard
	if guard == nil {
		guard = NewGuard(nil)
	}
	ua := cfg.UserAgent
	if ua == "" {
		ua = "hookd"
	}
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second, Control: guard.Control, Resolver: cfg.Resolver}
	dial := dialer.DialContext
	if cfg.Proxy != nil {
		dial = newProxyDialer(cfg.Proxy, guard, cfg.Resolver).DialContext
	}
	tr := &http.Transport{
		// Never the transport's own proxying (nor one from the environment):
		// the proxy, not us, would resolve the name, out of the guard's
		// sight. An egress proxy is reached through our own dialer.
		Proxy:                  nil,
		DialContext:            dial,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		MaxIdleConns:           4096, // many endpoints, a few warm connections each
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10, // endpoints are untrusted
		// We keep an answer's first KiB as text; asking for gzip (the
		// default) would cost a header map per request and a decompressor.
		DisableCompression: true,
	}
	return &Sender{transport: tr, guard: guard, userAgent: ua, keepSuccess: cfg.KeepSuccessResponse}
}

// CloseIdleConnections releases pooled connections, e.g. at shutdown.
func (s *Sender) CloseIdleConnections() { s.transport.CloseIdleConnections() }

// Send makes one attempt to deliver job to sub. now is the attempt's
// time on the caller's clock: it picks the signing secrets, sets
// webhook-timestamp and StartedAt; Duration is measured on the real clock.
func (s *Sender) Send(ctx context.Context, sub *core.Subscription, job *core.Job, now time.Time) (out Outcome) {
	out.StartedAt = now
	start := time.Now()
	defer func() { out.Duration = time.Since(start) }()

	body := Body(sub, job)
	secrets := sub.Secrets(now)
	sigs := make([]string, 0, len(secrets))
	for _, secret := range secrets {
		sig, err := webhook.Sign(secret, job.Event.ID, now, body)
		if err != nil {
			out.Class, out.Err = Fail, "subscription secret is malformed"
			return out
		}
		sigs = append(sigs, sig)
	}

	timeout := sub.SendTimeout()
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Whether a connection was made tells a host that cannot be reached
	// from an endpoint that does not answer (Outcome.Conn).
	var connected atomic.Bool
	actx = httptrace.WithClientTrace(actx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }})
	req, err := http.NewRequestWithContext(actx, http.MethodPost, sub.URL, bytes.NewReader(body))
	if err != nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") {
		out.Class, out.Err = Fail, "invalid endpoint URL"
		return out
	}
	// IP literals are judged here too: inet_aton spellings like 127.1 may
	// never reach the dialer (Go's resolver calls them unknown hosts).
	if err := s.guard.CheckHost(req.URL.Hostname()); err != nil {
		out.Class, out.Err = Fail, err.Error()
		return out
	}
	// Keys already canonical, values in one array: Header.Set would
	// canonicalise each key and allocate each value's slice.
	vals := [...]string{job.Event.ID, strconv.FormatInt(now.Unix(), 10), strings.Join(sigs, " "),
		"application/json", s.userAgent}
	req.Header = http.Header{
		"Webhook-Id": vals[0:1:1], "Webhook-Timestamp": vals[1:2:2], "Webhook-Signature": vals[2:3:3],
		"Content-Type": vals[3:4:4], "User-Agent": vals[4:5:5],
	}
	if sub.SvixHeaders {
		// Made through the Svix-compatible API: Svix's libraries verify
		// these names; the values are the same.
		req.Header["Svix-Id"], req.Header["Svix-Timestamp"], req.Header["Svix-Signature"] = vals[0:1:1], vals[1:2:2], vals[2:3:3]
	}

	// The endpoint's own headers (its credentials). Names are canonical
	// and never one hookd sets (core.ValidateHeaders); should a stored one
	// clash all the same, hookd's wins.
	for name, v := range sub.Headers {
		if _, set := req.Header[name]; !set {
			req.Header[name] = []string{v}
		}
	}
	// An http.Client turns user:password in the URL into Basic auth; a bare
	// round trip does not, so do it here. Such URLs are refused since
	// headers exist, and those stored before are moved to an Authorization
	// header when the store opens; one written meanwhile by a node of the
	// previous release still works.
	if u := req.URL.User; u != nil && sub.Headers["Authorization"] == "" {
		pw, _ := u.Password()
		req.SetBasicAuth(u.Username(), pw)
	}
	resp, err := s.transport.RoundTrip(req)
	if err != nil {
		out.Class, out.Err, out.Conn = classifyErr(ctx, actx, err, timeout, connected.Load())
		return out
	}
	defer resp.Body.Close()
	defer time.AfterFunc(bodyWait, cancel).Stop()
	out.StatusCode = resp.StatusCode
	out.Class = classify(resp.StatusCode, sub)
	out.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), now.Add(time.Since(start)))
	if out.Class != Delivered || s.keepSuccess {
		out.ResponseHeaders = headerText(resp.Header)
		// The status is the answer; a body that stalls or breaks only shortens the head.
		buf := heads.Get().(*[core.MaxResponseHead]byte)
		n, _ := io.ReadFull(resp.Body, buf[:])
		out.Response = responseText(buf[:n]) // a copy: the buffer goes back
		heads.Put(buf)
	}
	io.CopyN(io.Discard, resp.Body, drainLimit) // read to the end (bounded), so the connection is reused
	return out
}
