package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"hookd/webhook"
)

// notifyBuffer is an io.Writer a test can wait on without sleeping.
type notifyBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newNotifyBuffer() *notifyBuffer { return &notifyBuffer{changed: make(chan struct{})} }

func (b *notifyBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.changed)
	b.changed = make(chan struct{})
	return b.buf.Write(p)
}

// waitMatch waits until the output matches re and returns the submatches.
func (b *notifyBuffer) waitMatch(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		b.mu.Lock()
		m, changed, text := re.FindStringSubmatch(b.buf.String()), b.changed, b.buf.String()
		b.mu.Unlock()
		if m != nil {
			return m
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("output never matched %s; got:\n%s", re, text)
		}
	}
}

func (b *notifyBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startListen(t *testing.T, args ...string) (url string, out *notifyBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out = newNotifyBuffer()
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- runListen(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), out, &stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("runListen: %v (stderr %s)", err, stderr.String())
			}
		case <-time.After(10 * time.Second):
			t.Error("runListen did not return after cancel")
		}
	})
	m := out.waitMatch(t, regexp.MustCompile(`listening on (http://127\.0\.0\.1:[0-9]+)\n`))
	if strings.HasSuffix(m[1], ":0") {
		t.Fatalf("printed the unbound port: %s", m[1])
	}
	return m[1], out
}

func post(t *testing.T, url, id, sig string, ts time.Time, body []byte) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/hook", bytes.NewReader(body))
	req.Header.Set("content-type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestListenVerifies(t *testing.T) {
	secret, _ := webhook.NewSecret()
	url, out := startListen(t, "--secret", secret, "--status", "202")

	now := time.Now()
	body := []byte(`{"id":"evt_good","type":"payment.succeeded","timestamp":"2024-01-01T00:00:00Z","data":{"amount":42}}`)
	sig, _ := webhook.Sign(secret, "evt_good", now, body)
	if code := post(t, url, "evt_good", sig, now, body); code != 202 {
		t.Errorf("status = %d, want 202 (--status)", code)
	}
	block := out.waitMatch(t, regexp.MustCompile(`(?s)webhook-id: evt_good\ntype: +payment\.succeeded\nsignature: +(\S+)\n(.*?)\n\n`))
	if block[1] != "verified" {
		t.Errorf("signature line = %q, want verified", block[1])
	}
	if !strings.Contains(block[2], "\"amount\": 42") {
		t.Errorf("body not pretty-printed:\n%s", block[2])
	}

	other, _ := webhook.NewSecret()
	badSig, _ := webhook.Sign(other, "evt_bad", now, body)
	post(t, url, "evt_bad", badSig, now, body)
	bad := out.waitMatch(t, regexp.MustCompile(`webhook-id: evt_bad\n(?:type: .*\n)?signature: +(.*)\n`))
	if bad[1] != "INVALID: no matching signature" {
		t.Errorf("signature line = %q, want INVALID: no matching signature", bad[1])
	}
}

func TestListenWithoutSecret(t *testing.T) {
	url, out := startListen(t)
	big := []byte(`"` + strings.Repeat("x", 10000) + `"`)
	if code := post(t, url, "evt_1", "v1,whatever", time.Now(), big); code != 200 {
		t.Errorf("status = %d, want 200", code)
	}
	m := out.waitMatch(t, regexp.MustCompile(`signature: +(.*)\n(?s:.*?)… \((\d+) more bytes\)`))
	if m[1] != "unchecked (no --secret)" {
		t.Errorf("signature line = %q", m[1])
	}
	if n, _ := strconv.Atoi(m[2]); n != len(big)-4096 {
		t.Errorf("truncation note says %d more bytes, want %d", n, len(big)-4096)
	}
}

func TestListenBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--status", "99"},
		{"--secret", "not-a-secret"},
		{"--tolerance", "0s"},
		{"extra"},
	} {
		if err := runListen(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("runListen(%q) = nil, want an error", args)
		}
	}
}
