package app

import (
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
)

func receiverAddr(t *testing.T, rc *testenv.Receiver) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(rc.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// --allow-network 127.0.0.1:PORT opens that receiver and nothing else on
// loopback: another port of the same address is refused at dial time.
func TestAllowNetworkHostPortOpensOnlyThatPort(t *testing.T) {
	t.Parallel()
	allowed, other := testenv.NewReceiver(t), testenv.NewReceiver(t)
	e := serve(t, Config{
		DB: filepath.Join(t.TempDir(), "hookd.db"), AdminToken: adminToken, Version: "test",
		AllowAddrs: []netip.AddrPort{receiverAddr(t, allowed)},
		Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	e.subscribe(e.admin, allowed.URL+"/", []string{"a.*"}, nil)
	// Registration lets the address through (a rule names it); the dial checks the port.
	e.subscribe(e.admin, other.URL+"/", []string{"b.*"}, nil)

	e.waitDelivery(e.onlyDelivery(e.post(e.admin, "a.x", map[string]any{})), "delivered", 10*time.Second)
	got := e.waitDelivery(e.onlyDelivery(e.post(e.admin, "b.x", map[string]any{})), "failed", 10*time.Second)
	if want := "blocked: address 127.0.0.1 is not allowed (loopback)"; got["last_error"] != want {
		t.Errorf("last_error %q, want %q", got["last_error"], want)
	}
	if allowed.Count() != 1 || other.Count() != 0 {
		t.Fatalf("allowed receiver got %d, the other %d; want 1 and 0", allowed.Count(), other.Count())
	}
}

// hookd never delivers to its own API, even with all of loopback open: the
// delivery fails at once as blocked, and no answer of the API is recorded.
func TestNeverDeliversToOwnListener(t *testing.T) {
	t.Parallel()
	e := start(t, true) // 127.0.0.0/8 and ::1 allowed
	e.subscribe(e.admin, e.base+"/v1/events", []string{"*"}, nil)
	id := e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{}))
	got := e.waitDelivery(id, "failed", 10*time.Second)
	own := strings.TrimPrefix(e.base, "http://")
	status, _ := got["last_status"].(float64)
	if want := "blocked: address " + own + " is hookd's own listener"; got["last_error"] != want || status != 0 {
		t.Fatalf("delivery to hookd's own API: last_status %v, last_error %q; want no status and %q", got["last_status"], got["last_error"], want)
	}
	for _, a := range got["attempts"].([]any) {
		if r := a.(map[string]any)["response"]; r != "" && r != nil {
			t.Fatalf("an answer of hookd's own API was recorded: %q", r)
		}
	}
}

// Listen refuses deliveries to the listener it opens, before anything is
// served on it; so does the profiler's listener, opened through it.
func TestListenRefusesDeliveriesToIt(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	ln, err := e.app.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = e.app.guard.Control("tcp", ln.Addr().String(), nil)
	if err == nil || !strings.Contains(err.Error(), "hookd's own listener") {
		t.Fatalf("dialling a listener opened by Listen: %v, want refused as hookd's own", err)
	}
	if err := e.app.guard.Control("tcp", "127.0.0.1:1", nil); err != nil {
		t.Fatalf("another loopback port with 127.0.0.0/8 open: %v", err)
	}
}

// A CIDR wider than a /8 (IPv4) or /32 (IPv6) is named in a warning at
// start; narrower ones are not.
func TestWideAllowNetworkWarns(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	serve(t, Config{
		DB: filepath.Join(t.TempDir(), "hookd.db"), AdminToken: adminToken, Version: "test",
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"),
			netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("fd00::/32")},
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	var warned []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "--allow-network opens a range wider") {
			_, cidr, _ := strings.Cut(line, "cidr=")
			warned = append(warned, cidr)
		}
	}
	if strings.Join(warned, " ") != "0.0.0.0/0 ::/0" {
		t.Fatalf("warned for %q, want 0.0.0.0/0 and ::/0 only; log:\n%s", warned, logs.String())
	}
}

// --egress-proxy: the node's deliveries go through the proxy, to the
// address hookd checked.
func TestDeliveriesGoThroughEgressProxy(t *testing.T) {
	t.Parallel()
	rc := testenv.NewReceiver(t)
	proxy := testenv.NewConnectProxy(t, nil)
	e := serve(t, Config{
		DB: filepath.Join(t.TempDir(), "hookd.db"), AdminToken: adminToken, Version: "test",
		AllowAddrs:  []netip.AddrPort{receiverAddr(t, rc)},
		EgressProxy: proxy.ProxyURL("hookd", "pw"),
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	e.subscribe(e.admin, rc.URL+"/", []string{"*"}, nil)
	for range 3 {
		e.waitDelivery(e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{})), "delivered", 10*time.Second)
	}
	if c := proxy.Connects(); len(c) == 0 || c[0] != receiverAddr(t, rc).String() {
		t.Fatalf("CONNECTs %v, want the receiver's address", c)
	}
	if rc.Count() != 3 {
		t.Fatalf("receiver got %d, want 3", rc.Count())
	}
}
