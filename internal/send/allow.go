package send

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Allow is what --allow-network opens past the guard.
type Allow struct {
	Networks []netip.Prefix   // CIDR rules: every address and port in the range
	Addrs    []netip.AddrPort // host:port rules: that address, that port only
}

// ParseAllow reads --allow-network values. A CIDR ("127.0.0.0/8",
// "::1/128") opens a range. An address and port ("127.0.0.1:9000",
// "[::1]:9000") opens only that port of that address. A name and port
// ("localhost:9000") is resolved now, with r, and opens the addresses it has
// now on that port: the rule is kept as addresses, not as a name, so
// whatever the name resolves to later (DNS rebinding, a changed record) is
// opened only if some other rule allows it; a URL reaches an opened
// address under any name. Each value is checked, and an error names it.
func ParseAllow(ctx context.Context, r *net.Resolver, values []string) (Allow, error) {
	var a Allow
	for _, v := range values {
		if strings.Contains(v, "/") {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return Allow{}, fmt.Errorf("--allow-network %q: not a CIDR like 127.0.0.0/8: %w", v, err)
			}
			a.Networks = append(a.Networks, normalPrefix(p))
			continue
		}
		host, portText, err := net.SplitHostPort(v)
		if err != nil {
			return Allow{}, fmt.Errorf("--allow-network %q: not a CIDR (127.0.0.0/8) or host:port (127.0.0.1:9000, [::1]:9000, localhost:9000)", v)
		}
		port, err := strconv.ParseUint(portText, 10, 16)
		if err != nil || port == 0 {
			return Allow{}, fmt.Errorf("--allow-network %q: port must be a number from 1 to 65535", v)
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			if ip.Zone() != "" {
				return Allow{}, fmt.Errorf("--allow-network %q: an address with a zone cannot be opened", v)
			}
			a.Addrs = append(a.Addrs, netip.AddrPortFrom(ip.Unmap(), uint16(port)))
			continue
		}
		if host == "" {
			return Allow{}, fmt.Errorf("--allow-network %q: needs a host before the port", v)
		}
		ips, err := r.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return Allow{}, fmt.Errorf("--allow-network %q: resolving %s: %w", v, host, err)
		}
		for _, ip := range ips {
			a.Addrs = append(a.Addrs, netip.AddrPortFrom(ip.WithZone("").Unmap(), uint16(port)))
		}
	}
	return a, nil
}

// Wide lists the CIDR rules wider than a /8 (IPv4) or a /32 (IPv6):
// 0.0.0.0/0 opens every internal service and the cloud metadata address to
// every tenant.
func (a Allow) Wide() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range a.Networks {
		p = normalPrefix(p)
		if (p.Addr().Is4() && p.Bits() < 8) || (p.Addr().Is6() && p.Bits() < 32) {
			out = append(out, p)
		}
	}
	return out
}
