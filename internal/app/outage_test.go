package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
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

// testLog is a node's log, shown if the test fails.
func testLog(t *testing.T) (*logBuffer, *slog.Logger) {
	var log logBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the node's log:\n%s", log.String())
		}
	})
	return &log, slog.New(slog.NewTextHandler(&log, nil))
}

var logMsg = regexp.MustCompile(`msg=("[^"]*"|\S+)`)

// oneOutageLogged checks the log holds one line for the outage's start and
// one for its end, and no other ERROR line: no per-request line, and none
// from the dispatcher, the lease loop or the replay runner, whose store
// calls failed too (the tracker logs the outage for all of them).
func oneOutageLogged(t *testing.T, log string) {
	t.Helper()
	if b, e := strings.Count(log, `msg="store outage began"`), strings.Count(log, `msg="store outage ended"`); b != 1 || e != 1 {
		t.Errorf("%d 'began' and %d 'ended' lines, want one each:\n%s", b, e, log)
	}
	others := map[string]int{} // msg → lines
	first := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "level=ERROR") || strings.Contains(line, `msg="store outage began"`) {
			continue
		}
		msg := logMsg.FindString(line)
		if others[msg]++; others[msg] == 1 {
			first[msg] = line
		}
	}
	for msg, n := range others {
		t.Errorf("%d ERROR lines %s besides the outage's start, want none; the first:\n%s", n, msg, first[msg])
	}
}

// busyEndpoint subscribes a receiver to a.b that answers each attempt
// after 50 ms and fails the first attempt of one event in four (retried
// after a second; few enough that its circuit stays closed):
// across an outage, attempts finish (their results must be written) and
// retries fall due (their lane must be refilled from the store). Each
// answer has a body of 1 KiB, kept with its attempt: their results need
// room a full database does not have.
func busyEndpoint(t *testing.T, e *env) *testenv.Receiver {
	t.Helper()
	rc := testenv.NewReceiver(t)
	var mu sync.Mutex
	tried := map[string]bool{}
	rc.Respond = func(_ int, w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond) // a slow endpoint, not a wait
		mu.Lock()
		id := r.Header.Get("webhook-id")
		fail := !tried[id] && len(tried)%4 == 0
		tried[id] = true
		mu.Unlock()
		status := http.StatusOK
		if fail {
			status = http.StatusServiceUnavailable
		}
		w.WriteHeader(status)
		io.WriteString(w, strings.Repeat("r", 1<<10))
	}
	e.subscribe(e.admin, rc.URL, []string{"a.b"}, map[string]any{"retry_schedule": []string{"1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s", "1s"}})
	return rc
}

// ingestThroughOutage posts events to e while the store is cut (between
// cut and restore): a batch accepted just before, whose attempts and
// retries run into the outage, then one request every 10 ms for three
// seconds, each answered want with Retry-After. Once restored, ingest
// comes back, and every event accepted is delivered to rc.
func ingestThroughOutage(t *testing.T, e *env, rc *testenv.Receiver, payload any, want int, cut, restore func()) {
	t.Helper()
	var accepted []string
	for range 30 {
		out := e.admin.Must(http.StatusAccepted, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": payload})
		accepted = append(accepted, out["id"].(string))
	}
	testenv.Eventually(t, 5*time.Second, "the batch's first attempts begin", func() bool { return rc.Count() > 0 })
	cut()
	failed := 0
	tick := time.NewTicker(10 * time.Millisecond)
	for start := time.Now(); time.Since(start) < 3*time.Second; <-tick.C {
		status, retry, _ := postRaw(t, e.base, payload)
		if status != want || retry == "" {
			t.Fatalf("during the outage: %d Retry-After %q, want %d with Retry-After", status, retry, want)
		}
		failed++
	}
	tick.Stop()
	if readyz(t, e.base) != http.StatusServiceUnavailable {
		t.Errorf("/readyz ready after %d failed requests", failed)
	}
	restore()
	testenv.Eventually(t, 10*time.Second, "/readyz recovers", func() bool { return readyz(t, e.base) == 200 })
	testenv.Eventually(t, 10*time.Second, "ingest recovers", func() bool {
		status, _, _ := postRaw(t, e.base, payload)
		return status == http.StatusAccepted
	})
	for _, id := range accepted {
		e.waitDelivery(e.onlyDelivery(id), "delivered", 30*time.Second)
	}
}

// TestFullSQLiteAnswers507ThenRecovers: a database that cannot grow (as on
// a full disk; here PRAGMA max_page_count) answers 507 with Retry-After and
// fails /readyz, while ingest goes on and a subscription is dispatched;
// once it can grow, readiness and ingest come back without a restart,
// nothing accepted is lost, and the outage is logged once when it began and
// once when it ended, with no other ERROR line.
func TestFullSQLiteAnswers507ThenRecovers(t *testing.T) {
	t.Parallel()
	log, logger := testLog(t)
	e, db := startFile(t, func(c *Config) {
		c.Outage = fastProbe
		c.Log = logger
	})
	rc := busyEndpoint(t, e)
	big := strings.Repeat("x", 64<<10) // pages of its own, more than the file has free
	st := e.app.store.(*sqlite.Store)
	ctx := context.Background()
	limit := func(n int64) {
		if _, err := st.LimitPages(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	var stored int
	ingestThroughOutage(t, e, rc, big, http.StatusInsufficientStorage,
		func() {
			limit(1) // no page beyond those in use
			stored = count(t, db, "SELECT count(*) FROM events WHERE type = 'a.b'")
		},
		func() {
			if n := count(t, db, "SELECT count(*) FROM events WHERE type = 'a.b'"); n != stored {
				t.Errorf("%d events stored during the outage, want none (%d before)", n-stored, stored)
			}
			if v := value(t, e.scrape(), "hookd_events_rejected_total", "reason=full"); v < 1 {
				t.Errorf("rejected{full} = %v, want every request of the outage", v)
			}
			limit(1 << 30)
		})
	oneOutageLogged(t, log.String())
}

// TestIdleNodeOnAFullDiskIsNotReady: a node that takes no requests and
// sends nothing still fails /readyz once its SQLite file cannot grow (a
// read still works there, so a ping alone never noticed), and is ready
// again once it can, logging the outage once when it began and once when
// it ended.
func TestIdleNodeOnAFullDiskIsNotReady(t *testing.T) {
	t.Parallel()
	log, logger := testLog(t)
	probe := fastProbe
	probe.Write = 100 * time.Millisecond // without a write seen committing, the prober writes
	e, _ := startFile(t, func(c *Config) {
		c.Outage = probe
		c.Log = logger
	})
	if readyz(t, e.base) != 200 {
		t.Fatal("not ready before")
	}
	st := e.app.store.(*sqlite.Store)
	ctx := context.Background()
	if _, err := st.LimitPages(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "/readyz fails on an idle node whose store is full", func() bool { return readyz(t, e.base) == 503 })
	if _, err := st.LimitPages(ctx, 1<<30); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "/readyz recovers", func() bool { return readyz(t, e.base) == 200 })
	oneOutageLogged(t, log.String())
}

// TestPostgresUnreachableAnswers503ThenRecovers: one node reaches its
// database through a proxy that the test cuts (the shared server is left
// alone), while ingest goes on and a subscription is dispatched. Ingest
// answers 503 with Retry-After and writes nothing, /readyz fails, and once
// the proxy forwards again both come back without a restart and nothing
// accepted is lost. The outage is logged once when it began and once when
// it ended, with no other ERROR line: failed refills, result writes, lease
// renewals and replay listings are the tracker's to log.
func TestPostgresUnreachableAnswers503ThenRecovers(t *testing.T) {
	t.Parallel()
	db := testenv.PostgresSchema(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewTCPProxy(t, u.Host)
	u.Host = proxy.Addr
	log, logger := testLog(t)
	e := serve(t, Config{
		// Renewed every second, so the outage fails a renewal or two.
		DB: u.String(), AdminToken: adminToken, Version: "test", Node: "proxied", LeaseTTL: 3 * time.Second, Keys: clusterKeys,
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Log:           logger,
		Outage:        fastProbe,
	})
	rc := busyEndpoint(t, e)
	var stored int
	ingestThroughOutage(t, e, rc, map[string]any{}, http.StatusServiceUnavailable,
		func() {
			stored = testenv.PostgresCount(t, db, "SELECT count(*) FROM events WHERE type = 'a.b'")
			proxy.Cut()
		},
		func() {
			if n := testenv.PostgresCount(t, db, "SELECT count(*) FROM events WHERE type = 'a.b'"); n != stored {
				t.Errorf("%d events stored during the outage, want none (%d before)", n-stored, stored)
			}
			proxy.Restore()
		})
	oneOutageLogged(t, log.String())
}
