package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
)

// TCPProxy forwards TCP connections from a loopback port to a target, and can
// cut them: a database made unreachable for one node without touching the
// server other tests share.
type TCPProxy struct {
	Addr   string // host:port to connect to instead of the target
	target string
	ln     net.Listener

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// NewTCPProxy listens on 127.0.0.1 and forwards to target until the test ends.
func NewTCPProxy(t testing.TB, target string) *TCPProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &TCPProxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Cut closes every forwarded connection, and closes new ones as soon as
// they are accepted, until Restore.
func (p *TCPProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore forwards new connections again.
func (p *TCPProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *TCPProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return // closed at cleanup
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(in)
		}()
	}
}

func (p *TCPProxy) forward(in net.Conn) {
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	p.conns[in], p.conns[out] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(out, in); done <- struct{}{} }()
	go func() { io.Copy(in, out); done <- struct{}{} }()
	<-done // one side ended: end both
	in.Close()
	out.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}
