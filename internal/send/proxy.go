package send

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"time"
)

// errProxy marks a failure of the egress proxy itself (unreachable, or it
// refused the CONNECT), told apart from the endpoint's own failures.
var errProxy = errors.New("egress proxy")

// ParseProxy reads --egress-proxy: http://[user:password@]host:port, the
// userinfo sent as Proxy-Authorization.
func ParseProxy(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("--egress-proxy: not a URL like http://proxy.internal:4750: %w", err)
	}
	switch {
	case u.Scheme != "http":
		return nil, fmt.Errorf("--egress-proxy %q: the scheme must be http:// (a CONNECT proxy; TLS to the endpoint runs inside the tunnel)", u.Redacted())
	case u.Hostname() == "" || u.Port() == "":
		return nil, fmt.Errorf("--egress-proxy %q: needs a host and a port, e.g. http://proxy.internal:4750", u.Redacted())
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("--egress-proxy %q: a proxy URL has no path, query or fragment", u.Redacted())
	}
	if p, err := strconv.ParseUint(u.Port(), 10, 16); err != nil || p == 0 {
		return nil, fmt.Errorf("--egress-proxy %q: port must be a number from 1 to 65535", u.Redacted())
	}
	return u, nil
}

// proxyDialer reaches endpoints through an HTTP CONNECT proxy (an egress
// proxy such as Smokescreen). Asked for a name, the proxy would resolve it
// itself, out of the guard's sight; so the dialer resolves the endpoint's
// name, checks each address with the guard (hookd's own listeners and the
// allow rules included), and asks the proxy to CONNECT to that address, or
// refuses without asking. The transport still runs TLS over the tunnel with
// the URL's name (SNI and certificate check) and sends the URL's Host.
// Plain-http endpoints are tunnelled too, so the proxy sees every delivery.
// The proxy's own address is the operator's: it is dialled unchecked.
type proxyDialer struct {
	addr     string // the proxy's host:port
	auth     string // a Proxy-Authorization header line, or ""
	guard    *Guard
	resolver *net.Resolver
	dialer   *net.Dialer // to the proxy
}

func newProxyDialer(u *url.URL, g *Guard, r *net.Resolver) *proxyDialer {
	if r == nil {
		r = net.DefaultResolver
	}
	p := &proxyDialer{addr: u.Host, guard: g, resolver: r,
		dialer: &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second, Resolver: r}}
	if u.User != nil {
		pw, _ := u.User.Password()
		p.auth = "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)) + "\r\n"
	}
	return p
}

// DialContext opens a tunnel to addr (the URL's host:port). Like a direct
// dial it tries the name's addresses in turn, skipping those the guard
// refuses; if it refuses them all, the first refusal is the error.
func (p *proxyDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot parse dial address %q", ErrBlocked, addr)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot parse dial address %q", ErrBlocked, addr)
	}
	ips, err := p.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	var refused, failed error
	for _, ip := range ips {
		// The resolver may answer IPv4 in its mapped form: ask for the plain one.
		target := netip.AddrPortFrom(ip.Unmap(), uint16(port))
		if err := p.guard.check(target); err != nil {
			if refused == nil {
				refused = err
			}
			continue
		}
		conn, err := p.connect(ctx, target)
		if err == nil {
			return conn, nil
		}
		failed = err
		if ctx.Err() != nil {
			break
		}
	}
	switch {
	case failed != nil:
		return nil, failed
	case refused != nil:
		return nil, refused
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// connect asks the proxy for a tunnel to target, within ctx.
func (p *proxyDialer) connect(ctx context.Context, target netip.AddrPort) (net.Conn, error) {
	conn, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("%w %s unreachable: %w", errProxy, p.addr, err)
	}
	// An ended context cuts the exchange short through the deadline.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	t := target.String()
	br := bufio.NewReader(conn)
	_, err = io.WriteString(conn, "CONNECT "+t+" HTTP/1.1\r\nHost: "+t+"\r\n"+p.auth+"\r\n")
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	}
	if !stop() {
		conn.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w %s: CONNECT %s: %w", errProxy, p.addr, t, err)
	}
	if resp.StatusCode/100 != 2 {
		conn.Close()
		return nil, fmt.Errorf("%w %s refused CONNECT %s: %s", errProxy, p.addr, t, resp.Status)
	}
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn is a tunnel whose first bytes were read with the proxy's answer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }
