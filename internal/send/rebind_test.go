package send

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/testenv"
)

// public is an address the guard lets through; the tests never dial it
// directly (the proxy test routes it to loopback).
var public = netip.MustParseAddr("93.184.216.34")

// rebinder answers rebind.test with public the first time it is asked for
// an A record and with 127.0.0.1 ever after: the name passes any check made
// on an earlier answer, then points at loopback.
func rebinder(t *testing.T) *dnsServer {
	return newDNSServer(t, func(name string, qtype uint16, n int) []netip.Addr {
		if name != "rebind.test" || qtype != dnsA {
			return nil
		}
		if n == 0 {
			return []netip.Addr{public}
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	})
}

func victim(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// DNS rebinding: the name looked public when it was first resolved (as a
// registration-time check would have seen it), then resolves to loopback.
// The dialer judges the address it dials, so nothing reaches loopback.
func TestRebindingNeverReachesLoopback(t *testing.T) {
	srv, hits := victim(t)
	dns := rebinder(t)
	g := NewGuard(nil)
	if err := g.CheckHost("rebind.test"); err != nil {
		t.Fatalf("CheckHost = %v, want nil (names are judged at dial time)", err)
	}
	// The earlier look: what a check-then-dial design would have approved.
	ips, err := dns.resolver().LookupNetIP(t.Context(), "ip4", "rebind.test")
	if err != nil || len(ips) != 1 || ips[0] != public || !g.Allowed(ips[0]) {
		t.Fatalf("first answer %v, %v; want %s, allowed", ips, err, public)
	}

	s := New(Config{Guard: g, Resolver: dns.resolver()})
	u := "http://rebind.test:" + itoa(addrPort(t, srv.URL).Port()) + "/hook"
	for i := range 2 {
		out := s.Send(context.Background(), testSub(u), testJob(), time.Now())
		if out.Class != Fail || !strings.HasPrefix(out.Err, "blocked: address 127.0.0.1 is not allowed (loopback)") {
			t.Fatalf("send %d after rebinding: %+v, want fail blocked loopback", i, out)
		}
	}
	if n := dns.count(dnsA); n < 3 {
		t.Fatalf("%d A questions, want each send to resolve afresh (3 or more)", n)
	}
	if hits.Load() != 0 {
		t.Fatal("the loopback server was reached")
	}
}

// Through an egress proxy the same holds: hookd resolves and checks, and
// asks the proxy only for the checked address. The first (public) answer
// is delivered through the proxy; once the name rebinds to loopback the
// proxy is not asked at all.
func TestRebindingThroughProxyNeverReachesLoopback(t *testing.T) {
	srv, hits := victim(t)
	port := addrPort(t, srv.URL).Port()
	standIn, got := recorder(t) // where the test proxy takes the public address
	proxy := testenv.NewConnectProxy(t, func(target string) string {
		if target == netip.AddrPortFrom(public, port).String() {
			return standIn.Listener.Addr().String()
		}
		return target
	})
	dns := rebinder(t)
	s := New(Config{Guard: NewGuard(nil), Proxy: proxy.ProxyURL("", ""), Resolver: dns.resolver()})
	defer s.CloseIdleConnections()
	u := "http://rebind.test:" + itoa(port) + "/hook"

	if out := s.Send(context.Background(), testSub(u), testJob(), time.Now()); out.Class != Delivered {
		t.Fatalf("send to the public answer: %+v", out)
	}
	<-got
	s.CloseIdleConnections() // the next send dials, and so resolves, again
	out := s.Send(context.Background(), testSub(u), testJob(), time.Now())
	if out.Class != Fail || !strings.HasPrefix(out.Err, "blocked: address 127.0.0.1 is not allowed (loopback)") {
		t.Fatalf("send after rebinding: %+v, want fail blocked loopback", out)
	}
	if c := proxy.Connects(); len(c) != 1 || c[0] != netip.AddrPortFrom(public, port).String() {
		t.Fatalf("CONNECT targets %v, want only the public address", c)
	}
	if hits.Load() != 0 {
		t.Fatal("the loopback server was reached")
	}
}
