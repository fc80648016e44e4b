package webhook_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"hookd/webhook"
)

// A receiver checks every delivery before trusting it: read the body once,
// verify it against the subscription's secret, and only then parse it.
func Example() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // from the subscription's creation response

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := webhook.Verify(secret, r.Header, body, time.Now(), webhook.DefaultTolerance); err != nil {
			fmt.Println("rejected:", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// webhook-id is stable across retries: use it to drop duplicates.
		fmt.Println("accepted", r.Header.Get("webhook-id"), string(body))
		w.WriteHeader(http.StatusNoContent)
	})

	// What hookd sends, simulated here.
	body := []byte(`{"id":"evt_01","type":"payment.succeeded","timestamp":"2024-01-01T00:00:00Z","data":{}}`)
	now := time.Now()
	sig, _ := webhook.Sign(secret, "evt_01", now, body)
	req := httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader(body))
	req.Header.Set("webhook-id", "evt_01")
	req.Header.Set("webhook-timestamp", fmt.Sprint(now.Unix()))
	req.Header.Set("webhook-signature", sig)
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	fmt.Println(rec.Code)

	// The same request with a forged body is refused.
	req = httptest.NewRequest(http.MethodPost, "/webhooks", bytes.NewReader([]byte(`{"forged":true}`)))
	req.Header = http.Header{
		"Webhook-Id":        {"evt_01"},
		"Webhook-Timestamp": {fmt.Sprint(now.Unix())},
		"Webhook-Signature": {sig},
	}
	rec = httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	fmt.Println(rec.Code)

	// Output:
	// accepted evt_01 {"id":"evt_01","type":"payment.succeeded","timestamp":"2024-01-01T00:00:00Z","data":{}}
	// 204
	// rejected: webhook: no matching signature
	// 401
}
