package send

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/testenv"
)

func addrPort(t *testing.T, u string) netip.AddrPort {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := netip.ParseAddrPort(pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// Every delivery goes through the proxy, plain http included, to the
// address hookd resolved and checked (not the name), with the proxy's
// credentials; an address the guard refuses is never asked of the proxy.
func TestProxyCarriesDeliveriesToCheckedAddresses(t *testing.T) {
	var remotes []string
	var mu sync.Mutex
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr)
		mu.Unlock()
	}))
	defer rc.Close()
	var otherHits atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { otherHits.Add(1) }))
	defer other.Close()

	proxy := testenv.NewConnectProxy(t, nil)
	rcAddr := addrPort(t, rc.URL)
	dns := newDNSServer(t, func(name string, _ uint16, _ int) []netip.Addr {
		if name == "receiver.test" {
			return []netip.Addr{rcAddr.Addr()}
		}
		return nil
	})
	s := New(Config{Guard: NewGuard(nil, rcAddr), Proxy: proxy.ProxyURL("hookd", "s3cret"), Resolver: dns.resolver()})
	defer s.CloseIdleConnections()

	target := "http://receiver.test:" + itoa(rcAddr.Port()) + "/hook"
	for i := range 3 {
		if out := s.Send(context.Background(), testSub(target), testJob(), time.Now()); out.Class != Delivered {
			t.Fatalf("send %d through the proxy: %+v", i, out)
		}
	}
	mu.Lock()
	got := append([]string(nil), remotes...)
	mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3", len(got))
	}
	for _, r := range got {
		if !proxy.CameThrough(r) {
			t.Errorf("a request came from %s, not from the proxy", r)
		}
	}
	connects := proxy.Connects()
	if len(connects) == 0 || connects[0] != rcAddr.String() {
		t.Fatalf("CONNECT targets %v, want the resolved address %s", connects, rcAddr)
	}
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("hookd:s3cret")); proxy.Auths()[0] != want {
		t.Errorf("Proxy-Authorization %q, want %q", proxy.Auths()[0], want)
	}

	// Another loopback port is not allowed: refused before the proxy is asked.
	before := len(proxy.Connects())
	out := s.Send(context.Background(), testSub(other.URL), testJob(), time.Now())
	if out.Class != Fail || !strings.HasPrefix(out.Err, "blocked: address 127.0.0.1 is not allowed (loopback)") {
		t.Fatalf("blocked target through the proxy: %+v, want fail blocked", out)
	}
	if n := len(proxy.Connects()); n != before {
		t.Fatalf("the proxy was asked %d more CONNECTs for a blocked target", n-before)
	}
	if otherHits.Load() != 0 {
		t.Fatal("the blocked server was reached")
	}
}

// TLS runs inside the tunnel: the certificate is checked against the
// URL's name (SNI and Host carry it) while the proxy is asked for the
// resolved address. A name the certificate does not cover fails.
func TestProxyTLSKeepsNameAndVerification(t *testing.T) {
	type seen struct{ sni, host string }
	got := make(chan seen, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.TLS.ServerName, r.Host}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	defer srv.Close()
	ap := addrPort(t, srv.URL)
	dns := newDNSServer(t, func(name string, _ uint16, _ int) []netip.Addr {
		return []netip.Addr{ap.Addr()} // example.com (in the test certificate) and wrong.test alike
	})
	proxy := testenv.NewConnectProxy(t, nil)
	s := New(Config{Guard: NewGuard(nil, ap), Proxy: proxy.ProxyURL("", ""), Resolver: dns.resolver()})
	defer s.CloseIdleConnections()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	s.transport.TLSClientConfig.RootCAs = roots

	port := ap.Port()
	u := "https://example.com:" + itoa(port) + "/hook"
	out := s.Send(context.Background(), testSub(u), testJob(), time.Now())
	if out.Class != Delivered {
		t.Fatalf("TLS through the proxy: %+v", out)
	}
	if g := <-got; g.sni != "example.com" || g.host != "example.com:"+itoa(port) {
		t.Errorf("server saw SNI %q and Host %q, want example.com and example.com:%d", g.sni, g.host, port)
	}
	if c := proxy.Connects(); len(c) != 1 || c[0] != ap.String() {
		t.Errorf("CONNECT targets %v, want [%s]", c, ap)
	}

	out = s.Send(context.Background(), testSub("https://wrong.test:"+itoa(port)+"/hook"), testJob(), time.Now())
	if out.Class != Retry || !strings.HasPrefix(out.Err, "tls certificate: ") {
		t.Fatalf("a name the certificate does not cover: %+v, want retry on the certificate", out)
	}
}

// A proxy that refuses, or cannot be reached, is named in the error: a
// connection-level failure to retry, not the endpoint's answer.
func TestProxyFailuresNameTheProxy(t *testing.T) {
	rc, _ := recorder(t)
	ap := addrPort(t, rc.URL)
	refusing := testenv.NewConnectProxy(t, func(string) string { return "" })
	out := New(Config{Guard: NewGuard(nil, ap), Proxy: refusing.ProxyURL("", "")}).Send(context.Background(), testSub(rc.URL), testJob(), time.Now())
	want := "egress proxy " + refusing.Listener.Addr().String() + " refused CONNECT " + ap.String() + ": 403 Forbidden"
	if out.Class != Retry || !out.Conn || out.Err != want {
		t.Fatalf("refused CONNECT: %+v, want retry, conn, %q", out, want)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone, _ := url.Parse("http://" + ln.Addr().String())
	ln.Close()
	out = New(Config{Guard: NewGuard(nil, ap), Proxy: gone}).Send(context.Background(), testSub(rc.URL), testJob(), time.Now())
	if out.Class != Retry || !out.Conn || !strings.HasPrefix(out.Err, "egress proxy "+gone.Host+" unreachable: ") {
		t.Fatalf("unreachable proxy: %+v, want retry naming the proxy", out)
	}
}

func TestParseProxy(t *testing.T) {
	for _, ok := range []string{"http://127.0.0.1:4750", "http://user:pw@proxy.internal:4750", "http://[::1]:3128/"} {
		if _, err := ParseProxy(ok); err != nil {
			t.Errorf("ParseProxy(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"https://proxy:4750", "socks5://proxy:1080", "proxy:4750", "http://proxy", "http://:4750",
		"http://proxy:0", "http://proxy:99999", "http://proxy:4750/path", "http://proxy:4750?x=1", "http://user:pw@proxy"} {
		_, err := ParseProxy(bad)
		if err == nil || !strings.HasPrefix(err.Error(), "--egress-proxy") {
			t.Errorf("ParseProxy(%q) = %v, want an error naming --egress-proxy", bad, err)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("ParseProxy(%q) error shows the password: %v", bad, err)
		}
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }
