package send

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// With no allow-list, every spelling of loopback is refused at dial time
// and the server never sees a request.
func TestSenderBlocksLoopback(t *testing.T) {
	var hits atomic.Int64
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) })
	srv := httptest.NewServer(h)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	urls := []string{
		"http://127.0.0.1:" + port,
		"http://localhost:" + port,
		"http://[::ffff:127.0.0.1]:" + port,
		"http://127.1:" + port,
	}
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		srv6 := &httptest.Server{Listener: ln, Config: &http.Server{Handler: h}}
		srv6.Start()
		defer srv6.Close()
		urls = append(urls, srv6.URL)
	} else {
		t.Logf("no IPv6 loopback, skipping [::1]: %v", err)
	}

	s := New(Config{}) // nil guard: the strict default
	for _, u := range urls {
		sub := testSub(u + "/hook")
		out := s.Send(context.Background(), sub, testJob(), time.Now())
		if out.Class != Fail || !strings.HasPrefix(out.Err, "blocked: address ") || out.StatusCode != 0 {
			t.Errorf("%s: outcome = %+v, want fail \"blocked: address …\"", u, out)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("server received %d requests, want 0", n)
	}
}

// The metadata address is refused before any connection is attempted: were
// a connect tried, it would end in a timeout (Retry), not Fail.
func TestSenderBlocksMetadata(t *testing.T) {
	sub := testSub("http://169.254.169.254/latest/meta-data/")
	out := New(Config{Guard: NewGuard(loopback)}).Send(context.Background(), sub, testJob(), time.Now())
	want := "blocked: address 169.254.169.254 is not allowed (link-local (cloud metadata))"
	if out.Class != Fail || out.Err != want {
		t.Fatalf("outcome = %+v, want fail %q", out, want)
	}
}

// Names pass CheckHost, so this exercises the dial-time Control hook: the
// address dialled after resolution is what gets judged.
func TestSenderBlocksResolvedName(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	g := NewGuard(nil)
	if err := g.CheckHost("localhost"); err != nil {
		t.Fatalf("CheckHost(localhost) = %v, want nil (names are judged at dial time)", err)
	}
	out := New(Config{Guard: g}).Send(context.Background(), testSub("http://localhost:"+port), testJob(), time.Now())
	if out.Class != Fail || !strings.HasPrefix(out.Err, "blocked: address ") || !strings.Contains(out.Err, "(loopback)") {
		t.Fatalf("outcome = %+v, want fail blocked loopback", out)
	}
	if hits.Load() != 0 {
		t.Fatal("server was reached")
	}
}
