package app

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/retention"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

type statsAnswer struct {
	Granularity string    `json:"granularity"`
	Since       time.Time `json:"since"`
	Until       time.Time `json:"until"`
	Data        []struct {
		Start      time.Time `json:"start"`
		Delivered  int64     `json:"delivered"`
		Failed     int64     `json:"failed"`
		Skipped    int64     `json:"skipped"`
		Pending    int64     `json:"pending"`
		Attempts   int64     `json:"attempts"`
		LatencyP50 *float64  `json:"latency_p50_ms"`
		LatencyP99 *float64  `json:"latency_p99_ms"`
	} `json:"data"`
}

// counts is one bucket's counts, latency aside.
type counts struct {
	Start                                         time.Time
	Delivered, Failed, Skipped, Pending, Attempts int64
}

func (a statsAnswer) counts() []counts {
	out := make([]counts, len(a.Data))
	for i, b := range a.Data {
		out[i] = counts{b.Start, b.Delivered, b.Failed, b.Skipped, b.Pending, b.Attempts}
	}
	return out
}

func getStats(t *testing.T, c *testenv.Client, path string, q url.Values) statsAnswer {
	t.Helper()
	raw, err := json.Marshal(c.Must(http.StatusOK, "GET", path+"?"+q.Encode(), nil))
	if err != nil {
		t.Fatal(err)
	}
	var a statsAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// Stats count what was posted, per hour and per UTC day, for each
// subscription and the tenant, and a retention pass that removes every
// row changes no count: real deliveries to loopback receivers, delivered
// (200), failed (400) and skipped (a disabled subscription), some posted
// through the API now and some written through the store hours and a day
// ago (the API cannot make old events), all sent for real.
func TestStatsCountWhatWasPostedBeforeAndAfterRetention(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	ok := testenv.NewReceiver(t)
	bad := testenv.NewReceiver(t)
	bad.Respond = testenv.Statuses(http.StatusBadRequest)
	subOK, _ := e.subscribe(e.admin, ok.URL, []string{"*"}, nil)
	subBad, _ := e.subscribe(e.admin, bad.URL, []string{"*"}, nil)
	subOff, _ := e.subscribe(e.admin, ok.URL, []string{"*"}, nil)
	e.admin.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+subOff, map[string]any{"state": "disabled"})

	now := time.Now().UTC()
	created := map[string]time.Time{} // event ID → created_at
	for range 3 {
		id := e.post(e.admin, "order.created", map[string]any{"n": 1})
		at, err := time.Parse(time.RFC3339Nano, e.admin.Must(http.StatusOK, "GET", "/v1/events/"+id, nil)["created_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		created[id] = at
	}
	for _, ago := range []time.Duration{2 * time.Hour, 2*time.Hour + time.Minute, 26 * time.Hour} {
		at := now.Add(-ago)
		ev := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "order.created",
			Payload: []byte(`{"n":2}`), CreatedAt: at}
		in := store.EventInsert{Event: ev}
		for _, id := range []string{subOK, subBad, subOff} {
			sub, _ := e.app.subs.Get(id)
			in.Deliveries = append(in.Deliveries, core.Delivery{ID: core.NewID("dlv"), EventID: ev.ID, SubscriptionID: id,
				TenantID: ev.TenantID, EventType: ev.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host),
				State: core.DeliveryPending, NextAttemptAt: now, CreatedAt: at, UpdatedAt: at})
		}
		if _, err := e.app.store.EventInsertBatch(t.Context(), []store.EventInsert{in}); err != nil {
			t.Fatal(err)
		}
		created[ev.ID] = at
	}
	for _, id := range []string{subOK, subBad} {
		sub, _ := e.app.subs.Get(id)
		e.app.dispatch.Wake(sub.Host, id)
	}
	for id := range created {
		testenv.Eventually(t, 10*time.Second, "event "+id+" sent to every subscription", func() bool {
			for _, d := range e.admin.Must(http.StatusOK, "GET", "/v1/events/"+id, nil)["deliveries"].([]any) {
				if d.(map[string]any)["state"] == "pending" {
					return false
				}
			}
			return true
		})
	}
	if ok.Count() != len(created) || bad.Count() != len(created) {
		t.Fatalf("receivers got %d and %d requests, want %d each", ok.Count(), bad.Count(), len(created))
	}

	// What each view should count: every event made one delivery to each
	// subscription, one attempt each but the disabled one's.
	first, end := now.Add(-26*time.Hour), time.Now().UTC()
	ranges := map[string]url.Values{
		"hour": {"since": {first.Format(time.RFC3339Nano)}, "until": {end.Format(time.RFC3339Nano)}},
		"day":  {"since": {first.Format(time.RFC3339Nano)}, "until": {end.Format(time.RFC3339Nano)}, "granularity": {"day"}},
	}
	want := func(granularity string, subs ...string) []counts {
		w := map[string]time.Duration{"hour": time.Hour, "day": 24 * time.Hour}[granularity]
		var out []counts
		for b := first.Truncate(w); b.Before(end); b = b.Add(w) {
			c := counts{Start: b}
			for _, at := range created {
				if at.Truncate(w).Equal(b) {
					for _, s := range subs {
						switch s {
						case subOK:
							c.Delivered++
							c.Attempts++
						case subBad:
							c.Failed++
							c.Attempts++
						case subOff:
							c.Skipped++
						}
					}
				}
			}
			out = append(out, c)
		}
		return out
	}
	type view struct {
		path string
		subs []string
	}
	views := []view{
		{"/v1/subscriptions/" + subOK + "/stats", []string{subOK}},
		{"/v1/subscriptions/" + subBad + "/stats", []string{subBad}},
		{"/v1/subscriptions/" + subOff + "/stats", []string{subOff}},
		{"/v1/stats", []string{subOK, subBad, subOff}},
	}
	before := map[string]statsAnswer{}
	for _, v := range views {
		for g, q := range ranges {
			got := getStats(t, e.admin, v.path, q)
			if w := want(g, v.subs...); !equalCounts(got.counts(), w) {
				t.Fatalf("%s by %s:\n got  %+v\n want %+v", v.path, g, got.counts(), w)
			}
			if got.Granularity != g || !got.Since.Equal(first.Truncate(map[string]time.Duration{"hour": time.Hour, "day": 24 * time.Hour}[g])) {
				t.Errorf("%s by %s: granularity %q since %v", v.path, g, got.Granularity, got.Since)
			}
			for _, b := range got.Data {
				timed := b.LatencyP50 != nil && b.LatencyP99 != nil && *b.LatencyP50 > 0 && *b.LatencyP99 >= *b.LatencyP50
				if timed != (b.Attempts > 0) {
					t.Errorf("%s by %s at %v: %d attempts, latency %v/%v", v.path, g, b.Start, b.Attempts, b.LatencyP50, b.LatencyP99)
				}
			}
			before[v.path+" "+g] = got
		}
	}
	hours := len(before["/v1/stats hour"].Data)
	days := len(before["/v1/stats day"].Data)
	nonEmpty := func(a statsAnswer) (n int) {
		for _, b := range a.Data {
			if b.Attempts > 0 {
				n++
			}
		}
		return n
	}
	if nonEmpty(before["/v1/stats hour"]) < 2 || nonEmpty(before["/v1/stats day"]) < 2 || hours < 27 || days < 2 {
		t.Fatalf("%d hour buckets (%d with deliveries), %d day buckets (%d): want two of each at least",
			hours, nonEmpty(before["/v1/stats hour"]), days, nonEmpty(before["/v1/stats day"]))
	}

	// Deleted, the disabled subscription has no stats of its own, but its
	// deliveries still count for its tenant.
	e.admin.Must(http.StatusNoContent, "DELETE", "/v1/subscriptions/"+subOff, nil)
	e.admin.Must(http.StatusNotFound, "GET", "/v1/subscriptions/"+subOff+"/stats", nil)
	views = append(views[:2], views[3])

	// A retention pass removes every event (all finished), with their
	// attempts: the counts stay, the latency goes.
	p := retention.Start(e.app.store, time.Nanosecond, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	for id := range created {
		testenv.Eventually(t, 10*time.Second, "event "+id+" removed", func() bool {
			st, _ := e.admin.Do("GET", "/v1/events/"+id, nil)
			return st == http.StatusNotFound
		})
	}
	p.Stop()
	for _, v := range views {
		for g, q := range ranges {
			got := getStats(t, e.admin, v.path, q)
			if w := before[v.path+" "+g].counts(); !equalCounts(got.counts(), w) {
				t.Fatalf("%s by %s after retention:\n got  %+v\n want %+v", v.path, g, got.counts(), w)
			}
			for _, b := range got.Data {
				if b.LatencyP50 != nil || b.LatencyP99 != nil {
					t.Errorf("%s by %s at %v after retention: latency %v/%v, want null (no attempt kept)", v.path, g, b.Start, b.LatencyP50, b.LatencyP99)
				}
			}
		}
	}
}

func equalCounts(a, b []counts) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Start.Equal(b[i].Start) || a[i].Delivered != b[i].Delivered || a[i].Failed != b[i].Failed ||
			a[i].Skipped != b[i].Skipped || a[i].Pending != b[i].Pending || a[i].Attempts != b[i].Attempts {
			return false
		}
	}
	return true
}

// Another tenant's key sees neither a subscription's stats nor the
// tenant's; bad input answers 400 naming the field.
func TestStatsTenancyAndBadInput(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	e.waitDelivery(e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{})), "delivered", 10*time.Second)
	acme := e.tenantKey("acme")

	for _, path := range []string{"/v1/subscriptions/" + sub + "/stats", "/v1/stats?tenant_id=default"} {
		if st, out := acme.Do("GET", path, nil); st != http.StatusNotFound || errCode(out) != "not_found" {
			t.Errorf("another tenant's %s: %d %v, want 404", path, st, out)
		}
	}
	// Its own tenant's stats count nothing of default's.
	for _, b := range getStats(t, acme, "/v1/stats", nil).Data {
		if b.Delivered+b.Attempts != 0 {
			t.Errorf("acme's stats count %+v", b)
		}
	}
	before := time.Now()
	got := getStats(t, e.admin, "/v1/stats", nil)
	var delivered int64
	for _, b := range got.Data {
		delivered += b.Delivered
	}
	if len(got.Data) != 24 || got.Granularity != "hour" || delivered != 1 || got.Until.Before(before) {
		t.Errorf("default stats: %d buckets by %s to %v, %d delivered; want the last 24 hours with 1", len(got.Data), got.Granularity, got.Until, delivered)
	}
	if got := getStats(t, e.admin, "/v1/subscriptions/"+sub+"/stats", url.Values{"granularity": {"day"}}); len(got.Data) != 30 {
		t.Errorf("default days: %d buckets, want 30", len(got.Data))
	}

	for _, c := range []struct{ query, field string }{
		{"granularity=second", "granularity"},
		{"since=yesterday", "since"},
		{"until=2026-13-01T00:00:00Z", "until"},
		{"since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "until"},
		{"since=2026-01-01T00:00:00Z&until=2026-01-01T00:00:00Z", "until"},
		{"since=2999-01-01T00:00:00Z", "since"},
		{"since=2026-01-01T00:00:00Z&until=2026-03-01T00:00:00Z", "until"},
		{"since=2020-01-01T00:00:00Z", "since"},
		{"since=2020-01-01T00:00:00Z&until=2022-01-01T00:00:00Z&granularity=day", "until"},
		{"until=9999-12-31T12:00:00Z&granularity=day", "until"},
	} {
		for _, path := range []string{"/v1/subscriptions/" + sub + "/stats?", "/v1/stats?"} {
			st, out := e.admin.Do("GET", path+c.query, nil)
			if st != http.StatusBadRequest || errField(out) != c.field {
				t.Errorf("%s%s: %d %v, want 400 naming %s", path, c.query, st, out, c.field)
			}
		}
	}
	// At the limits: 744 hours, 400 days.
	getStats(t, e.admin, "/v1/stats", url.Values{"since": {"2026-01-01T00:00:00Z"}, "until": {"2026-02-01T00:00:00Z"}})
	getStats(t, e.admin, "/v1/stats", url.Values{"since": {"2025-01-01T00:00:00Z"}, "until": {"2026-02-05T00:00:00Z"}, "granularity": {"day"}})
}
