// Package testenv holds test helpers shared by the end-to-end tests: a
// recording HTTP receiver on loopback, a small API client and polling.
package testenv

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Request is one delivery a Receiver got.
type Request struct {
	Header http.Header
	Body   []byte
	At     time.Time
}

// Receiver is a real HTTP endpoint on 127.0.0.1 that records every request
// and answers with Respond (default 200).
type Receiver struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []Request
	// Respond picks the answer for the n-th request (0-based).
	Respond func(n int, w http.ResponseWriter, r *http.Request)
}

func NewReceiver(t testing.TB) *Receiver {
	rc := &Receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		n := len(rc.reqs)
		rc.reqs = append(rc.reqs, Request{Header: r.Header.Clone(), Body: body, At: time.Now()})
		respond := rc.Respond
		rc.mu.Unlock()
		if respond != nil {
			respond(n, w, r)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// Requests returns a copy of what arrived so far.
func (rc *Receiver) Requests() []Request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Request(nil), rc.reqs...)
}

func (rc *Receiver) Count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.reqs)
}

// Statuses answers the n-th request with codes[n] (the last code repeats).
func Statuses(codes ...int) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(codes[min(n, len(codes)-1)])
	}
}

// Eventually polls cond every few milliseconds until it holds or the
// deadline passes, then fails the test with msg.
func Eventually(t testing.TB, within time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, msg)
		}
		time.Sleep(10 * time.Millisecond) // a poll interval, not a wait for an outcome
	}
}
