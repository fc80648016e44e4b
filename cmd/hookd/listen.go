package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"hookd/webhook"
)

const (
	listenMaxBody   = 1 << 20 // a delivery is at most 256 KiB of payload plus the envelope
	listenShowBytes = 4 << 10 // printed body is cut here to keep the terminal readable
)

// runListen is a local receiver for developers: it prints every delivery and
// says whether its signature verifies.
func runListen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("listen", "listen [flags]", stderr)
	addr := fs.String("addr", "127.0.0.1:9000", "address to listen on (port 0 picks a free one)")
	secret := fs.String("secret", "", "subscription secret (whsec_…) to verify signatures with; empty: unchecked")
	status := fs.Int("status", http.StatusOK, "HTTP status to answer every delivery with")
	tolerance := fs.Duration("tolerance", webhook.DefaultTolerance, "accepted clock difference for webhook-timestamp")
	if err := parseFlags(fs, args, os.Getenv); err != nil {
		return err
	}
	if *status < 200 || *status > 599 {
		return fmt.Errorf("listen: --status %d: want an HTTP status from 200 to 599", *status)
	}
	if *tolerance <= 0 {
		return fmt.Errorf("listen: --tolerance must be positive")
	}
	if *secret != "" {
		if _, err := webhook.Sign(*secret, "", time.Time{}, nil); err != nil {
			return fmt.Errorf("listen: --secret: %w", err)
		}
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// Print the bound address, not the flag: with port 0 only this tells the real port.
	fmt.Fprintf(stdout, "listening on http://%s\n", ln.Addr())

	rc := &receiver{out: stdout, secret: *secret, status: *status, tolerance: *tolerance}
	srv := &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return fmt.Errorf("listen: %w", err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("listen: shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("listen: %w", err)
	}
	return nil
}

type receiver struct {
	mu        sync.Mutex // one block at a time, never interleaved
	out       io.Writer
	secret    string
	status    int
	tolerance time.Duration
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		io.WriteString(w, "hookd listen: POST webhooks here\n")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, listenMaxBody))
	if err != nil {
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	rc.print(r, body)
	w.WriteHeader(rc.status)
}

func (rc *receiver) print(r *http.Request, body []byte) {
	var b strings.Builder
	fmt.Fprintf(&b, "--- %s POST %s\n", time.Now().Format(time.RFC3339), r.URL.RequestURI())
	fmt.Fprintf(&b, "webhook-id: %s\n", orNone(r.Header.Get("webhook-id")))
	var env struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &env) == nil && env.Type != "" {
		fmt.Fprintf(&b, "type:       %s\n", env.Type)
	}
	fmt.Fprintf(&b, "signature:  %s\n", rc.verdict(r.Header, body))
	b.WriteString(showBody(body))
	b.WriteString("\n\n")
	rc.mu.Lock()
	defer rc.mu.Unlock()
	io.WriteString(rc.out, b.String())
}

func (rc *receiver) verdict(h http.Header, body []byte) string {
	if rc.secret == "" {
		return "unchecked (no --secret)"
	}
	if err := webhook.Verify(rc.secret, h, body, time.Now(), rc.tolerance); err != nil {
		return "INVALID: " + strings.TrimPrefix(err.Error(), "webhook: ")
	}
	return "verified"
}

// showBody pretty-prints JSON (raw text otherwise), cut at listenShowBytes.
func showBody(body []byte) string {
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") == nil {
		body = pretty.Bytes()
	}
	s := strings.ToValidUTF8(string(body), "\uFFFD")
	if len(s) <= listenShowBytes {
		return s
	}
	cut := listenShowBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s\n… (%d more bytes)", s[:cut], len(s)-cut)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
