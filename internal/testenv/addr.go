package testenv

import (
	"net/netip"
	"strings"
)

// The SSRF reference for fuzz tests: what must never be reached, derived
// here from the RFCs by byte comparisons, apart from the guard's own
// tables (internal/send), so a mistake in one is not repeated in the other.

// BlockedIP reports whether ip is one the SSRF guard must refuse when
// nothing is opened: loopback, private, link-local, CGNAT, multicast,
// unspecified, reserved, IPv6 ULA, site-local and link-local, and every
// IPv6 form that embeds a blocked IPv4 address (a zone changes nothing).
func BlockedIP(ip netip.Addr) bool {
	if !ip.IsValid() {
		return true
	}
	if ip.Is4() {
		return blocked4(ip.As4())
	}
	b := ip.As16()
	var v4 [4]byte
	switch {
	case allZero(b[:10]) && b[10] == 0xff && b[11] == 0xff: // ::ffff:a.b.c.d, RFC 4291 2.5.5.2
		copy(v4[:], b[12:])
		return blocked4(v4)
	case allZero(b[:12]): // ::, ::1 and deprecated ::a.b.c.d, RFC 4291
		return true
	case allZero(b[:8]) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0: // ::ffff:0:a.b.c.d, RFC 2765
		copy(v4[:], b[12:])
		return blocked4(v4)
	case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b:
		if allZero(b[4:12]) { // 64:ff9b::/96 NAT64, RFC 6052
			copy(v4[:], b[12:])
			return blocked4(v4)
		}
		return b[4] == 0 && b[5] == 1 // 64:ff9b:1::/48 local-use NAT64, RFC 8215
	case b[0] == 0x20 && b[1] == 0x02: // 2002::/16 6to4, RFC 3056
		copy(v4[:], b[2:6])
		return blocked4(v4)
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // 2001::/32 Teredo, RFC 4380: client address inverted
		for i := range v4 {
			v4[i] = ^b[12+i]
		}
		return blocked4(v4)
	case b[0]&0xfe == 0xfc: // fc00::/7 unique local, RFC 4193
		return true
	case b[0] == 0xfe && b[1]&0xc0 == 0x80: // fe80::/10 link-local, RFC 4291
		return true
	case b[0] == 0xfe && b[1]&0xc0 == 0xc0: // fec0::/10 site-local, RFC 3879
		return true
	case b[0] == 0xff: // ff00::/8 multicast, RFC 4291
		return true
	}
	return false
}

func blocked4(a [4]byte) bool {
	switch {
	case a[0] == 0: // "this network", RFC 791
	case a[0] == 10: // private, RFC 1918
	case a[0] == 100 && a[1]&0xc0 == 64: // 100.64.0.0/10 carrier-grade NAT, RFC 6598
	case a[0] == 127: // loopback, RFC 1122
	case a[0] == 169 && a[1] == 254: // link-local and cloud metadata, RFC 3927
	case a[0] == 172 && a[1]&0xf0 == 16: // private, RFC 1918
	case a[0] == 192 && a[1] == 168: // private, RFC 1918
	case a[0] >= 224: // multicast (RFC 5771), reserved and broadcast (RFC 1112, 919)
	default:
		return false
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// PublicIP reports whether ip lies where IANA's special-purpose registries
// hold nothing, so the guard must let it through: IPv4 in a /8 with no
// special-purpose block, its IPv4-mapped, NAT64 and 6to4 forms, and IPv6
// global unicast from 2003:: to 3ffe:ffff:: (2001::/16 and 3fff::/16 hold
// special blocks; 2002::/16 is 6to4).
func PublicIP(ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	if ip.Is4() {
		return public4(ip.As4())
	}
	b := ip.As16()
	var v4 [4]byte
	switch {
	case allZero(b[:10]) && b[10] == 0xff && b[11] == 0xff:
		copy(v4[:], b[12:])
		return public4(v4)
	case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && allZero(b[4:12]):
		copy(v4[:], b[12:])
		return public4(v4)
	case b[0] == 0x20 && b[1] == 0x02:
		copy(v4[:], b[2:6])
		return public4(v4)
	}
	first := uint16(b[0])<<8 | uint16(b[1])
	return first >= 0x2003 && first <= 0x3ffe
}

func public4(a [4]byte) bool {
	switch o := a[0]; {
	case o >= 1 && o <= 9, o >= 11 && o <= 99, o >= 101 && o <= 126, o >= 128 && o <= 168,
		o == 170, o == 171, o >= 173 && o <= 191, o >= 193 && o <= 197, o >= 199 && o <= 202,
		o >= 204 && o <= 223:
		return true
	}
	return false
}

// ReadHost lists every address a URL's hostname can be read as: by
// net/netip (with or without [ ] around it), and by inet_aton(3) as glibc
// reads it (one to four parts, each decimal, 0-octal or 0x-hex, the last
// filling the remaining bytes), with or without one trailing dot. An empty
// list means the hostname is a name, resolved (and checked) at each dial.
func ReadHost(host string) []netip.Addr {
	var out []netip.Addr
	forms := []string{host}
	if inner, ok := strings.CutPrefix(host, "["); ok {
		if inner, ok = strings.CutSuffix(inner, "]"); ok {
			forms = append(forms, inner)
		}
	}
	for _, s := range forms {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip)
		}
		if ip, ok := InetAton(s); ok {
			out = append(out, ip)
		}
		if trimmed, ok := strings.CutSuffix(s, "."); ok {
			if ip, ok := InetAton(trimmed); ok {
				out = append(out, ip)
			}
		}
	}
	return out
}

// InetAton reads s as glibc's inet_aton does (without its tolerance of
// trailing whitespace, which no hostname holds): parts split by dots, each
// begun by a digit, read like strtoul with base 0, none over 32 bits, every
// part but the last at most 255, the last at most what its bytes hold.
func InetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, ok := atonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	last := len(vals) - 1
	for _, v := range vals[:last] {
		if v > 255 {
			return netip.Addr{}, false
		}
	}
	if vals[last] > uint64(0xffffffff)>>(8*last) {
		return netip.Addr{}, false
	}
	var n uint64
	for i, v := range vals[:last] {
		n |= v << (8 * (3 - i))
	}
	n |= vals[last]
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// atonPart reads one part digit by digit, as strtoul(p, &end, 0) must
// consume all of p.
func atonPart(p string) (uint64, bool) {
	if p == "" || p[0] < '0' || p[0] > '9' {
		return 0, false
	}
	base, digits := uint64(10), p
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, digits = 16, p[2:]
		if digits == "" { // strtoul reads "0" and stops at the x
			return 0, false
		}
	case p[0] == '0':
		base = 8
	}
	var v uint64
	for _, c := range []byte(digits) {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		v = v*base + d
		if v > 0xffffffff {
			return 0, false
		}
	}
	return v, true
}
