package api

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestTextPostgresCannotHoldIs400: NUL in a request's strings, or NUL or
// invalid UTF-8 in its path or query, is refused with a 400 naming where,
// writing nothing, on every backend. PostgreSQL text holds neither, and
// each of these answered 500 there (the payload, stored as bytes, keeps
// its NULs).
func TestTextPostgresCannotHoldIs400(t *testing.T) {
	t.Parallel()
	cases := []struct {
		method, path, body, field string
	}{
		{"POST", "/v1/events", `{"type":"a","payload":{},"idempotency_key":"k\u0000"}`, "idempotency_key"},
		{"POST", "/v1/events", `{"type":"a","payload":{},"ordering_key":"\u0000"}`, "ordering_key"},
		{"POST", "/v1/events", `{"type":"a","payload":{},"tenant_id":"default\u0000"}`, "tenant_id"},
		{"POST", "/v1/subscriptions", `{"url":"https://example.com/","event_types":["a"],"tenant_id":"\u0000"}`, "tenant_id"},
		{"POST", "/v1/subscriptions", `{"url":"https://example.com/","event_types":["a","b\u0000"]}`, "event_types[1]"},
		{"POST", "/v1/tenants", `{"name":"n\u0000"}`, "name"},
		{"GET", "/v1/events/evt_%00", "", "path"},
		{"GET", "/v1/subscriptions/sub_%ff", "", "path"},
		{"DELETE", "/v1/tenants/default/keys/%ff", "", "path"},
		{"GET", "/v1/subscriptions?cursor=%00", "", "cursor"},
		{"GET", "/v1/subscriptions?tenant_id=%ff", "", "tenant_id"},
		{"GET", "/v1/audit?cursor=%ff", "", "cursor"},
	}
	for _, a := range fuzzAPIs(t) {
		events, subs, tenants := a.count(t, "events"), a.count(t, "subscriptions"), a.count(t, "tenants")
		for _, c := range cases {
			status, answer := a.do(c.method, c.path, []byte(c.body))
			a.checkAnswer(t, c.method+" "+c.path, []byte(c.body), status, answer, http.StatusBadRequest)
			var e struct{ Error struct{ Field string } }
			if err := json.Unmarshal(answer, &e); err != nil || e.Error.Field != c.field {
				t.Errorf("%s: %s %s %s: field %q, want %q", a.backend, c.method, c.path, c.body, e.Error.Field, c.field)
			}
		}
		if n := a.count(t, "events"); n != events {
			t.Errorf("%s: events went from %d to %d", a.backend, events, n)
		}
		if n := a.count(t, "subscriptions"); n != subs {
			t.Errorf("%s: subscriptions went from %d to %d", a.backend, subs, n)
		}
		if n := a.count(t, "tenants"); n != tenants {
			t.Errorf("%s: tenants went from %d to %d", a.backend, tenants, n)
		}
		// The payload is bytes: its NULs are the client's own.
		status, answer := a.do("POST", "/v1/events", []byte(`{"type":"a","payload":{"s":"\u0000"}}`))
		if status != http.StatusAccepted {
			t.Errorf("%s: a payload with \\u0000 answered %d %s, want 202", a.backend, status, answer)
		}
	}
}
