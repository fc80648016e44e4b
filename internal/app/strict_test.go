package app

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
)

// startFile is start (loopback open) with cfg's changes, also returning the
// SQLite file so a test can count what was written.
func startFile(t *testing.T, change func(*Config)) (*env, string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "hookd.db")
	cfg := Config{
		DB: db, AdminToken: adminToken, Version: "test",
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		Log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if change != nil {
		change(&cfg)
	}
	return serve(t, cfg), db
}

// count runs a counting query on the node's SQLite file, read-only.
func count(t *testing.T, db, query string, args ...any) int {
	t.Helper()
	conn, err := sql.Open("sqlite", db+"?_query_only=1")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := conn.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// TestStrictInput: field names match exactly, a key appears once, payloads
// are valid UTF-8 JSON, times are from 1970 to 9999. Each refusal is a 4xx
// naming the field, and writes nothing.
func TestStrictInput(t *testing.T) {
	t.Parallel()
	e, db := startFile(t, nil)
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	cases := []struct {
		name, method, path string
		body               string
		status             int
		field              string
	}{
		{"field name in upper case", "POST", "/v1/events", `{"TYPE":"a.b","payload":{}}`, 400, "TYPE"},
		{"field name in mixed case", "POST", "/v1/events", `{"type":"a.b","Payload":{}}`, 400, "Payload"},
		{"duplicate key", "POST", "/v1/events", `{"type":"a.b","type":"c.d","payload":{}}`, 400, "type"},
		{"duplicate key in payload", "POST", "/v1/events", `{"type":"a.b","payload":{"n":1,"n":2}}`, 400, "payload"},
		{"invalid UTF-8 in payload", "POST", "/v1/events", "{\"type\":\"a.b\",\"payload\":{\"s\":\"caf\xe9\"}}", 400, "payload"},
		{"lone surrogate in payload", "POST", "/v1/events", `{"type":"a.b","payload":{"s":"\ud800"}}`, 400, "payload"},
		{"invalid UTF-8 in type", "POST", "/v1/events", "{\"type\":\"a.\xff\",\"payload\":{}}", 400, "type"},
		{"url in upper case", "POST", "/v1/subscriptions", `{"URL":"` + rc.URL + `","event_types":["*"]}`, 400, "URL"},
		{"duplicate event_types", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"event_types":["a.b"]}`, 400, "event_types"},
		{"list item of the wrong kind", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["a.b",5]}`, 400, "event_types[1]"},
		{"patch duplicate state", "PATCH", "/v1/subscriptions/" + sub, `{"state":"paused","state":"active"}`, 400, "state"},
		{"replay since before 1970", "POST", "/v1/subscriptions/" + sub + "/replay", `{"since":"1969-12-31T23:59:59Z"}`, 422, "since"},
		{"replay since past 9999 in UTC", "POST", "/v1/subscriptions/" + sub + "/replay", `{"since":"9999-12-31T23:59:59-01:00"}`, 422, "since"},
		{"replay until before 1970", "POST", "/v1/subscriptions/" + sub + "/replay", `{"since":"1970-01-01T00:00:00Z","until":"1969-01-01T00:00:00+01:00"}`, 422, "until"},
		{"replay duplicate since", "POST", "/v1/subscriptions/" + sub + "/replay", `{"since":"2026-01-01T00:00:00Z","since":"2027-01-01T00:00:00Z"}`, 400, "since"},
		{"tenant name in upper case", "POST", "/v1/tenants", `{"ID":"acme"}`, 400, "ID"},
	}
	for _, c := range cases {
		st, out := e.admin.Do(c.method, c.path, c.body)
		if st != c.status || errField(out) != c.field {
			t.Errorf("%s: %d field %q (%v), want %d field %q", c.name, st, errField(out), out, c.status, c.field)
		}
		if msg := errMessage(out); !strings.Contains(msg, c.field) {
			t.Errorf("%s: message %q does not name %q", c.name, msg, c.field)
		}
	}
	for _, q := range []string{"since=1969-12-31T23:59:59Z", "until=0001-01-01T00:00:00Z"} {
		if st, out := e.admin.Do("GET", "/v1/subscriptions/"+sub+"/deliveries?"+q, nil); st != 400 || errField(out) != strings.Split(q, "=")[0] {
			t.Errorf("list %s: %d %v, want 400 naming it", q, st, out)
		}
	}
	// Nothing was written: no event, no delivery, one subscription as it
	// was, no tenant but default, no replay job.
	for table, want := range map[string]int{"events": 0, "deliveries": 0, "subscriptions": 1, "tenants": 1, "replay_jobs": 0} {
		if n := count(t, db, "SELECT count(*) FROM "+table); n != want {
			t.Errorf("%d rows in %s after refused input, want %d", n, table, want)
		}
	}
	if s := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub, nil); s["state"] != "active" {
		t.Errorf("subscription state %v after refused PATCH", s["state"])
	}
}

// TestFarTimesKeepTheirOrder: 9999-12-31 is a valid time; on SQLite it once
// wrapped to 1816, so a bulk replay "since 9999" resent a failed delivery.
func TestFarTimesKeepTheirOrder(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	rc.Respond = testenv.Statuses(400)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	dl := e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{}))
	e.waitDelivery(dl, "failed", 10*time.Second)

	list := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub+"/deliveries?since=9999-12-31T23:59:59Z", nil)
	if ds := list["data"].([]any); len(ds) != 0 {
		t.Errorf("deliveries since 9999: %d, want 0", len(ds))
	}
	list = e.admin.Must(200, "GET", "/v1/subscriptions/"+sub+"/deliveries?since=1970-01-01T00:00:00Z&until=9999-12-31T23:59:59Z", nil)
	if ds := list["data"].([]any); len(ds) != 1 {
		t.Errorf("deliveries from 1970 to 9999: %d, want 1", len(ds))
	}
	// A replay since 9999 is refused now (a start in the future), before the
	// store could misread it; the store's far times are held by storetest FarTimes.
	if st, out := e.admin.Do("POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": "9999-12-31T23:59:59Z"}); st != 422 || errField(out) != "since" {
		t.Errorf("replay since 9999: %d %v, want 422 naming since", st, out)
	}
	if d := e.admin.Must(200, "GET", "/v1/deliveries/"+dl, nil); d["state"] != "failed" || rc.Count() != 1 {
		t.Errorf("after a replay since 9999: state %v, %d requests; want failed and 1", d["state"], rc.Count())
	}
}

func errMessage(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	m, _ := e["message"].(string)
	return m
}
