package send

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"hookd/internal/testenv"
)

// FuzzGuard feeds the SSRF check every address form. raw's first 16 bytes
// are an IPv6 address and its first 4 an IPv4 address, checked as they are
// and wrapped in each IPv6 form that reaches an IPv4 address (mapped,
// NAT64, 6to4); the IPv4 address is also spelled every way inet_aton reads
// and given to CheckHost, as is host. With nothing opened, whatever the
// RFCs make internal (testenv.BlockedIP, derived apart from the guard's
// tables) is refused, and ordinary public addresses are let through.
func FuzzGuard(f *testing.F) {
	for _, s := range []struct {
		raw  []byte
		host string
	}{
		{[]byte{127, 0, 0, 1}, "0x7f000001"},
		{[]byte{169, 254, 169, 254}, "[::ffff:169.254.169.254]"},
		{[]byte{10, 0, 0, 1}, "012.0.0.1"},
		{[]byte{8, 8, 8, 8}, "8.8.8.8."},
		{netip.MustParseAddr("64:ff9b::7f00:1").AsSlice(), "64:ff9b::127.0.0.1"},
		{netip.MustParseAddr("2002:a9fe:a9fe::1").AsSlice(), "2002:a9fe:a9fe::1"},
		{netip.MustParseAddr("fe80::1").AsSlice(), "fe80::1%eth0"},
		{netip.MustParseAddr("2606:4700:4700::1111").AsSlice(), "2130706433"},
		{nil, ""},
	} {
		f.Add(s.raw, s.host, uint16(443))
	}
	g := NewGuard(nil)
	f.Fuzz(func(t *testing.T, raw []byte, host string, port uint16) {
		var b4 [4]byte
		var b16 [16]byte
		copy(b4[:], raw)
		copy(b16[:], raw)
		v4 := netip.AddrFrom4(b4)
		v6 := netip.AddrFrom16(b16)
		// 6to4 carries the IPv4 address in bytes 2-5; the rest is raw's.
		six := b16
		six[0], six[1] = 0x20, 0x02
		copy(six[2:6], b4[:])
		for _, ip := range []netip.Addr{
			v4, v6, v6.WithZone("eth0"),
			netip.AddrFrom16(mappedForm(b4)),
			netip.AddrFrom16(nat64Form(b4)),
			netip.AddrFrom16(six),
		} {
			checkAddr(t, g, ip, port)
		}
		// Every spelling of v4 is refused exactly when v4 is.
		for _, s := range spellings(b4) {
			err := checkHost(t, g, s)
			if testenv.PublicIP(v4) && err != nil {
				t.Errorf("CheckHost(%q) = %v; it reads as %s, a public address", s, err, v4)
			}
		}
		for _, s := range []string{v6.String(), "[" + v6.String() + "]", v6.StringExpanded(), v6.String() + "%eth0"} {
			checkHost(t, g, s)
		}
		checkHost(t, g, host)
	})
}

// checkAddr: Allowed refuses what the RFCs make internal and lets public
// addresses through; the dialer's check agrees with it on any port.
func checkAddr(t *testing.T, g *Guard, ip netip.Addr, port uint16) {
	t.Helper()
	allowed := g.Allowed(ip)
	if allowed && testenv.BlockedIP(ip) {
		t.Errorf("Allowed(%s) = true, want false: it is internal", ip)
	}
	if !allowed && testenv.PublicIP(ip) {
		t.Errorf("Allowed(%s) = false (%s), want true: it is public", ip, g.reason(ip))
	}
	ap := netip.AddrPortFrom(ip, port).String()
	err := g.Control("tcp", ap, nil)
	if (err == nil) != allowed {
		t.Errorf("Control(%s) = %v but Allowed(%s) = %v", ap, err, ip, allowed)
	}
	if err != nil && !errors.Is(err, ErrBlocked) {
		t.Errorf("Control(%s) = %v, want an error wrapping ErrBlocked", ap, err)
	}
}

// checkHost: CheckHost refuses every string that net/netip or inet_aton
// reads as an internal address, and lets a public IP literal through. It
// returns CheckHost's answer.
func checkHost(t *testing.T, g *Guard, host string) error {
	t.Helper()
	err := g.CheckHost(host)
	if err != nil && !errors.Is(err, ErrBlocked) {
		t.Errorf("CheckHost(%q) = %v, want nil or an error wrapping ErrBlocked", host, err)
	}
	if err == nil {
		for _, ip := range testenv.ReadHost(host) {
			if testenv.BlockedIP(ip) {
				t.Errorf("CheckHost(%q) = nil; it reads as %s, which is internal", host, ip)
			}
		}
	}
	if ip, perr := netip.ParseAddr(host); perr == nil && testenv.PublicIP(ip) && err != nil {
		t.Errorf("CheckHost(%q) = %v, want nil: it is a public address", host, err)
	}
	return err
}

func mappedForm(b [4]byte) [16]byte {
	return [16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}
}

func nat64Form(b [4]byte) [16]byte {
	return [16]byte{0: 0, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}
}

// spellings are the ways a resolver or a URL may write one IPv4 address:
// dotted, as one number (decimal, hex, octal), in two or three parts, in
// octal and hex parts, with a trailing dot, and in IPv6 forms.
func spellings(b [4]byte) []string {
	n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	out := []string{
		fmt.Sprintf("%d.%d.%d.%d", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("%d", n),
		fmt.Sprintf("0x%x", n),
		fmt.Sprintf("0X%08X", n),
		fmt.Sprintf("0%o", n),
		fmt.Sprintf("%d.%d", b[0], n&0xffffff),
		fmt.Sprintf("%d.%d.%d", b[0], b[1], n&0xffff),
		fmt.Sprintf("0%o.0%o.0%o.0%o", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("0x%x.0x%x.0x%x.0x%x", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("::ffff:%d.%d.%d.%d", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("[::ffff:%d.%d.%d.%d]", b[0], b[1], b[2], b[3]),
		fmt.Sprintf("::ffff:%x:%x", n>>16, n&0xffff),
		fmt.Sprintf("64:ff9b::%d.%d.%d.%d", b[0], b[1], b[2], b[3]),
	}
	for _, s := range out[:9] {
		out = append(out, s+".")
	}
	return out
}
