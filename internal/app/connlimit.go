package app

import (
	"net"
	"sync"
)

// connLimit closes a connection past max at once, before it is read: each
// holds a file descriptor, and the API's clients (idle keep-alives, a
// flood) would otherwise take the ones the deliveries' connections and the
// store's files need, so that accepted events stopped going out.
type connLimit struct {
	net.Listener
	open chan struct{} // a token per connection open
}

func limitConns(ln net.Listener, max int) net.Listener {
	return &connLimit{Listener: ln, open: make(chan struct{}, max)}
}

func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.open <- struct{}{}:
			return &limitedConn{Conn: c, open: l.open}, nil
		default:
			c.Close() // the client sees the connection end, and may try again
		}
	}
}

type limitedConn struct {
	net.Conn
	open chan struct{}
	once sync.Once
}

// CloseWrite passes on the TCP half-close net/http ends a connection with
// after an early answer (a 413 while the body still comes): hidden behind
// the wrapper, the client saw the end 500 ms later, its slot held as long.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.open })
	return err
}
