// Package send signs and POSTs deliveries, classifies the answers, and keeps
// the HTTP client from reaching addresses it must not (SSRF).
package send

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// ErrBlocked is wrapped by every refusal to reach a forbidden address.
var ErrBlocked = errors.New("blocked")

// Guard decides which IP addresses deliveries may reach. Endpoint URLs are
// attacker-controlled, so everything internal is refused unless an operator
// opened it with --allow-network, and hookd's own listeners are refused
// whatever is open.
type Guard struct {
	allow     []netip.Prefix   // whole ranges
	allowAddr []netip.AddrPort // one address and port each (unmapped)

	mu   sync.Mutex                       // serialises Deny
	deny atomic.Pointer[[]netip.AddrPort] // hookd's own listeners; read at every dial
}

type blockedRange struct {
	p      netip.Prefix
	reason string
}

func mustRanges(pairs ...string) []blockedRange {
	out := make([]blockedRange, 0, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, blockedRange{netip.MustParsePrefix(pairs[i]), pairs[i+1]})
	}
	return out
}

// IANA special-purpose ranges that are never a customer's public endpoint.
var blocked4 = mustRanges(
	"0.0.0.0/8", "unspecified (this network)",
	"10.0.0.0/8", "private",
	"100.64.0.0/10", "carrier-grade NAT",
	"127.0.0.0/8", "loopback",
	"169.254.0.0/16", "link-local (cloud metadata)",
	"172.16.0.0/12", "private",
	"192.0.0.0/24", "IETF protocol assignments",
	"192.0.2.0/24", "documentation",
	"192.88.99.0/24", "6to4 relay anycast",
	"192.168.0.0/16", "private",
	"198.18.0.0/15", "benchmarking",
	"198.51.100.0/24", "documentation",
	"203.0.113.0/24", "documentation",
	"224.0.0.0/4", "multicast",
	"240.0.0.0/4", "reserved", // includes broadcast 255.255.255.255
)

var blocked6 = mustRanges(
	"::/96", "unspecified, loopback or IPv4-compatible", // ::, ::1 and deprecated ::a.b.c.d
	"::ffff:0:0:0/96", "IPv4-translated",
	"64:ff9b:1::/48", "local-use NAT64",
	"100::/64", "discard-only",
	"2001::/23", "IETF protocol assignments (incl. Teredo)",
	"2001:db8::/32", "documentation",
	"3fff::/20", "documentation",
	"fc00::/7", "unique local",
	"fe80::/10", "link-local",
	"fec0::/10", "site-local",
	"ff00::/8", "multicast",
)

// Prefixes whose addresses embed an IPv4 address that is what really gets reached.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// NewGuard returns a guard that blocks internal and special-purpose
// addresses except those inside allow, and those of addrs on their port.
func NewGuard(allow []netip.Prefix, addrs ...netip.AddrPort) *Guard {
	g := &Guard{}
	for _, p := range allow {
		g.allow = append(g.allow, normalPrefix(p))
	}
	for _, ap := range addrs {
		g.allowAddr = append(g.allowAddr, netip.AddrPortFrom(ap.Addr().WithZone("").Unmap(), ap.Port()))
	}
	return g
}

// normalPrefix is p masked, an IPv4-mapped prefix as the IPv4 prefix it means.
func normalPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked()
}

// Deny refuses addrs whatever is allowed: they are hookd's own listeners,
// which a tenant must never reach (its API, metrics, profiler). An
// unspecified address (0.0.0.0, ::) stands for every local address on its
// port. Safe to call while deliveries are being dialled.
func (g *Guard) Deny(addrs ...netip.AddrPort) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var next []netip.AddrPort
	if cur := g.deny.Load(); cur != nil {
		next = append(next, *cur...)
	}
	for _, ap := range addrs {
		ap = netip.AddrPortFrom(ap.Addr().WithZone("").Unmap(), ap.Port())
		if !slices.Contains(next, ap) {
			next = append(next, ap)
		}
	}
	g.deny.Store(&next)
}

// Allowed reports whether ip may be dialled on any port (host:port rules
// aside).
func (g *Guard) Allowed(ip netip.Addr) bool {
	return g.reason(ip) == ""
}

// addrRule reports whether a host:port rule names ip (on any port).
func (g *Guard) addrRule(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	for _, ap := range g.allowAddr {
		if ap.Addr() == ip {
			return true
		}
	}
	return false
}

// check decides one address about to be dialled: hookd's own listeners
// first, then the host:port rules, then the ranges.
func (g *Guard) check(ap netip.AddrPort) error {
	ip := ap.Addr().WithZone("").Unmap()
	if g.own(ip, ap.Port()) {
		return fmt.Errorf("%w: address %s is hookd's own listener", ErrBlocked, netip.AddrPortFrom(ip, ap.Port()))
	}
	for _, a := range g.allowAddr {
		if a.Addr() == ip && a.Port() == ap.Port() {
			return nil
		}
	}
	if r := g.reason(ip); r != "" {
		return blockedErr(ip, r)
	}
	return nil
}

// own reports whether ip:port reaches one of hookd's own listeners.
// Dialling 0.0.0.0 or :: reaches this host too.
func (g *Guard) own(ip netip.Addr, port uint16) bool {
	deny := g.deny.Load()
	if deny == nil {
		return false
	}
	for _, d := range *deny {
		if d.Port() != port {
			continue
		}
		switch a := d.Addr(); {
		case a.IsUnspecified():
			// 0.0.0.0 listens on every IPv4 address of this host; :: on
			// every address (Go's listeners are dual-stack).
			if (a.Is6() || ip.Is4()) && isLocal(ip) {
				return true
			}
		case ip == a, ip.IsUnspecified():
			return true
		}
	}
	return false
}

// isLocal reports whether ip is an address of this host. Interfaces are
// read at each call (only for a dial to a listener's port), so an address
// gained since start counts.
func isLocal(ip netip.Addr) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: refuse rather than risk reaching ourselves
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if local, ok := netip.AddrFromSlice(n.IP); ok && local.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// reason says why ip is blocked, or "" when it is allowed.
func (g *Guard) reason(ip netip.Addr) string {
	if !ip.IsValid() {
		return "invalid address"
	}
	// Zoned addresses never match a Prefix, so drop the zone before checking.
	ip = ip.WithZone("").Unmap()
	for _, p := range g.allow {
		if p.Contains(ip) {
			return ""
		}
	}
	if ip.Is4() {
		return lookup(blocked4, ip)
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip):
		return embedded(g, netip.AddrFrom4([4]byte(b[12:16])), "NAT64")
	case sixToFour.Contains(ip):
		return embedded(g, netip.AddrFrom4([4]byte(b[2:6])), "6to4")
	}
	return lookup(blocked6, ip)
}

func embedded(g *Guard, v4 netip.Addr, kind string) string {
	if r := g.reason(v4); r != "" {
		return kind + " form of " + v4.String() + ": " + r
	}
	return ""
}

func lookup(ranges []blockedRange, ip netip.Addr) string {
	for _, r := range ranges {
		if r.p.Contains(ip) {
			return r.reason
		}
	}
	return ""
}

// blockedErr names the refused address and why; it wraps ErrBlocked.
func blockedErr(ip netip.Addr, reason string) error {
	return fmt.Errorf("%w: address %s is not allowed (%s)", ErrBlocked, ip.WithZone(""), reason)
}

// CheckHost validates an endpoint's hostname at registration. IP literals,
// including the legacy inet_aton spellings some resolvers still accept
// (0x7f000001, 2130706433, 0177.0.0.1, 127.1), are checked now; names pass,
// because Control checks whatever they resolve to at every dial. An address
// a host:port rule names passes too: its port is checked when dialled.
func (g *Guard) CheckHost(hostname string) error {
	// Judged as given and without brackets: "::0%]" is :: with the zone
	// "]" to a parser that takes it whole, and nothing once trimmed.
	for _, h := range []string{hostname, strings.TrimSuffix(strings.TrimPrefix(hostname, "["), "]")} {
		ip, err := netip.ParseAddr(h)
		if err != nil {
			var ok bool
			if ip, ok = parseInetAton(strings.TrimSuffix(h, ".")); !ok {
				continue
			}
		}
		if r := g.reason(ip); r != "" && !g.addrRule(ip) {
			return blockedErr(ip, r)
		}
	}
	return nil
}

// Control is for net.Dialer.Control: it runs after DNS resolution with the
// address actually being dialled, so DNS rebinding cannot slip past it.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dial address %q", ErrBlocked, address)
	}
	return g.check(ap)
}

// parseInetAton parses the forms inet_aton(3) accepts: one to four parts,
// each decimal, octal (leading 0) or hex (0x), the last filling the
// remaining bytes.
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if s == "" || len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, ok := parseAtonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	last := len(vals) - 1
	for _, v := range vals[:last] {
		if v > 0xff {
			return netip.Addr{}, false
		}
	}
	if vals[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	var n uint64
	for _, v := range vals[:last] {
		n = n<<8 | v
	}
	n = n<<(8*(4-last)) | vals[last]
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

func parseAtonPart(p string) (uint64, bool) {
	base := 10
	switch {
	case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, p = 16, p[2:]
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	}
	if p == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(p, base, 32)
	return v, err == nil
}
