package app

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
)

// closedWithin reads conn until the server closes it, failing the test if
// that takes longer than within (the read deadline).
func closedWithin(t *testing.T, conn net.Conn, within time.Duration) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server still held the connection after %s", within)
	}
}

// TestSlowClientsAreCutOff: a body that stalls and a keep-alive connection
// left idle are closed by their timeouts, shortened here so the test takes
// a fraction of a second; the defaults are tens of seconds.
func TestSlowClientsAreCutOff(t *testing.T) {
	t.Parallel()
	e, _ := startFile(t, func(c *Config) {
		c.HTTP = HTTPTimeouts{Read: 200 * time.Millisecond, Idle: 200 * time.Millisecond}
	})
	addr := strings.TrimPrefix(e.base, "http://")
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}

	t.Run("stalled body, no credentials", func(t *testing.T) {
		conn := dial()
		io.WriteString(conn, "POST /v1/events HTTP/1.1\r\nHost: hookd\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		closedWithin(t, conn, 5*time.Second)
	})
	// Answered 408 before the close, saying what happened in the client's
	// terms (it was a 400 quoting the server's socket error).
	answer := func(t *testing.T, conn net.Conn) (int, string) {
		t.Helper()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	t.Run("stalled body, admin token", func(t *testing.T) {
		conn := dial()
		io.WriteString(conn, "POST /v1/events HTTP/1.1\r\nHost: hookd\r\nAuthorization: Bearer "+adminToken+"\r\nContent-Length: 1000\r\n\r\n{")
		status, body := answer(t, conn)
		if status != http.StatusRequestTimeout || !strings.Contains(body, `"request_timeout"`) || strings.Contains(body, "tcp") {
			t.Errorf("a body not sent in time: %d %s; want 408 request_timeout, no socket detail", status, body)
		}
		closedWithin(t, conn, 5*time.Second)
	})
	t.Run("malformed chunked body", func(t *testing.T) {
		conn := dial()
		io.WriteString(conn, "POST /v1/events HTTP/1.1\r\nHost: hookd\r\nAuthorization: Bearer "+adminToken+"\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n{\"type\":\r\nzz\r\n")
		status, body := answer(t, conn)
		if status != http.StatusBadRequest || !strings.Contains(body, `"field":"body"`) || strings.Contains(body, "jsontext") {
			t.Errorf("a malformed chunked body: %d %s; want 400 on body, no parser detail", status, body)
		}
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn := dial()
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: hookd\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("healthz: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		closedWithin(t, conn, 5*time.Second)
	})
	t.Run("oversized headers", func(t *testing.T) {
		conn := dial()
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: hookd\r\nX-Big: "+strings.Repeat("a", MaxHeaderBytes+8<<10)+"\r\n\r\n")
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("%d KiB of headers: %d, want 431", (MaxHeaderBytes+8<<10)>>10, resp.StatusCode)
		}
	})
}

// Past MaxConns a new connection is closed before it is read, so clients
// holding connections (idle keep-alives here) cannot take the file
// descriptors the deliveries and the store need; one closed, its slot
// serves the next.
func TestConnectionsPastTheLimitAreClosed(t *testing.T) {
	t.Parallel()
	e, _ := startFile(t, func(c *Config) { c.MaxConns = 3 })
	addr := strings.TrimPrefix(e.base, "http://")
	healthz := func(conn net.Conn) error {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: hookd\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("healthz answered %d", resp.StatusCode)
		}
		return nil
	}
	var held []net.Conn
	for range 3 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if err := healthz(conn); err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	if err := healthz(over); err == nil {
		t.Fatal("a fourth connection was served with three held and a limit of three")
	}
	held[0].Close()
	testenv.Eventually(t, 5*time.Second, "a connection served once one of the three closed", func() bool {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer conn.Close()
		return healthz(conn) == nil
	})
}
