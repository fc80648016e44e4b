package api

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a log destination handlers write to from their goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPanicAnswers500WithRequestID: a panicking handler answers 500 with
// the request's ID in the body and in X-Request-Id, is logged once with its
// stack, and the server goes on serving.
func TestPanicAnswers500WithRequestID(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boom", func(w http.ResponseWriter, r *http.Request) { panicInHandler() })
	mux.HandleFunc("GET /half", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("partial"))
		panic("after the answer began")
	})
	mux.HandleFunc("GET /ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fine") })
	srv := httptest.NewServer(Wrap(log, mux))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	var body struct{ Error apiError }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("500 body: %v", err)
	}
	resp.Body.Close()
	id := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusInternalServerError || body.Error.Code != "internal" {
		t.Fatalf("panic answered %d %+v, want 500 internal", resp.StatusCode, body.Error)
	}
	if !strings.HasPrefix(id, "req_") || body.Error.RequestID != id || !strings.Contains(body.Error.Message, id) {
		t.Errorf("X-Request-Id %q, body request_id %q, message %q: want one req_ ID in all three", id, body.Error.RequestID, body.Error.Message)
	}
	var entry struct {
		Msg, RequestID, Stack string
		Panic                 any
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("%d log lines for one panic, want 1:\n%s", len(lines), logs.String())
	}
	if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	json.Unmarshal([]byte(lines[0]), &raw)
	if entry.Msg != "handler panicked" || raw["request_id"] != id || !strings.Contains(entry.Stack, "panicInHandler") {
		t.Errorf("log line %s: want the request ID and a stack through panicInHandler", lines[0])
	}

	// An answer already begun is cut, not completed as if it were whole.
	if resp, err := http.Get(srv.URL + "/half"); err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Errorf("a panic after the answer began: the client read a whole %d answer", resp.StatusCode)
		}
	}

	// Still serving, each request with its own ID.
	resp, err = http.Get(srv.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "fine" {
		t.Errorf("after a panic: %d %q, want 200 fine", resp.StatusCode, b)
	}
	if other := resp.Header.Get("X-Request-Id"); other == "" || other == id {
		t.Errorf("second request's X-Request-Id %q (first %q): want a new one", other, id)
	}
}

func panicInHandler() { panic("handler bug") }
