package send

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A handler that resets its connection after the request arrived (a WAF
// rule, a crashing worker) is one path's failure: the transport was
// connected, so it is not the host's evidence (Outcome.Conn).
func TestSendResetAfterConnectIsTheEndpoints(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.(*net.TCPConn).SetLinger(0) // close with RST
		conn.Close()
	}))
	defer srv.Close()
	out := New(Config{Guard: NewGuard(loopback)}).Send(context.Background(), testSub(srv.URL), testJob(), time.Now())
	t.Logf("outcome: class %v, err %q, Conn %v", out.Class, out.Err, out.Conn)
	if out.Conn {
		t.Errorf("a reset after the connection was made and the request sent is reported as Conn (host evidence): %+v", out)
	}
}
