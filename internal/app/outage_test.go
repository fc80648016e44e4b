package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"hookd/internal/outage"
	"hookd/internal/store/sqlite"
	"hookd/internal/testenv"
)

// fastProbe follows the store's health every 20 ms, so an outage's start
// and end show within a test's patience; Repeat is long, so each outage
// logs exactly one line when it begins and one when it ends.
var fastProbe = outage.Config{Ping: 20 * time.Millisecond, Probe: 20 * time.Millisecond, Repeat: time.Hour}

// postRaw posts an event and returns the status, Retry-After and error code.
func postRaw(t *testing.T, base string, payload any) (int, string, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"type": "a.b", "payload": payload})
	req, _ := http.NewRequest("POST", base+"/v1/events", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, resp.Header.Get("Retry-After"), errCode(out)
}

func readyz(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// oneOutageLogged checks the log holds one line for the outage's start and
// one for its end, and no per-request error line.
func oneOutageLogged(t *testing.T, log string) {
	t.Helper()
	if b, e := strings.Count(log, `msg="store outage began"`), strings.Count(log, `msg="store outage ended"`); b != 1 || e != 1 {
		t.Errorf("%d 'began' and %d 'ended' lines, want one each:\n%s", b, e, log)
	}
	if n := strings.Count(log, `msg="request failed"`); n != 0 {
		t.Errorf("%d 'request failed' lines during the outage, want 0 (the tracker logs it)", n)
	}
}

// TestFullSQLiteAnswers507ThenRecovers: a database that cannot grow (as on
// a full disk; here PRAGMA max_page_count) answers 507 with Retry-After and
// fails /readyz; once it can grow, readiness and ingest come back without
// a restart, and the outage is logged once when it began and once when it
// ended.
func TestFullSQLiteAnswers507ThenRecovers(t *testing.T) {
	t.Parallel()
	var log logBuffer
	e, db := startFile(t, func(c *Config) {
		c.Outage = fastProbe
		c.Log = slog.New(slog.NewTextHandler(&log, nil))
	})
	big := strings.Repeat("x", 64<<10) // pages of its own, more than the file has free
	if st, _, _ := postRaw(t, e.base, big); st != 202 {
		t.Fatalf("before: %d", st)
	}
	st := e.app.store.(*sqlite.Store)
	ctx := context.Background()
	if _, err := st.LimitPages(ctx, 1); err != nil { // no page beyond those in use
		t.Fatal(err)
	}
	for range 3 {
		status, retry, code := postRaw(t, e.base, big)
		if status != http.StatusInsufficientStorage || retry == "" || code != "storage_full" {
			t.Fatalf("full database: %d Retry-After %q code %q, want 507 with Retry-After, storage_full", status, retry, code)
		}
	}
	testenv.Eventually(t, 5*time.Second, "/readyz fails while the store is full", func() bool { return readyz(t, e.base) == 503 })
	if n := count(t, db, "SELECT count(*) FROM events"); n != 1 {
		t.Errorf("%d events stored, want the 1 accepted before", n)
	}
	if v := value(t, e.scrape(), "hookd_events_rejected_total", "reason=full"); v != 3 {
		t.Errorf("rejected{full} = %v, want 3", v)
	}

	if _, err := st.LimitPages(ctx, 1<<30); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "/readyz recovers", func() bool { return readyz(t, e.base) == 200 })
	if status, _, _ := postRaw(t, e.base, big); status != 202 {
		t.Fatalf("after: %d, want 202", status)
	}
	oneOutageLogged(t, log.String())
}

// TestPostgresUnreachableAnswers503ThenRecovers: one node reaches its
// database through a proxy that the test cuts (the shared server is left
// alone). Ingest answers 503 with Retry-After and writes nothing, /readyz
// fails, and once the proxy forwards again both come back without a
// restart; the outage is logged once when it began and once when it ended.
func TestPostgresUnreachableAnswers503ThenRecovers(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresSchema(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewTCPProxy(t, u.Host)
	u.Host = proxy.Addr
	var log logBuffer
	e := serve(t, Config{
		DB: u.String(), AdminToken: adminToken, Version: "test", Node: "proxied", LeaseTTL: 10 * time.Second, Keys: clusterKeys,
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Log:           slog.New(slog.NewTextHandler(&log, nil)),
		Outage:        fastProbe,
	})
	if st, _, _ := postRaw(t, e.base, map[string]any{}); st != 202 {
		t.Fatalf("before: %d", st)
	}

	proxy.Cut()
	for range 3 {
		status, retry, code := postRaw(t, e.base, map[string]any{})
		if status != http.StatusServiceUnavailable || retry == "" || code != "unavailable" {
			t.Fatalf("database unreachable: %d Retry-After %q code %q, want 503 with Retry-After, unavailable\n%s",
				status, retry, code, log.String())
		}
	}
	testenv.Eventually(t, 5*time.Second, "/readyz fails while the database is unreachable", func() bool { return readyz(t, e.base) == 503 })
	if n := testenv.PostgresCount(t, db, "SELECT count(*) FROM events"); n != 1 {
		t.Errorf("%d events stored, want the 1 accepted before", n)
	}

	proxy.Restore()
	testenv.Eventually(t, 10*time.Second, "/readyz recovers", func() bool { return readyz(t, e.base) == 200 })
	testenv.Eventually(t, 10*time.Second, "ingest recovers", func() bool {
		status, _, _ := postRaw(t, e.base, map[string]any{})
		return status == 202
	})
	oneOutageLogged(t, log.String())
}
