package app

import (
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"hookd/internal/testenv"
)

// scrape fetches /metrics from the API port with the admin token, as a
// Prometheus job given the token does, and parses the text format.
func (e *env) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e.t.Fatalf("GET /metrics: status %d", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		e.t.Fatalf("GET /metrics: content-type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample finds the one series of name whose labels are exactly labels
// ("k=v" pairs); it fails the test if the family or series is missing.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) *dto.Metric {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("metric %s is missing", name)
	}
	want := strings.Join(labels, ",")
	for _, m := range f.GetMetric() {
		var got []string
		for _, lp := range m.GetLabel() {
			got = append(got, lp.GetName()+"="+lp.GetValue())
		}
		if strings.Join(got, ",") == want {
			return m
		}
	}
	t.Fatalf("metric %s{%s} is missing", name, want)
	return nil
}

// value is a counter's or gauge's value.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	m := sample(t, fams, name, labels...)
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("metric %s is neither a counter nor a gauge", name)
	return 0
}

func TestMetricsCountAKnownRun(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	flaky := testenv.NewReceiver(t)
	flaky.Respond = testenv.Statuses(500, 200)
	steady := testenv.NewReceiver(t)
	// flaky gets one delivery (500, then 200 a second later); steady gets three.
	e.subscribe(e.admin, flaky.URL, []string{"order.created"}, map[string]any{"retry_schedule": []string{"1s"}})
	e.subscribe(e.admin, steady.URL, []string{"order.*"}, nil)
	const deliveries = 4

	e.admin.Must(http.StatusAccepted, "POST", "/v1/events", map[string]any{"type": "order.created", "payload": map[string]any{"n": 1}, "idempotency_key": "k1"})
	e.admin.Must(http.StatusOK, "POST", "/v1/events", map[string]any{"type": "order.created", "payload": map[string]any{"n": 1}, "idempotency_key": "k1"})
	e.post(e.admin, "order.shipped", map[string]any{"n": 2})
	e.post(e.admin, "order.paid", map[string]any{"n": 3})
	e.admin.Must(http.StatusUnprocessableEntity, "POST", "/v1/events", map[string]any{"type": "Not A Type", "payload": map[string]any{}})
	stranger := &testenv.Client{T: t, Base: e.base, Token: "not-a-key"}
	stranger.Must(http.StatusUnauthorized, "POST", "/v1/events", map[string]any{"type": "order.created", "payload": map[string]any{}})
	// Errors on other routes are not event rejections.
	e.admin.Must(http.StatusNotFound, "GET", "/v1/events/evt_nope", nil)

	var fams map[string]*dto.MetricFamily
	// A scrape reads one metric after another, not at one instant: the lag
	// of the last delivery may be read just before it is observed, and its
	// count just after. Both must get there.
	testenv.Eventually(t, 20*time.Second, "every delivery to finish delivered, its lag observed", func() bool {
		fams = e.scrape()
		return value(t, fams, "hookd_deliveries_finished_total", "state=delivered") == deliveries &&
			sample(t, fams, "hookd_delivery_lag_seconds").GetHistogram().GetSampleCount() == deliveries
	})

	counters := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"hookd_events_accepted_total", nil, 3},
		{"hookd_events_duplicate_total", nil, 1},
		{"hookd_events_rejected_total", []string{"reason=invalid"}, 1},
		{"hookd_events_rejected_total", []string{"reason=unauthorized"}, 1},
		{"hookd_events_rejected_total", []string{"reason=too_large"}, 0},
		{"hookd_events_rejected_total", []string{"reason=not_found"}, 0},
		{"hookd_events_rejected_total", []string{"reason=unavailable"}, 0},
		{"hookd_events_rejected_total", []string{"reason=internal"}, 0},
		{"hookd_deliveries_created_total", []string{"state=pending"}, deliveries},
		{"hookd_deliveries_created_total", []string{"state=skipped"}, 0},
		{"hookd_attempts_total", []string{"outcome=delivered"}, deliveries},
		{"hookd_attempts_total", []string{"outcome=retry"}, 1},
		{"hookd_attempts_total", []string{"outcome=fail"}, 0},
		{"hookd_attempts_total", []string{"outcome=gone"}, 0},
		{"hookd_deliveries_finished_total", []string{"state=delivered"}, deliveries},
		{"hookd_deliveries_finished_total", []string{"state=failed"}, 0},
		{"hookd_deliveries_expired_total", nil, 0},
		// Scrape-time gauges, once everything is delivered.
		{"hookd_dispatch_window_deliveries", nil, 0},
		{"hookd_dispatch_inflight", nil, 0},
		{"hookd_breakers_open", nil, 0},
		{"hookd_endpoint_breakers_open", nil, 0},
		{"hookd_endpoints_rate_limited", nil, 0},
	}
	for _, c := range counters {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, strings.Join(c.labels, ","), got, c.want)
		}
	}
	for _, name := range []string{"hookd_dispatch_hosts", "hookd_dispatch_lanes"} {
		if fams[name].GetType() != dto.MetricType_GAUGE {
			t.Errorf("%s: type %v, want a gauge", name, fams[name].GetType())
		}
	}

	hist := func(name string) *dto.Histogram {
		t.Helper()
		if fams[name].GetType() != dto.MetricType_HISTOGRAM {
			t.Fatalf("%s: type %v, want a histogram", name, fams[name].GetType())
		}
		return sample(t, fams, name).GetHistogram()
	}
	if h := hist("hookd_ingest_commit_batch_size"); h.GetSampleSum() != 3 {
		t.Errorf("commit batch sizes sum to %v, want 3 (events written)", h.GetSampleSum())
	}
	if b, s := hist("hookd_ingest_commit_batch_size").GetSampleCount(), hist("hookd_ingest_commit_seconds").GetSampleCount(); b != s || b == 0 {
		t.Errorf("%d commits by size, %d by duration: want the same, at least one", b, s)
	}
	if n := hist("hookd_attempt_duration_seconds").GetSampleCount(); n != deliveries+1 {
		t.Errorf("attempt durations observed %d, want %d (every attempt)", n, deliveries+1)
	}
	lag := hist("hookd_delivery_lag_seconds")
	if lag.GetSampleCount() != deliveries {
		t.Errorf("lag observed %d times, want %d (once per delivered delivery)", lag.GetSampleCount(), deliveries)
	}
	if lag.GetSampleSum() < 0.5 { // the retried delivery waited ~1s (±20 %) alone
		t.Errorf("lag sum %vs: the retried delivery's wait is missing", lag.GetSampleSum())
	}
	var bounds []float64 // finite upper bounds (the parser adds +Inf)
	for _, b := range lag.GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) {
			bounds = append(bounds, b.GetUpperBound())
		}
	}
	if len(bounds) == 0 || bounds[0] != 0.005 || bounds[len(bounds)-1] != 86400 {
		t.Errorf("lag buckets %v, want 0.005 s to 86400 s (a day)", bounds)
	}

	// Low cardinality: only the closed label sets, never an ID or a host.
	allowed := map[string]bool{"reason": true, "state": true, "outcome": true}
	for name, f := range fams {
		if !strings.HasPrefix(name, "hookd_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !allowed[lp.GetName()] || strings.Contains(lp.GetValue(), "_") && lp.GetName() != "reason" {
					t.Errorf("%s has label %s=%q", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	if fams["hookd_pending_deliveries"] != nil {
		t.Error("hookd_pending_deliveries is exported: it would COUNT the deliveries table on every scrape")
	}
	if fams["go_goroutines"] == nil {
		t.Error("the Go runtime collector is missing")
	}
}

// The scrape-time gauges follow the dispatcher: an endpoint failing every
// attempt opens its own breaker (its host's stays closed: it answers) and
// its held work sits in the window; an endpoint answering 429 is
// rate-limited.
func TestMetricsGaugesShowBreakersAndRateLimits(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	down := testenv.NewReceiver(t)
	down.Respond = testenv.Statuses(500)
	busy := testenv.NewReceiver(t)
	busy.Respond = testenv.Statuses(429, 200)
	// The failing endpoint's retries fall due 3 s on (at least 2.4 s with
	// jitter), once its 20 first attempts have opened its breaker: with 1 s,
	// a loaded run let a retry through before the twentieth failure.
	e.subscribe(e.admin, down.URL, []string{"order.created"}, map[string]any{"retry_schedule": []string{"3s", "3s", "3s"}})
	e.subscribe(e.admin, busy.URL, []string{"order.paid"}, map[string]any{"retry_schedule": []string{"1s", "1s", "1s"}})
	const held = 20 // the breaker's minimum volume: all failures open it
	for i := range held {
		e.post(e.admin, "order.created", map[string]any{"n": i})
	}
	e.post(e.admin, "order.paid", map[string]any{})

	var fams map[string]*dto.MetricFamily
	testenv.Eventually(t, 20*time.Second, "breaker open, 429 cut in force, held work in the window", func() bool {
		fams = e.scrape()
		return value(t, fams, "hookd_endpoint_breakers_open") == 1 &&
			value(t, fams, "hookd_endpoints_rate_limited") == 1 &&
			value(t, fams, "hookd_dispatch_window_deliveries") > 0
	})
	// Refills top a window up only once it runs below half, so how many of
	// the held deliveries sit in memory depends on when their retries fell due.
	if got := value(t, fams, "hookd_dispatch_window_deliveries"); got > held {
		t.Errorf("window = %v, more than the %d deliveries pending", got, held)
	}
	if n := down.Count(); n != held {
		t.Errorf("the failing endpoint got %d requests, want %d: the open breaker holds the retries", n, held)
	}
	if got := value(t, fams, "hookd_breakers_open"); got != 0 {
		t.Errorf("host breakers open = %v, want 0: one endpoint's failures are its own", got)
	}
	if got := value(t, fams, "hookd_dispatch_inflight"); got != 0 {
		t.Errorf("inflight = %v, want 0", got)
	}
	if got := value(t, fams, "hookd_attempts_total", "outcome=retry"); got != held+1 {
		t.Errorf("attempts{retry} = %v, want %d", got, held+1)
	}
}

// TestMetricsOnTheAPIPortAreAdminOnly: tenants reach the API port, so
// /metrics there answers only the admin token (hookd serve --metrics-addr
// serves it without credentials on a listener of its own).
func TestMetricsOnTheAPIPortAreAdminOnly(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	key := e.admin.Must(201, "POST", "/v1/tenants", map[string]any{"id": "acme"})["api_key"].(string)
	for _, c := range []struct {
		token  string
		status int
		code   string
	}{{"", 401, "unauthorized"}, {"hk_wrong", 401, "unauthorized"}, {key, 403, "forbidden"}} {
		req, _ := http.NewRequest("GET", e.base+"/metrics", nil)
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(string(body), `"code":"`+c.code+`"`) || strings.Contains(string(body), "hookd_") {
			t.Errorf("GET /metrics with token %q: %d %s, want %d %s and no metric", c.token, resp.StatusCode, body, c.status, c.code)
		}
	}
	if v := value(t, e.scrape(), "hookd_events_rejected_total", "reason=unauthorized"); v != 0 {
		t.Errorf("a refused scrape counted as a rejected event: %v", v)
	}
}
