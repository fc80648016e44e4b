package api

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/dispatch"
	"hookd/internal/ingest"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/internal/store/postgres"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/testenv"
)

// fuzzAPI is the real API over a real store, made once per fuzz target
// (each fuzzing worker makes its own): ingest writes events, the SSRF
// guard opens nothing, and the dispatcher is a no-op, so nothing is sent.
// Requests go straight to the Server, without Wrap: a panic is the
// fuzzer's crash, not a 500.
type fuzzAPI struct {
	backend string
	srv     *Server
	st      store.Store
	// rows counts the rows of a table (with a WHERE clause) as stored.
	rows func(query string) (int, error)
	logs *syncBuffer
	// sub is a subscription to "*" on a public URL: every accepted event
	// fans out to it, and PATCH bodies are applied to it.
	sub string
}

const fuzzToken = "fuzz-admin-token-000000000000000000"

type noDispatch struct{}

func (noDispatch) Wake(host, subscriptionID string) {}
func (noDispatch) Health(host, subscriptionID string) dispatch.Health {
	return dispatch.Health{}
}

// fuzzAPIs is the API on a SQLite file in a temporary directory, and also
// on PostgreSQL (a schema of its own) when HOOKD_TEST_POSTGRES_URL is set:
// text PostgreSQL cannot hold is input SQLite takes.
func fuzzAPIs(tb testing.TB) []*fuzzAPI {
	tb.Helper()
	ctx := context.Background()
	path := filepath.Join(tb.TempDir(), "hookd.db")
	lite, err := sqlite.Open(ctx, path, testenv.Keys(tb))
	if err != nil {
		tb.Fatal(err)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	apis := []*fuzzAPI{newFuzzAPI(tb, "sqlite", lite, func(q string) (n int, err error) {
		err = db.QueryRow("SELECT count(*) FROM " + q).Scan(&n)
		return n, err
	})}
	if os.Getenv("HOOKD_TEST_POSTGRES_URL") == "" {
		tb.Log("HOOKD_TEST_POSTGRES_URL not set: inputs go to SQLite only, PostgreSQL skipped")
		return apis
	}
	u := testenv.PostgresSchema(tb)
	pg, err := postgres.Open(ctx, u, testenv.Keys(tb))
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return append(apis, newFuzzAPI(tb, "postgres", pg, func(q string) (n int, err error) {
		err = conn.QueryRow(context.Background(), "SELECT count(*) FROM "+q).Scan(&n)
		return n, err
	}))
}

func newFuzzAPI(tb testing.TB, backend string, st store.Store, rows func(string) (int, error)) *fuzzAPI {
	tb.Helper()
	reg := subs.New(nil)
	in := ingest.New(st, reg, func([]core.Job) {})
	tb.Cleanup(func() {
		in.Close()
		st.Close()
	})
	a := &fuzzAPI{backend: backend, st: st, rows: rows, logs: &syncBuffer{}}
	a.srv = New(Config{
		Store: st, Subs: subs.NewService(st, reg, nil), Ingest: in, Dispatch: noDispatch{},
		Guard: send.NewGuard(nil), AdminToken: fuzzToken, Version: "fuzz",
		Log: slog.New(slog.NewTextHandler(a.logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	status, body := a.do(http.MethodPost, "/v1/subscriptions",
		[]byte(`{"url":"https://hooks.example.com/fuzz","event_types":["*"]}`))
	var created struct{ ID string }
	if err := json.Unmarshal(body, &created); status != http.StatusCreated || err != nil {
		tb.Fatalf("%s: creating the standing subscription: %d %s", backend, status, body)
	}
	a.sub = created.ID
	return a
}

func (a *fuzzAPI) do(method, path string, body []byte) (int, []byte) {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+fuzzToken)
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	a.srv.ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

func (a *fuzzAPI) count(t *testing.T, table string) int {
	t.Helper()
	n, err := a.rows(table)
	if err != nil {
		t.Fatalf("%s: counting %s: %v", a.backend, table, err)
	}
	return n
}

// checkAnswer fails t unless status is one of want, and a 4xx answer is
// exactly {"error":{"code","message"}} (field, when there is one, named
// in the message), naming the field for a 400, 413 or 422.
func (a *fuzzAPI) checkAnswer(t *testing.T, what string, req []byte, status int, body []byte, want ...int) {
	t.Helper()
	if status >= 500 || !contains(want, status) {
		t.Fatalf("%s: %s %q answered %d, want one of %v: %s\nlog: %s", a.backend, what, req, status, want, body, a.logs.String())
	}
	if status < 400 {
		return
	}
	var e struct {
		Error *struct {
			Code, Message, Field string
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Error == nil || e.Error.Code == "" || e.Error.Message == "" {
		t.Fatalf("%s: %s %q answered %d %s: not {\"error\":{\"code\",\"message\"}} (%v)", a.backend, what, req, status, body, err)
	}
	if f := e.Error.Field; f != "" && !strings.HasPrefix(e.Error.Message, f+": ") {
		t.Errorf("%s: %s %q: error on %q says %q, which does not name it first", a.backend, what, req, f, e.Error.Message)
	}
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		if e.Error.Field == "" {
			t.Errorf("%s: %s %q answered %d %s without naming the field", a.backend, what, req, status, body)
		}
	}
}

func contains(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// FuzzDecodeEvent posts arbitrary bodies to POST /v1/events. None panics
// or gets a 5xx. A 202 wrote the event as posted and its delivery to the
// standing subscription, and nothing else; a 200 is a repeated
// idempotency_key answered with its first event, writing nothing; a 4xx
// is the error shape naming the field, and wrote nothing.
func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"order.created","payload":{"id":1}}`,
		`{"type":"order.created","payload":{"id":1},"idempotency_key":"k1","ordering_key":"o"}`,
		`{"type":"order.created","payload":[1,"x",null,true],"tenant_id":"default"}`,
		`{"type":"order.created","payload":{"a":1},"tenant_id":"nobody"}`,
		`{"TYPE":"order.created","payload":{}}`,
		`{"type":"a","type":"b","payload":{}}`,
		`{"type":"a","payload":{"x":1,"x":2}}`,
		`{"type":"a","payload":"\ud800"}`,
		"{\"type\":\"a\",\"payload\":\"\xff\"}",
		`{"type":"a","payload":"\u0000"}`,
		`{"type":"a","payload":1e999999}`,
		`{"type":"a","payload":null}`,
		`{"type":"HOOKD.x","payload":{}}`,
		`{"type":"a","payload":{}}{}`,
		`[]`,
		``,
		"{\"type\":\"a\",\r\n\"payload\":{}}",
		`{"type":"a","payload":{},"idempotency_key":"` + strings.Repeat("k", 256) + `"}`,
		`{"type":"a","payload":"` + strings.Repeat("x", core.MaxPayloadBytes) + `"}`,
	} {
		f.Add([]byte(s))
	}
	apis := fuzzAPIs(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, a := range apis {
			a.postEvent(t, body)
		}
	})
}

func (a *fuzzAPI) postEvent(t *testing.T, body []byte) {
	events, deliveries := a.count(t, "events"), a.count(t, "deliveries")
	status, answer := a.do(http.MethodPost, "/v1/events", body)
	a.checkAnswer(t, "POST /v1/events", body, status, answer,
		http.StatusAccepted, http.StatusOK, http.StatusBadRequest, http.StatusNotFound,
		http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity)
	wrote := 0
	if status == http.StatusAccepted {
		wrote = 1
	}
	if n := a.count(t, "events"); n != events+wrote {
		t.Fatalf("%s: POST /v1/events %q answered %d and the events went from %d to %d", a.backend, body, status, events, n)
	}
	if n := a.count(t, "deliveries"); n != deliveries+wrote {
		t.Fatalf("%s: POST /v1/events %q answered %d and the deliveries went from %d to %d", a.backend, body, status, deliveries, n)
	}
	if status != http.StatusAccepted && status != http.StatusOK {
		return
	}
	var out struct{ ID string }
	if err := json.Unmarshal(answer, &out); err != nil || !strings.HasPrefix(out.ID, "evt_") {
		t.Fatalf("%s: POST /v1/events %q answered %d %s, want {\"id\":\"evt_…\"}", a.backend, body, status, answer)
	}
	// Read the request leniently: the strict decoder took it, so its
	// names are exact and appear once.
	var req struct {
		Type           string          `json:"type"`
		Payload        json.RawMessage `json:"payload"`
		IdempotencyKey string          `json:"idempotency_key"`
		OrderingKey    string          `json:"ordering_key"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("%s: POST /v1/events accepted %q, which encoding/json refuses: %v", a.backend, body, err)
	}
	ev, dls, err := a.st.EventGet(context.Background(), "", out.ID)
	if err != nil {
		t.Fatalf("%s: event %s answered %d is not in the store: %v", a.backend, out.ID, status, err)
	}
	if status == http.StatusOK {
		if req.IdempotencyKey == "" || ev.IdempotencyKey != req.IdempotencyKey {
			t.Fatalf("%s: POST /v1/events %q answered 200 with %s, whose idempotency_key is %q", a.backend, body, out.ID, ev.IdempotencyKey)
		}
		return
	}
	if ev.TenantID != core.DefaultTenant || ev.Type != req.Type || ev.IdempotencyKey != req.IdempotencyKey || ev.OrderingKey != req.OrderingKey {
		t.Errorf("%s: stored %s/%s/%q/%q, posted %q", a.backend, ev.TenantID, ev.Type, ev.IdempotencyKey, ev.OrderingKey, body)
	}
	if !bytes.Equal(ev.Payload, req.Payload) || !json.Valid(ev.Payload) {
		t.Errorf("%s: stored payload %q, posted %q", a.backend, ev.Payload, req.Payload)
	}
	if len(dls) != 1 || dls[0].SubscriptionID != a.sub || dls[0].State != core.DeliveryPending {
		t.Errorf("%s: event %s has deliveries %+v, want one pending to %s", a.backend, ev.ID, dls, a.sub)
	}
}

// FuzzDecodeSubscription sends each body as POST /v1/subscriptions and as
// PATCH of the standing subscription, with an SSRF guard that opens
// nothing. None panics or gets a 5xx. A 201 or 200 stored a URL whose host
// is no internal address (testenv.BlockedIP, however net/netip or
// inet_aton reads it); a 4xx is the error shape naming the field and
// changed nothing. A created subscription is deleted again, so the
// registry stays small.
func FuzzDecodeSubscription(f *testing.F) {
	for _, s := range []string{
		`{"url":"https://example.com/hook","event_types":["order.*"]}`,
		`{"url":"https://example.com/hook","event_types":["*"],"ordered":true,"retry_schedule":["5s","1m"],"timeout":"20s","max_concurrency":3,"rate_limit":2.5,"retry_status_codes":[404],"headers":{"Authorization":"Bearer x"}}`,
		`{"url":"http://127.0.0.1/","event_types":["a"]}`,
		`{"url":"http://0x7f000001/","event_types":["a"]}`,
		`{"url":"http://[::ffff:127.0.0.1]/","event_types":["a"]}`,
		`{"url":"http://[fe80::1%25eth0]/","event_types":["a"]}`,
		`{"url":"http://[64:ff9b::a9fe:a9fe]/","event_types":["a"]}`,
		`{"url":"http://user:pw@example.com/","event_types":["a"]}`,
		`{"url":"http://example.com:0/","event_types":["a"]}`,
		`{"url":"http://example.com:65536/","event_types":["a"]}`,
		`{"url":"https://example.com/","event_types":["a..b","*.x","a.*.b","HOOKD.x"]}`,
		`{"url":"https://example.com/","event_types":["a"],"headers":{"X-A":"1\r\nX-B: 2"}}`,
		`{"url":"https://example.com/","event_types":["a"],"headers":{"x-a":"1","X-A":"2"}}`,
		`{"url":"https://example.com/","event_types":["a"],"retry_schedule":["9223372036854775807ns"]}`,
		`{"url":"https://example.com/","event_types":["a"],"max_concurrency":1e100}`,
		`{"url":"https://example.com/","event_types":["a"],"rate_limit":-0}`,
		`{"url":"https://example.com/","event_types":["a"],"tenant_id":"nobody"}`,
		`{"state":"paused"}`,
		`{"state":"gone"}`,
		`{"URL":"https://example.com/"}`,
		`{"url":"https://example.com/","url":"http://127.0.0.1/"}`,
		`{}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	apis := fuzzAPIs(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, a := range apis {
			a.postSubscription(t, body)
			a.patchSubscription(t, body)
		}
	})
}

func (a *fuzzAPI) postSubscription(t *testing.T, body []byte) {
	const live = "subscriptions WHERE deleted_at IS NULL"
	before, all := a.count(t, live), a.count(t, "subscriptions")
	status, answer := a.do(http.MethodPost, "/v1/subscriptions", body)
	a.checkAnswer(t, "POST /v1/subscriptions", body, status, answer,
		http.StatusCreated, http.StatusBadRequest, http.StatusNotFound,
		http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity)
	if status != http.StatusCreated {
		if n, m := a.count(t, live), a.count(t, "subscriptions"); n != before || m != all {
			t.Fatalf("%s: POST /v1/subscriptions %q answered %d and the subscriptions went from %d (%d live) to %d (%d live)", a.backend, body, status, all, before, m, n)
		}
		return
	}
	var out struct{ ID, Secret string }
	if err := json.Unmarshal(answer, &out); err != nil || !strings.HasPrefix(out.ID, "sub_") || !strings.HasPrefix(out.Secret, "whsec_") {
		t.Fatalf("%s: POST /v1/subscriptions %q answered 201 %s, want an id and a secret", a.backend, body, answer)
	}
	sub, err := a.st.SubscriptionGet(context.Background(), "", out.ID)
	if err != nil {
		t.Fatalf("%s: subscription %s answered 201 is not in the store: %v", a.backend, out.ID, err)
	}
	a.checkReachable(t, body, sub.URL)
	if n := a.count(t, live); n != before+1 {
		t.Fatalf("%s: POST /v1/subscriptions answered 201 and the live subscriptions went from %d to %d", a.backend, before, n)
	}
	if st, b := a.do(http.MethodDelete, "/v1/subscriptions/"+out.ID, nil); st != http.StatusNoContent {
		t.Fatalf("%s: deleting %s: %d %s", a.backend, out.ID, st, b)
	}
}

func (a *fuzzAPI) patchSubscription(t *testing.T, body []byte) {
	ctx := context.Background()
	was, err := a.st.SubscriptionGet(ctx, "", a.sub)
	if err != nil {
		t.Fatal(err)
	}
	status, answer := a.do(http.MethodPatch, "/v1/subscriptions/"+a.sub, body)
	a.checkAnswer(t, "PATCH /v1/subscriptions/{id}", body, status, answer,
		http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity)
	now, err := a.st.SubscriptionGet(ctx, "", a.sub)
	if err != nil {
		t.Fatal(err)
	}
	if status == http.StatusOK {
		a.checkReachable(t, body, now.URL)
	} else if !reflect.DeepEqual(now, was) {
		t.Fatalf("%s: PATCH %q answered %d and changed the subscription:\nwas %+v\nnow %+v", a.backend, body, status, was, now)
	}
}

// checkReachable fails t if raw's host reads as an internal address.
func (a *fuzzAPI) checkReachable(t *testing.T, body []byte, raw string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s: %q stored URL %q, which does not parse: %v", a.backend, body, raw, err)
	}
	// net/http dials a name that is not ASCII as its IDNA mapping, which
	// can be any address ("１２７．０．０．１" is 127.0.0.1).
	if strings.ContainsFunc(u.Hostname(), func(r rune) bool { return r >= 0x80 }) {
		t.Fatalf("%s: %q stored URL %q, whose host is not ASCII", a.backend, body, raw)
	}
	for _, ip := range testenv.ReadHost(u.Hostname()) {
		if testenv.BlockedIP(ip) {
			t.Fatalf("%s: %q stored URL %q, whose host reads as %s, an internal address", a.backend, body, raw, ip)
		}
	}
}
