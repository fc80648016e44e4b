package send

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestGuardAllowed(t *testing.T) {
	blocked := []string{
		"127.0.0.1", "127.255.255.254", "::1", "::",
		"10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "fe80::1", "fe80::1%eth0",
		"100.64.0.1", "100.127.255.255",
		"224.0.0.1", "239.255.255.250", "ff02::1", "ff0e::1",
		"0.0.0.0", "0.1.2.3", "255.255.255.255", "240.0.0.1",
		"fc00::1", "fd12:3456::1",
		"192.0.0.170", "192.0.2.1", "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9",
		"2001:db8::1", "fec0::1",
		// IPv4-mapped and -compatible forms of blocked addresses.
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:0.0.0.0",
		"::127.0.0.1", "::ffff:0:127.0.0.1",
		// NAT64 and 6to4 wrapping a blocked IPv4 address.
		"64:ff9b::127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::", "2002:a00:1::1",
		"64:ff9b:1::1", "2001::1",
	}
	allowed := []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "172.15.255.255", "172.32.0.1",
		"100.63.255.255", "100.128.0.1", "169.253.0.1", "192.0.1.1", "198.20.0.1", "223.255.255.255",
		"2606:4700:4700::1111", "2a00:1450:4001:82a::200e",
		"::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1",
	}
	g := NewGuard(nil)
	for _, s := range blocked {
		if g.Allowed(netip.MustParseAddr(s)) {
			t.Errorf("%s allowed, want blocked", s)
		}
	}
	for _, s := range allowed {
		if !g.Allowed(netip.MustParseAddr(s)) {
			t.Errorf("%s blocked (%s), want allowed", s, g.reason(netip.MustParseAddr(s)))
		}
	}
	if g.Allowed(netip.Addr{}) {
		t.Error("zero Addr allowed")
	}
}

func TestGuardAllowList(t *testing.T) {
	g := NewGuard([]netip.Prefix{
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("10.1.2.3/16"), // unmasked on purpose
		netip.MustParsePrefix("::ffff:192.168.7.0/120"),
	})
	for s, want := range map[string]bool{
		"127.0.0.1":          true,
		"::ffff:127.0.0.1":   true, // the mapped form of an allowed address
		"64:ff9b::127.0.0.1": true, // NAT64 reaches the allowed IPv4 address
		"10.1.200.1":         true,
		"192.168.7.9":        true,
		"10.2.0.1":           false,
		"192.168.8.1":        false,
		"::1":                false, // allowing IPv4 loopback does not open IPv6 loopback
		"169.254.169.254":    false,
	} {
		if got := g.Allowed(netip.MustParseAddr(s)); got != want {
			t.Errorf("Allowed(%s) = %v, want %v", s, got, want)
		}
	}
}

func TestCheckHost(t *testing.T) {
	g := NewGuard(nil)
	blocked := map[string]string{
		"127.0.0.1":           "127.0.0.1",
		"[::1]":               "::1",
		"::1":                 "::1",
		"[::ffff:127.0.0.1]":  "::ffff:127.0.0.1",
		"0x7f000001":          "127.0.0.1",
		"0X7F000001":          "127.0.0.1",
		"2130706433":          "127.0.0.1",
		"0177.0.0.1":          "127.0.0.1",
		"127.1":               "127.0.0.1",
		"127.0.1":             "127.0.0.1",
		"0x7f.1":              "127.0.0.1",
		"169.254.169.254":     "169.254.169.254",
		"0xa9fea9fe":          "169.254.169.254",
		"0251.0376.0251.0376": "169.254.169.254",
		"10.0.0.1.":           "10.0.0.1",
		"0":                   "0.0.0.0",
		"[fe80::1%eth0]":      "fe80::1",
	}
	for host, addr := range blocked {
		err := g.CheckHost(host)
		if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "address "+addr+" ") {
			t.Errorf("CheckHost(%q) = %v, want ErrBlocked naming %s", host, err, addr)
		}
	}
	for _, host := range []string{
		"example.com", "hooks.example.com", "localhost", // names: checked at dial time
		"8.8.8.8", "[2606:4700:4700::1111]", "0x08080808", "134744072",
		"1.2.3.4.5", "0x1.0x2.0x3.0x4.0x5", "256.1.1.1.example", "0xg", "08.1.1.1", "999999999999",
	} {
		if err := g.CheckHost(host); err != nil {
			t.Errorf("CheckHost(%q) = %v, want nil", host, err)
		}
	}
}

func TestParseInetAton(t *testing.T) {
	for in, want := range map[string]string{
		"1.2.3.4": "1.2.3.4", "1.2.3": "1.2.0.3", "1.2": "1.0.0.2", "16909060": "1.2.3.4",
		"0x01.0x02.0x03.0x04": "1.2.3.4", "01.02.03.04": "1.2.3.4", "1.65535": "1.0.255.255",
		"1.2.65535": "1.2.255.255", "4294967295": "255.255.255.255",
	} {
		got, ok := parseInetAton(in)
		if !ok || got.String() != want {
			t.Errorf("parseInetAton(%q) = %v, %v; want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "4294967296", "1.16777216x", "256.1.1.1", "1.2.3.256", "1.2.65536", "1..2", "09", "0x", "-1", "+1", "1.2.3.4.5", "a.b.c.d"} {
		if got, ok := parseInetAton(in); ok {
			t.Errorf("parseInetAton(%q) = %v, want failure", in, got)
		}
	}
}

func TestControl(t *testing.T) {
	g := NewGuard(nil)
	for _, addr := range []string{"127.0.0.1:80", "[::1]:443", "[::ffff:127.0.0.1]:8080", "169.254.169.254:80", "[fe80::1%lo]:80", "not-an-address"} {
		err := g.Control("tcp", addr, nil)
		if !errors.Is(err, ErrBlocked) {
			t.Errorf("Control(%q) = %v, want ErrBlocked", addr, err)
		}
	}
	err := g.Control("tcp4", "169.254.169.254:80", nil)
	if want := "blocked: address 169.254.169.254 is not allowed"; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Control error = %v, want prefix %q", err, want)
	}
	if err := g.Control("tcp", "8.8.8.8:443", nil); err != nil {
		t.Errorf("Control(8.8.8.8:443) = %v, want nil", err)
	}
}

// A host:port rule opens that address on that port only; CheckHost lets
// its address through registration, the dial judges the port.
func TestGuardAddrRules(t *testing.T) {
	g := NewGuard(nil, netip.MustParseAddrPort("127.0.0.1:9000"), netip.MustParseAddrPort("[::ffff:10.0.0.7]:443"), netip.MustParseAddrPort("[::1]:9000"))
	for addr, ok := range map[string]bool{
		"127.0.0.1:9000":          true,
		"[::ffff:127.0.0.1]:9000": true, // the mapped form of the same address
		"127.0.0.1:9001":          false,
		"127.0.0.2:9000":          false,
		"10.0.0.7:443":            true, // a mapped rule is stored unmapped
		"10.0.0.7:80":             false,
		"[::1]:9000":              true,
		"[::1]:9001":              false,
		"169.254.169.254:80":      false,
	} {
		if err := g.Control("tcp", addr, nil); (err == nil) != ok {
			t.Errorf("Control(%s) = %v, want allowed %v", addr, err, ok)
		}
	}
	for _, host := range []string{"127.0.0.1", "[::1]", "10.0.0.7"} {
		if err := g.CheckHost(host); err != nil {
			t.Errorf("CheckHost(%s) = %v, want nil (a rule names it; the port is checked at dial)", host, err)
		}
	}
	if err := g.CheckHost("127.0.0.2"); !errors.Is(err, ErrBlocked) {
		t.Errorf("CheckHost(127.0.0.2) = %v, want blocked", err)
	}
}

// hookd's own listeners are refused whatever is allowed; a listener on an
// unspecified address stands for every local address on its port.
func TestGuardDeniesOwnListeners(t *testing.T) {
	g := NewGuard([]netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")},
		netip.MustParseAddrPort("127.0.0.1:8080"))
	if err := g.Control("tcp", "127.0.0.1:8080", nil); err != nil {
		t.Fatalf("before Deny: %v", err)
	}
	g.Deny(netip.MustParseAddrPort("127.0.0.1:8080"), netip.MustParseAddrPort("0.0.0.0:9090"), netip.MustParseAddrPort("[::]:7070"))
	refused := []string{
		"127.0.0.1:8080", "[::ffff:127.0.0.1]:8080", "0.0.0.0:8080", "[::]:8080", // the listener, and what reaches this host
		"127.0.0.1:9090", "127.0.0.2:9090", "0.0.0.0:9090", // 0.0.0.0: every local IPv4 address
		"127.0.0.1:7070", "[::1]:7070", "[::]:7070", // ::: every local address, both families
	}
	allowed := []string{"127.0.0.2:8080", "127.0.0.1:8081", "[::1]:8080", "[::1]:9090", "8.8.8.8:9090", "8.8.8.8:7070"}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		ip = ip.Unmap()
		if ip.IsLinkLocalUnicast() {
			continue // needs a zone to dial
		}
		refused = append(refused, netip.AddrPortFrom(ip, 7070).String())
		if ip.Is4() {
			refused = append(refused, netip.AddrPortFrom(ip, 9090).String())
		}
	}
	for _, addr := range refused {
		err := g.Control("tcp", addr, nil)
		if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "hookd's own listener") {
			t.Errorf("Control(%s) = %v, want blocked as hookd's own listener", addr, err)
		}
	}
	for _, addr := range allowed {
		if err := g.Control("tcp", addr, nil); err != nil {
			t.Errorf("Control(%s) = %v, want allowed", addr, err)
		}
	}
}

func TestParseAllow(t *testing.T) {
	dns := newDNSServer(t, func(name string, _ uint16, _ int) []netip.Addr {
		if name == "receiver.test" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.9"), netip.MustParseAddr("::1")}
		}
		return nil
	})
	a, err := ParseAllow(t.Context(), dns.resolver(), []string{
		"10.1.2.3/16", "::ffff:192.168.7.0/120", "127.0.0.1:9000", "[::1]:9001", "[::ffff:127.0.0.2]:9002", "receiver.test:9003",
	})
	if err != nil {
		t.Fatal(err)
	}
	wantNets := []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("192.168.7.0/24")}
	wantAddrs := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9000"), netip.MustParseAddrPort("[::1]:9001"),
		netip.MustParseAddrPort("127.0.0.2:9002"), netip.MustParseAddrPort("127.0.0.9:9003"), netip.MustParseAddrPort("[::1]:9003")}
	cmp := func(x, y netip.AddrPort) int { return x.Compare(y) }
	slices.SortFunc(a.Addrs, cmp) // the resolver orders a name's addresses its own way
	slices.SortFunc(wantAddrs, cmp)
	if !slices.Equal(a.Networks, wantNets) || !slices.Equal(a.Addrs, wantAddrs) {
		t.Fatalf("ParseAllow = %v %v, want %v %v", a.Networks, a.Addrs, wantNets, wantAddrs)
	}
	for _, bad := range []string{"127.0.0.1", "localhost", "10.0.0.0/33", "nonsense/8", "127.0.0.1:0", "127.0.0.1:70000",
		"127.0.0.1:http", ":9000", "[fe80::1%eth0]:9000", "unknown.test:9000"} {
		_, err := ParseAllow(t.Context(), dns.resolver(), []string{bad})
		if err == nil || !strings.HasPrefix(err.Error(), `--allow-network "`+bad+`"`) {
			t.Errorf("ParseAllow(%q) = %v, want an error naming it", bad, err)
		}
	}
}

func TestAllowWide(t *testing.T) {
	a := Allow{Networks: []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"), netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("8.0.0.0/7"), netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("2000::/3"),
		netip.MustParsePrefix("::ffff:0.0.0.0/96"), netip.MustParsePrefix("127.0.0.0/8"),
	}}
	want := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0"), netip.MustParsePrefix("8.0.0.0/7"),
		netip.MustParsePrefix("2000::/3"), netip.MustParsePrefix("0.0.0.0/0")}
	if got := a.Wide(); !slices.Equal(got, want) {
		t.Fatalf("Wide() = %v, want %v", got, want)
	}
}
