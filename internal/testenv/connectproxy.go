package testenv

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
)

// ConnectProxy is a small HTTP CONNECT proxy on 127.0.0.1, standing in for an
// egress proxy such as Smokescreen. It records each CONNECT's target and
// Proxy-Authorization, and the local address of each connection it makes
// onward, so a test can tell which requests came through it.
type ConnectProxy struct {
	*httptest.Server
	route func(target string) string

	mu      sync.Mutex
	targets []string
	auths   []string
	onward  map[string]bool
}

// NewConnectProxy starts a proxy. route maps a CONNECT target to the address
// dialled (nil: the target itself); an empty answer refuses the CONNECT
// with 403.
func NewConnectProxy(t testing.TB, route func(target string) string) *ConnectProxy {
	p := &ConnectProxy{route: route, onward: map[string]bool{}}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *ConnectProxy) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect {
		http.Error(w, "CONNECT only", http.StatusMethodNotAllowed)
		return
	}
	dest := r.Host
	if p.route != nil {
		dest = p.route(r.Host)
	}
	p.mu.Lock()
	p.targets = append(p.targets, r.Host)
	p.auths = append(p.auths, r.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	if dest == "" {
		http.Error(w, "destination denied", http.StatusForbidden)
		return
	}
	up, err := net.Dial("tcp", dest)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	p.onward[up.LocalAddr().String()] = true
	p.mu.Unlock()
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		return
	}
	io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { io.Copy(up, conn); up.Close() }()
	io.Copy(conn, up)
	conn.Close()
}

// Connects lists the CONNECT targets asked so far, in order.
func (p *ConnectProxy) Connects() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

// Auths lists each CONNECT's Proxy-Authorization, in order.
func (p *ConnectProxy) Auths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.auths...)
}

// CameThrough reports whether a request whose RemoteAddr is remote came
// over a connection the proxy made.
func (p *ConnectProxy) CameThrough(remote string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.onward[remote]
}

// ProxyURL is the proxy's URL, with user:password when given.
func (p *ConnectProxy) ProxyURL(user, password string) *url.URL {
	u, _ := url.Parse(p.URL)
	if user != "" {
		u.User = url.UserPassword(user, password)
	}
	return u
}
