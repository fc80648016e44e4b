package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"hookd/internal/api"
	"hookd/internal/core"
	"hookd/internal/testenv"
)

// callAdmin calls the API as the admin, answering the headers too.
func callAdmin(t *testing.T, e *env, method, path string, body any) (int, map[string]any, http.Header) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.base+path, r)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out, resp.Header
}

// TestIngestRateLimitPerTenant: over its rate a tenant's POST /v1/events
// answers 429 with Retry-After and writes nothing; another tenant is not
// held back. The rate is so low that no token comes back during the test.
func TestIngestRateLimitPerTenant(t *testing.T) {
	t.Parallel()
	e, db := startFile(t, func(c *Config) { c.Limits = api.Limits{IngestRate: 0.001, IngestBurst: 3} })
	rc := testenv.NewReceiver(t)
	e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	for range 3 {
		e.post(e.admin, "a.b", map[string]any{})
	}
	st, out, header := callAdmin(t, e, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}})
	if st != http.StatusTooManyRequests || errCode(out) != "ingest_rate_limited" {
		t.Fatalf("fourth event of a burst of 3: %d %v, want 429 ingest_rate_limited", st, out)
	}
	if ra := header.Get("Retry-After"); ra != "1000" {
		t.Errorf("Retry-After %q, want 1000 (one event at 0.001/s)", ra)
	}
	if n := count(t, db, "SELECT count(*) FROM events"); n != 3 {
		t.Errorf("%d events stored, want the 3 accepted", n)
	}
	if n := count(t, db, "SELECT count(*) FROM deliveries"); n != 3 {
		t.Errorf("%d deliveries stored, want the 3 accepted", n)
	}
	if v := value(t, e.scrape(), "hookd_events_rejected_total", "reason=rate_limited"); v != 1 {
		t.Errorf("rejected{rate_limited} = %v, want 1", v)
	}
	// Another tenant has a bucket of its own.
	key := e.admin.Must(201, "POST", "/v1/tenants", map[string]any{"id": "other"})["api_key"].(string)
	other := &testenv.Client{T: t, Base: e.base, Token: key}
	other.Must(202, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}})
	// The admin posting into "other" spends other's tokens, not default's.
	for range 2 {
		e.admin.Must(202, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}, "tenant_id": "other"})
	}
	if st, out := other.Do("POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}}); st != 429 {
		t.Errorf("other's fourth event: %d %v, want 429", st, out)
	}
}

// TestSubscriptionLimitPerTenant: a tenant at its limit gets 422 naming it
// and nothing is created, even with many creates at once; deleting one
// makes room; another tenant is not counted against it.
func TestSubscriptionLimitPerTenant(t *testing.T) {
	t.Parallel()
	e, db := startFile(t, func(c *Config) { c.Limits = api.Limits{MaxSubscriptions: 3} })
	rc := testenv.NewReceiver(t)
	var wg sync.WaitGroup
	statuses := make(chan int, 10)
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, out := e.admin.Do("POST", "/v1/subscriptions", map[string]any{"url": rc.URL, "event_types": []string{"*"}})
			if st != 201 && (st != 422 || errCode(out) != "subscription_limit") {
				t.Errorf("create at the limit: %d %v, want 201 or 422 subscription_limit", st, out)
			}
			statuses <- st
		}()
	}
	wg.Wait()
	close(statuses)
	created := 0
	for st := range statuses {
		if st == 201 {
			created++
		}
	}
	if n := count(t, db, "SELECT count(*) FROM subscriptions WHERE tenant_id = 'default'"); created != 3 || n != 3 {
		t.Fatalf("10 creates at once with a limit of 3: %d answered 201, %d stored; want 3 and 3", created, n)
	}
	st, out := e.admin.Do("POST", "/v1/subscriptions", map[string]any{"url": rc.URL, "event_types": []string{"*"}})
	if st != 422 || errCode(out) != "subscription_limit" {
		t.Fatalf("over the limit: %d %v", st, out)
	}
	// Another tenant has its own count.
	key := e.admin.Must(201, "POST", "/v1/tenants", map[string]any{"id": "other"})["api_key"].(string)
	e.subscribe(&testenv.Client{T: t, Base: e.base, Token: key}, rc.URL, []string{"*"}, nil)
	// A deleted subscription no longer counts.
	list := e.admin.Must(200, "GET", "/v1/subscriptions", nil)["data"].([]any)
	e.admin.Must(204, "DELETE", "/v1/subscriptions/"+list[0].(map[string]any)["id"].(string), nil)
	e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
}

// TestOneBulkReplayPerSubscription: while a subscription's bulk replay
// runs, another answers 429 with Retry-After, naming the limit and the
// running job, and no job is written. The node's replay runner is
// stopped so the first job stays running.
func TestOneBulkReplayPerSubscription(t *testing.T) {
	t.Parallel()
	e, db := startFile(t, nil)
	e.app.replays.Stop()
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	other, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)

	var wg sync.WaitGroup
	var mu sync.Mutex
	var jobs []string
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, out := e.admin.Do("POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": since})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case st == 202:
				jobs = append(jobs, out["job_id"].(string))
			case st != 429 || errCode(out) != "replay_running":
				t.Errorf("a replay while one runs: %d %v, want 429 replay_running", st, out)
			}
		}()
	}
	wg.Wait()
	if n := count(t, db, "SELECT count(*) FROM replay_jobs WHERE subscription_id = ?", sub); len(jobs) != 1 || n != 1 {
		t.Fatalf("5 replays at once: %d answered 202, %d stored; want 1 and 1", len(jobs), n)
	}
	st, out, header := callAdmin(t, e, "POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": since})
	refusal, _ := out["error"].(map[string]any)
	if st != 429 || refusal["job_id"] != jobs[0] || header.Get("Retry-After") != "30" ||
		!strings.Contains(fmt.Sprint(refusal["message"]), "one runs per subscription at a time") {
		t.Fatalf("replay while %s runs: %d %v (Retry-After %q), want 429 naming the limit and the job, Retry-After 30",
			jobs[0], st, out, header.Get("Retry-After"))
	}
	// Another subscription is not held back.
	e.admin.Must(202, "POST", "/v1/subscriptions/"+other+"/replay", map[string]any{"since": since})
	// Once the job is done, a new one may start.
	if j, _, err := e.app.store.ReplayJobStep(t.Context(), jobs[0], 10, time.Now()); err != nil || j.State != core.ReplayDone {
		t.Fatalf("stepping the job: %+v %v", j, err)
	}
	e.admin.Must(202, "POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": since})
}

// TestTestEventWithinIngestRateAndAudited: a test event spends a token of
// its tenant's ingest rate like any event (over it: 429 with Retry-After,
// nothing written) and is audited with the event and delivery it made.
func TestTestEventWithinIngestRateAndAudited(t *testing.T) {
	t.Parallel()
	e, db := startFile(t, func(c *Config) { c.Limits = api.Limits{IngestRate: 0.001, IngestBurst: 2} })
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"order.*"}, nil)
	e.post(e.admin, "order.created", map[string]any{})
	sent := e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/test", nil)
	st, out, header := callAdmin(t, e, "POST", "/v1/subscriptions/"+sub+"/test", nil)
	if st != http.StatusTooManyRequests || errCode(out) != "ingest_rate_limited" || header.Get("Retry-After") != "1000" {
		t.Fatalf("a test event over the tenant's rate: %d %v (Retry-After %q), want 429 ingest_rate_limited, Retry-After 1000",
			st, out, header.Get("Retry-After"))
	}
	if n := count(t, db, "SELECT count(*) FROM events"); n != 2 {
		t.Errorf("%d events stored, want the event and the one test event accepted", n)
	}
	entries := auditRows(t, e.admin, "&action=subscription.test")
	if len(entries) != 1 {
		t.Fatalf("audit entries of test events: %v, want the one sent", entries)
	}
	detail, _ := entries[0]["detail"].(map[string]any)
	if entries[0]["target_id"] != sub || entries[0]["actor"] != "admin" || detail["event_id"] != sent["event_id"] || detail["delivery_id"] != sent["delivery_id"] {
		t.Errorf("the test event's audit entry %v, want it naming %s, the admin and %v", entries[0], sub, sent)
	}
}
