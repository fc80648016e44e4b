package send

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/webhook"
)

const (
	testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	oldSecret  = "whsec_c2VjcmV0LXRoYXQtd2FzLXJvdGF0ZWQtb3V0"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func testJob() *core.Job {
	return &core.Job{
		Delivery: core.Delivery{ID: "dlv_1", EventID: "evt_01HX"},
		Event: core.Event{
			ID:        "evt_01HX",
			Type:      "payment.succeeded",
			Payload:   []byte(`{"amount": 4200, "note": "<b>&</b>"}`),
			CreatedAt: time.Date(2024, 5, 6, 7, 8, 9, 123, time.FixedZone("CEST", 2*3600)),
		},
	}
}

func testSub(url string) *core.Subscription {
	return &core.Subscription{ID: "sub_1", URL: url, Secret: testSecret, Timeout: 5 * time.Second}
}

// independentSig computes the expected signature without the webhook package.
func independentSig(t *testing.T, secret, id string, ts int64, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

type captured struct {
	header http.Header
	body   []byte
}

// recorder answers 200 and hands each request to the test.
func recorder(t *testing.T) (*httptest.Server, chan captured) {
	got := make(chan captured, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- captured{r.Header.Clone(), b}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestSendHeadersAndSignature(t *testing.T) {
	srv, got := recorder(t)
	s := New(Config{Guard: NewGuard(loopback), UserAgent: "hookd/test", KeepSuccessResponse: true})
	now := time.Unix(1_714_000_000, 0)
	out := s.Send(context.Background(), testSub(srv.URL+"/hook?x=1"), testJob(), now)
	if out.Class != Delivered || out.StatusCode != 200 || out.Err != "" || out.Response != "ok" {
		t.Fatalf("outcome = %+v, want delivered 200 \"ok\"", out)
	}
	if !out.StartedAt.Equal(now) || out.Duration <= 0 {
		t.Errorf("StartedAt %v Duration %v", out.StartedAt, out.Duration)
	}
	c := <-got
	wantBody := `{"id":"evt_01HX","type":"payment.succeeded","timestamp":"2024-05-06T05:08:09Z","data":{"amount": 4200, "note": "<b>&</b>"}}`
	if string(c.body) != wantBody {
		t.Errorf("body:\n got %s\nwant %s", c.body, wantBody)
	}
	for k, want := range map[string]string{
		"Webhook-Id":        "evt_01HX",
		"Webhook-Timestamp": "1714000000",
		"Webhook-Signature": independentSig(t, testSecret, "evt_01HX", 1_714_000_000, c.body),
		"Content-Type":      "application/json",
		"User-Agent":        "hookd/test",
	} {
		if v := c.header.Values(k); len(v) != 1 || v[0] != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if err := webhook.Verify(testSecret, c.header, c.body, now.Add(time.Minute), webhook.DefaultTolerance); err != nil {
		t.Errorf("webhook.Verify: %v", err)
	}
}

// A subscription made through the Svix-compatible API also carries
// svix-* headers with the webhook-* values, and its body is the payload
// itself, as Svix sends it; one made through /v1 gets neither.
func TestSendSvixHeaders(t *testing.T) {
	srv, got := recorder(t)
	s := New(Config{Guard: NewGuard(loopback), UserAgent: "hookd/test"})
	now := time.Unix(1_714_000_000, 0)
	for _, svix := range []bool{true, false} {
		sub := testSub(srv.URL)
		sub.SvixHeaders = svix
		sub.PrevSecret, sub.PrevSecretExpiresAt = oldSecret, now.Add(time.Hour)
		if out := s.Send(context.Background(), sub, testJob(), now); out.Class != Delivered {
			t.Fatalf("svix %v: outcome %+v", svix, out)
		}
		c := <-got
		for _, name := range []string{"Id", "Timestamp", "Signature"} {
			w, v := c.header.Values("Webhook-"+name), c.header.Values("Svix-"+name)
			switch {
			case svix && (len(v) != 1 || len(w) != 1 || v[0] != w[0]):
				t.Errorf("Svix-%s %q, want the Webhook-%s value %q", name, v, name, w)
			case !svix && len(v) != 0:
				t.Errorf("a /v1 subscription got Svix-%s %q", name, v)
			}
		}
		if payload := testJob().Event.Payload; svix != bytes.Equal(c.body, payload) {
			t.Errorf("svix %v: body %s (the payload is %s)", svix, c.body, payload)
		}
		if svix && !strings.Contains(c.header.Get("Svix-Signature"), " ") {
			t.Errorf("Svix-Signature %q lacks the previous secret's signature", c.header.Get("Svix-Signature"))
		}
	}
}

func TestSendRotationSignsWithBothSecrets(t *testing.T) {
	srv, got := recorder(t)
	s := New(Config{Guard: NewGuard(loopback)})
	now := time.Unix(1_714_000_000, 0)
	sub := testSub(srv.URL)
	sub.PrevSecret, sub.PrevSecretExpiresAt = oldSecret, now.Add(time.Hour)

	if out := s.Send(context.Background(), sub, testJob(), now); out.Class != Delivered {
		t.Fatalf("outcome = %+v", out)
	}
	c := <-got
	want := independentSig(t, testSecret, "evt_01HX", now.Unix(), c.body) + " " + independentSig(t, oldSecret, "evt_01HX", now.Unix(), c.body)
	if sig := c.header.Get("webhook-signature"); sig != want {
		t.Errorf("signature = %q, want %q", sig, want)
	}
	for _, secret := range []string{testSecret, oldSecret} {
		if err := webhook.Verify(secret, c.header, c.body, now, 0); err != nil {
			t.Errorf("Verify with %s: %v", secret, err)
		}
	}

	// After the grace period only the current secret signs, with a fresh timestamp.
	later := now.Add(2 * time.Hour)
	s.Send(context.Background(), sub, testJob(), later)
	c = <-got
	if sig := c.header.Get("webhook-signature"); sig != independentSig(t, testSecret, "evt_01HX", later.Unix(), c.body) {
		t.Errorf("after expiry signature = %q", sig)
	}
	if err := webhook.Verify(oldSecret, c.header, c.body, later, 0); err == nil {
		t.Error("expired secret still verifies")
	}
}

func TestBody(t *testing.T) {
	job := testJob()
	job.Event.Payload = []byte("[1,\n 2]")
	job.Event.OrderingKey = "cus_42"
	job.Delivery.Sequence = 7
	want := `{"id":"evt_01HX","type":"payment.succeeded","timestamp":"2024-05-06T05:08:09Z","data":[1,` + "\n" + ` 2],"sequence":7,"ordering_key":"cus_42"}`
	v1, svix := &core.Subscription{}, &core.Subscription{SvixHeaders: true}
	if got := string(Body(v1, job)); got != want {
		t.Errorf("Body:\n got %s\nwant %s", got, want)
	}
	if got := string(Body(svix, job)); got != "[1,\n 2]" {
		t.Errorf("Body in Svix's format = %s, want the payload byte for byte", got)
	}
	job.Event.Payload = nil
	job.Delivery.Sequence = 0
	if got := string(Body(v1, job)); !strings.HasSuffix(got, `"data":null}`) {
		t.Errorf("Body with no payload = %s", got)
	}
}

func TestClassification(t *testing.T) {
	var redirected atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { redirected.Add(1) }))
	defer target.Close()
	date := time.Now().Add(2 * time.Minute).UTC().Format(http.TimeFormat)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/"))
		if ra := r.URL.Query().Get("retry_after"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		if code/100 == 3 {
			w.Header().Set("Location", target.URL+"/elsewhere")
		}
		w.WriteHeader(code)
		fmt.Fprintf(w, "answer %d", code)
	}))
	defer srv.Close()

	tests := []struct {
		path       string
		retryCodes []int
		svix       bool // made through the Svix-compatible API
		class      Class
		retryAfter time.Duration // exact unless dated
		dated      bool
	}{
		{path: "/200", class: Delivered},
		{path: "/204", class: Delivered},
		{path: "/299", class: Delivered},
		{path: "/301", class: Fail},
		{path: "/302", class: Fail},
		{path: "/307", class: Fail},
		{path: "/400", class: Fail},
		{path: "/401", class: Fail},
		{path: "/403", class: Fail},
		{path: "/403", retryCodes: []int{403}, class: Retry},
		{path: "/404", class: Fail},
		{path: "/408", class: Retry},
		{path: "/410", class: Gone},
		{path: "/422", class: Fail},
		{path: "/301", svix: true, class: Retry},
		{path: "/400", svix: true, class: Retry},
		{path: "/404", svix: true, class: Retry},
		{path: "/410", svix: true, class: Gone},
		{path: "/425", class: Retry},
		{path: "/429?retry_after=30", class: Retry, retryAfter: 30 * time.Second},
		{path: "/429?retry_after=" + strings.ReplaceAll(date, " ", "%20"), class: Retry, retryAfter: 2 * time.Minute, dated: true},
		{path: "/429?retry_after=86400", class: Retry, retryAfter: core.MaxRetryAfter},
		{path: "/429?retry_after=-3", class: Retry, retryAfter: 0},
		{path: "/500", class: Retry},
		{path: "/503?retry_after=120", class: Retry, retryAfter: 2 * time.Minute},
		{path: "/200?retry_after=5", class: Delivered, retryAfter: 5 * time.Second},
	}
	s := New(Config{Guard: NewGuard(loopback), KeepSuccessResponse: true})
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s,svix=%v", tt.path, tt.svix), func(t *testing.T) {
			sub := testSub(srv.URL + tt.path)
			sub.RetryStatusCodes, sub.SvixHeaders = tt.retryCodes, tt.svix
			out := s.Send(context.Background(), sub, testJob(), time.Now())
			code, _ := strconv.Atoi(strings.Trim(strings.SplitN(tt.path, "?", 2)[0], "/"))
			if out.Class != tt.class || out.StatusCode != code || out.Err != "" {
				t.Fatalf("outcome = %+v, want class %v status %d", out, tt.class, code)
			}
			if code != 204 && out.Response != fmt.Sprintf("answer %d", code) {
				t.Errorf("response = %q", out.Response)
			}
			if tt.dated {
				// HTTP-dates have whole seconds: allow the truncation and test time.
				if out.RetryAfter <= tt.retryAfter-5*time.Second || out.RetryAfter > tt.retryAfter {
					t.Errorf("RetryAfter = %v, want about %v", out.RetryAfter, tt.retryAfter)
				}
			} else if out.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", out.RetryAfter, tt.retryAfter)
			}
		})
	}
	if n := redirected.Load(); n != 0 {
		t.Errorf("redirect target received %d requests, want 0", n)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"":                              0,
		"0":                             0,
		" 17 ":                          17 * time.Second,
		"-1":                            0,
		"3601":                          core.MaxRetryAfter,
		"99999999999999999999":          0, // not a number we can read: ignored
		"soon":                          0,
		"Mon, 01 Jan 2024 12:10:00 GMT": 10 * time.Minute,
		"Mon, 01 Jan 2024 11:00:00 GMT": 0,
		"Tue, 02 Jan 2024 12:00:00 GMT": core.MaxRetryAfter,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestSendTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)   // the server notices a client hang-up only once the body is read
		<-r.Context().Done() // never answers; ends when the client gives up
	}))
	defer srv.Close()
	sub := testSub(srv.URL)
	sub.Timeout = 200 * time.Millisecond
	out := New(Config{Guard: NewGuard(loopback)}).Send(context.Background(), sub, testJob(), time.Now())
	if out.Class != Retry || out.StatusCode != 0 || out.Err != "timeout after 200ms" || out.Conn {
		t.Fatalf("outcome = %+v, want retry \"timeout after 200ms\", not a connection failure", out)
	}
	if out.Duration < 200*time.Millisecond {
		t.Errorf("Duration = %v, want at least the timeout", out.Duration)
	}
}

func TestSendParentCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		cancel()
		<-r.Context().Done()
	}))
	defer srv.Close()
	out := New(Config{Guard: NewGuard(loopback)}).Send(ctx, testSub(srv.URL), testJob(), time.Now())
	if out.Class != Retry || out.Err != "canceled before an answer" || out.Conn {
		t.Fatalf("outcome = %+v", out)
	}
}

func TestSendConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	out := New(Config{Guard: NewGuard(loopback)}).Send(context.Background(), testSub("http://"+addr), testJob(), time.Now())
	if out.Class != Retry || out.Err != "connection refused" || !out.Conn {
		t.Fatalf("outcome = %+v, want retry \"connection refused\", a connection failure", out)
	}
}

func TestSendClosedWithoutAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	defer srv.Close()
	out := New(Config{Guard: NewGuard(loopback)}).Send(context.Background(), testSub(srv.URL), testJob(), time.Now())
	if out.Class != Retry || out.Err != "connection closed before an answer" || out.Conn {
		t.Fatalf("outcome = %+v, want retry, the endpoint's failure (it was connected)", out)
	}
}

// A timeout before any connection is the host's failure (Conn); after
// one, the endpoint's. Loopback cannot make a connect timeout, so the
// classification is asked directly.
func TestClassifyErrConnectTimeout(t *testing.T) {
	expired, cancel := context.WithDeadline(context.Background(), time.Now())
	defer cancel()
	<-expired.Done()
	for _, connected := range []bool{false, true} {
		c, msg, conn := classifyErr(context.Background(), expired, context.DeadlineExceeded, time.Second, connected)
		if c != Retry || conn == connected {
			t.Errorf("connected %v: class %v, %q, Conn %v; want retry, Conn %v", connected, c, msg, conn, !connected)
		}
	}
}

func TestSendInvalidURL(t *testing.T) {
	s := New(Config{Guard: NewGuard(loopback)})
	for _, u := range []string{"ftp://127.0.0.1/x", "://nope", ""} {
		if out := s.Send(context.Background(), testSub(u), testJob(), time.Now()); out.Class != Fail || out.Err != "invalid endpoint URL" {
			t.Errorf("URL %q: outcome = %+v", u, out)
		}
	}
	sub := testSub("http://127.0.0.1:1")
	sub.Secret = "not-a-secret"
	if out := s.Send(context.Background(), sub, testJob(), time.Now()); out.Class != Fail {
		t.Errorf("bad secret: outcome = %+v", out)
	}
}

func TestResponseHeadTruncated(t *testing.T) {
	// 1 + 2n bytes: the 1 KiB cut falls inside a two-byte rune.
	long := "a" + strings.Repeat("é", 4000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, long)
	}))
	defer srv.Close()
	s := New(Config{Guard: NewGuard(loopback)})
	out := s.Send(context.Background(), testSub(srv.URL), testJob(), time.Now())
	if out.Class != Retry || out.StatusCode != 500 {
		t.Fatalf("outcome = %+v", out)
	}
	if len(out.Response) != core.MaxResponseHead-1 || out.Response != long[:core.MaxResponseHead-1] {
		t.Errorf("response head: %d bytes, want the first %d", len(out.Response), core.MaxResponseHead-1)
	}
}

func TestResponseText(t *testing.T) {
	for in, want := range map[string]string{
		"plain":            "plain",
		"nul\x00byte":      "nul\uFFFDbyte",
		"bad\xff\xfebytes": "bad\uFFFDbytes",
		"cut\xe2\x82":      "cut", // € split by the read limit
	} {
		if got := responseText([]byte(in)); got != want {
			t.Errorf("responseText(%q) = %q, want %q", in, got, want)
		}
	}
	// Replacement characters must not push the text past the limit.
	if got := responseText([]byte(strings.Repeat("\x00", core.MaxResponseHead))); len(got) > core.MaxResponseHead {
		t.Errorf("responseText grew to %d bytes", len(got))
	}
}

func TestClassString(t *testing.T) {
	for c, want := range map[Class]string{Delivered: "delivered", Retry: "retry", Fail: "fail", Gone: "gone", Class(9): "Class(9)"} {
		if c.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(c), c.String(), want)
		}
	}
}

// appendString must write exactly what json.Marshal writes, for plain IDs
// and for anything that needs escaping.
func TestAppendStringMatchesJSON(t *testing.T) {
	for _, s := range []string{"", "evt_01JABCDEF", "payment.succeeded", `a"b`, `a\b`, "tab\there", "é", "<x>&", "\x00\x7f", "line\nbreak", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Errorf("appendString(%q) = %s, want %s", s, got, want)
		}
	}
}

// user:password in an endpoint URL goes out as Basic auth, as it did through
// an http.Client.
func TestSendCredentialsInURLBecomeBasicAuth(t *testing.T) {
	srv, got := recorder(t)
	s := New(Config{Guard: NewGuard(loopback)})
	u := strings.Replace(srv.URL, "http://", "http://hook%20user:p%40ss@", 1) + "/hook"
	if out := s.Send(context.Background(), testSub(u), testJob(), time.Now()); out.Class != Delivered {
		t.Fatalf("outcome %+v", out)
	}
	c := <-got
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("hook user:p@ss"))
	if a := c.header.Get("Authorization"); a != want {
		t.Errorf("Authorization %q, want %q", a, want)
	}
}

// An endpoint's headers go out with every attempt, beside hookd's own,
// which a stored header cannot replace; they win over credentials in a
// URL stored before headers existed.
func TestSendEndpointHeaders(t *testing.T) {
	srv, got := recorder(t)
	s := New(Config{Guard: NewGuard(loopback), UserAgent: "hookd/test"})
	sub := testSub(strings.Replace(srv.URL, "http://", "http://old:pw@", 1) + "/hook")
	// Content-Type cannot pass validation; set here as a row tampered with would hold it.
	sub.Headers = map[string]string{"Authorization": "Bearer t0k3n", "X-Api-Key": "k-123", "Content-Type": "text/plain"}
	now := time.Unix(1_714_000_000, 0)
	for range 2 {
		if out := s.Send(context.Background(), sub, testJob(), now); out.Class != Delivered {
			t.Fatalf("outcome %+v", out)
		}
		c := <-got
		for k, want := range map[string]string{
			"Authorization": "Bearer t0k3n", "X-Api-Key": "k-123", "Content-Type": "application/json",
		} {
			if v := c.header.Values(k); len(v) != 1 || v[0] != want {
				t.Errorf("header %s = %q, want %q", k, v, want)
			}
		}
		if err := webhook.Verify(testSecret, c.header, c.body, now, webhook.DefaultTolerance); err != nil {
			t.Errorf("webhook.Verify: %v", err)
		}
	}
}

// A success's answer is kept only when asked: by default a 2xx keeps its
// status and timing, a failure its headers and body head too. Either way
// the body is read to its end, so the connection is used again.
func TestSuccessAnswerKeptOnlyWhenAsked(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Answer", "yes")
		if r.URL.Path == "/fail" {
			w.WriteHeader(500)
		}
		io.WriteString(w, strings.Repeat("b", 3000))
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	for _, keep := range []bool{false, true} {
		s := New(Config{Guard: NewGuard(loopback), KeepSuccessResponse: keep})
		before := conns.Load()
		for _, c := range []struct {
			path string
			kept bool
		}{{"/ok", keep}, {"/ok", keep}, {"/fail", true}} {
			out := s.Send(context.Background(), testSub(srv.URL+c.path), testJob(), time.Now())
			if got := out.Response != "" && strings.Contains(out.ResponseHeaders, "X-Answer: yes"); got != c.kept {
				t.Errorf("keep %v, %s: answer kept %v (%q, %q), want %v", keep, c.path, got, out.Response, out.ResponseHeaders, c.kept)
			}
		}
		if n := conns.Load() - before; n != 1 {
			t.Errorf("keep %v: three sends took %d connections, want one reused", keep, n)
		}
		s.CloseIdleConnections()
	}
}

// An endpoint that answers 200 and then trickles its body is judged on its
// status within bodyWait, not held for the whole timeout: its slot of the
// host goes back. The same for a failure whose body trickles.
func TestTricklingBodyIsCutShort(t *testing.T) {
	defer func(w time.Duration) { bodyWait = w }(bodyWait)
	bodyWait = 100 * time.Millisecond
	for _, status := range []int{200, 500} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.ReadAll(r.Body)
			w.WriteHeader(status)
			for range 100 { // a byte every 50 ms: 5 s in all, ended by the client going away
				if _, err := w.Write([]byte("x")); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}))
		sub := testSub(srv.URL) // timeout 5 s
		out := New(Config{Guard: NewGuard(loopback)}).Send(context.Background(), sub, testJob(), time.Now())
		srv.Close()
		want := Delivered
		if status == 500 {
			want = Retry
		}
		if out.Class != want || out.StatusCode != status {
			t.Errorf("%d, trickled: outcome %+v, want %s", status, out, want)
		}
		if out.Duration > 2*time.Second {
			t.Errorf("%d, trickled: the attempt took %s, want about bodyWait (%s)", status, out.Duration, bodyWait)
		}
	}
}

// An answer whose headers pass the 64 KiB bound is aborted before its
// status is read: the attempt says so, where it gave net/http's words
// ("HTTP/1.x transport connection broken: …"), and retries.
func TestHeadersPastTheBoundAreNamed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("X-Big", strings.Repeat("x", 70<<10))
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	out := New(Config{Guard: NewGuard(loopback)}).Send(context.Background(), testSub(srv.URL), testJob(), time.Now())
	if out.Class != Retry || out.Err != "the answer's headers exceeded 64 KiB (its status was not read)" || out.Conn {
		t.Fatalf("outcome = %+v, want retry naming the headers' size, not a connection failure", out)
	}
}
