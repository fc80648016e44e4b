package app

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
	"hookd/webhook"
)

// failedDeliveries writes n failed deliveries of a subscription straight to
// the node's store, one event each, created now: what a bad deploy leaves,
// without waiting for n real failures.
func failedDeliveries(t *testing.T, e *env, subID string, n int) {
	t.Helper()
	sub, ok := e.app.subs.Get(subID)
	if !ok {
		t.Fatalf("subscription %s unknown to the node", subID)
	}
	now := time.Now().UTC()
	batch := make([]store.EventInsert, n)
	for i := range batch {
		ev := core.Event{ID: core.NewID("evt"), TenantID: sub.TenantID, Type: "order.created",
			Payload: []byte(`{"i":` + strconv.Itoa(i) + `}`), CreatedAt: now}
		d := core.Delivery{ID: core.NewID("dlv"), EventID: ev.ID, SubscriptionID: sub.ID, TenantID: sub.TenantID,
			EventType: ev.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host), State: core.DeliveryFailed,
			AttemptCount: 1, LastStatus: 400, CreatedAt: now, UpdatedAt: now}
		batch[i] = store.EventInsert{Event: ev, Deliveries: []core.Delivery{d}}
	}
	if _, err := e.app.store.EventInsertBatch(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
}

// busiestSecond is the most requests that arrived within one second of
// one another (any window, not whole clock seconds), and where it began.
func busiestSecond(reqs []testenv.Request) (int, time.Time) {
	at := make([]time.Time, len(reqs))
	for i, r := range reqs {
		at[i] = r.At
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	most, from, j := 0, time.Time{}, 0
	for i := range at {
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		if j-i > most {
			most, from = j-i, at[i]
		}
	}
	return most, from
}

// stays polls for a while that cond keeps holding: the bounded wait that
// shows something does not happen.
func stays(t *testing.T, within time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("within %s: %s", within, msg)
		}
		time.Sleep(20 * time.Millisecond) // a poll interval, not a wait for an outcome
	}
}

// A replay of 1,000 deliveries at rate 100 reaches the endpoint over at
// least 9 s, never more than 100 in any second, each delivery once.
func TestReplayOfAThousandAtRate100(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	const n = 1000
	failedDeliveries(t, e, sub, n)

	out := e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/replay",
		map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "rate": 100})
	job := out["job_id"].(string)
	if j := out["job"].(map[string]any); j["rate"] != 100.0 || !slices.Equal(anyStrings(j["states"]), []string{"failed", "skipped"}) {
		t.Fatalf("job %v, want rate 100 and the default states", j)
	}
	testenv.Eventually(t, 60*time.Second, "1,000 replayed deliveries arrive", func() bool { return rc.Count() >= n })
	reqs := rc.Requests()
	ids := map[string]bool{}
	for _, r := range reqs {
		ids[r.Header.Get("webhook-id")] = true
	}
	if len(reqs) != n || len(ids) != n {
		t.Fatalf("%d requests for %d events, want %d each once", len(reqs), len(ids), n)
	}
	first, last := reqs[0].At, reqs[0].At
	for _, r := range reqs {
		if r.At.Before(first) {
			first = r.At
		}
		if r.At.After(last) {
			last = r.At
		}
	}
	took := last.Sub(first)
	most, from := busiestSecond(reqs)
	t.Logf("1,000 at rate 100: first to last arrival %s, busiest second %d (from +%s)", took.Round(time.Millisecond), most, from.Sub(first).Round(time.Millisecond))
	if took < 9*time.Second {
		t.Errorf("the replay took %s from first to last arrival, want at least 9 s", took)
	}
	if most > 100 {
		t.Errorf("%d arrived within one second from +%s, want at most 100", most, from.Sub(first))
	}
	testenv.Eventually(t, 10*time.Second, "job done", func() bool {
		return e.admin.Must(http.StatusOK, "GET", "/v1/replays/"+job, nil)["state"] == "done"
	})
	if j := e.admin.Must(http.StatusOK, "GET", "/v1/replays/"+job, nil); j["replayed"] != float64(n) || j["cancelled_at"] != nil {
		t.Errorf("finished job %v, want %d replayed and no cancelled_at", j, n)
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// Cancel stops a running job: nothing more arrives than it had put back
// when the cancel was answered, and its count stays.
func TestReplayCancelStopsItAndItsCountStays(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	const n = 1000
	failedDeliveries(t, e, sub, n)
	job := e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/replay",
		map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "rate": 100})["job_id"].(string)
	testenv.Eventually(t, 20*time.Second, "the replay under way", func() bool { return rc.Count() >= 150 })

	j := e.admin.Must(http.StatusOK, "POST", "/v1/replays/"+job+"/cancel", nil)
	answered, arrivedBy := time.Now(), rc.Count()
	replayed := int(j["replayed"].(float64))
	if j["state"] != "cancelled" || j["cancelled_at"] == nil || replayed < 150 || replayed >= n {
		t.Fatalf("cancel answered %v, want cancelled with between 150 and %d replayed", j, n)
	}
	// What it had put back still goes out; nothing more.
	testenv.Eventually(t, 10*time.Second, "what the job put back arrives", func() bool { return rc.Count() >= replayed })
	stays(t, 2*time.Second, "no more arrivals after the cancel's put-backs", func() bool { return rc.Count() == replayed })
	after := 0
	for _, r := range rc.Requests() {
		if r.At.After(answered) {
			after++
		}
	}
	t.Logf("cancel answered with %d replayed, %d arrived by then, %d after", replayed, arrivedBy, after)
	j = e.admin.Must(http.StatusOK, "GET", "/v1/replays/"+job, nil)
	if j["state"] != "cancelled" || j["replayed"] != float64(replayed) {
		t.Errorf("job after the cancel %v, want cancelled with %d replayed", j, replayed)
	}
	if got := countIn(t, e, sub, core.DeliveryFailed); got != n-replayed {
		t.Errorf("%d deliveries still failed, want %d", got, n-replayed)
	}
	if st, out := e.admin.Do("POST", "/v1/replays/"+job+"/cancel", nil); st != http.StatusConflict || errCode(out) != "conflict" ||
		!strings.Contains(out["error"].(map[string]any)["message"].(string), "cancelled") {
		t.Errorf("cancelling again: %d %v, want 409 naming cancelled", st, out)
	}
	// The cancel is in the audit log, under the subscription.
	found := false
	for _, r := range auditRows(t, e.admin, "&action=replay.cancel") {
		d, _ := r["detail"].(map[string]any)
		found = found || (r["target_id"] == sub && d["job_id"] == job)
	}
	if !found {
		t.Errorf("no replay.cancel entry for %s on %s", job, sub)
	}
	// A new job may start once this one is cancelled.
	e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/replay",
		map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "rate": 1})
}

// states: delivered is resent (same webhook-id, signed afresh, attempts
// kept), pending refused; rate within its bounds and the subscription's
// rate_limit; the list; cancel's 409; another tenant's 404. Each refusal
// names its field and writes no job.
func TestReplayStatesRateListAndRefusals(t *testing.T) {
	t.Parallel()
	e, db := startFile(t, nil)
	rc := testenv.NewReceiver(t)
	sub, secret := e.subscribe(e.admin, rc.URL, []string{"*"}, map[string]any{"rate_limit": 50})
	var events, dlvs []string
	for i := range 3 {
		ev := e.post(e.admin, "order.created", map[string]any{"i": i})
		events, dlvs = append(events, ev), append(dlvs, e.onlyDelivery(ev))
		e.waitDelivery(dlvs[i], "delivered", 10*time.Second)
	}
	since := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	replay := func(body map[string]any) (int, map[string]any) {
		b := map[string]any{"since": since}
		for k, v := range body {
			b[k] = v
		}
		return e.admin.Do("POST", "/v1/subscriptions/"+sub+"/replay", b)
	}

	for _, c := range []struct {
		name   string
		body   map[string]any
		status int
		field  string
	}{
		{"pending", map[string]any{"states": []string{"pending"}}, 422, "states[0]"},
		{"unknown state", map[string]any{"states": []string{"failed", "bogus"}}, 422, "states[1]"},
		{"empty state", map[string]any{"states": []string{""}}, 422, "states[0]"},
		{"no states", map[string]any{"states": []string{}}, 422, "states"},
		{"state not a string", map[string]any{"states": []any{1}}, 400, "states[0]"},
		{"rate 0", map[string]any{"rate": 0}, 422, "rate"},
		{"rate negative", map[string]any{"rate": -1}, 422, "rate"},
		{"rate over 500", map[string]any{"rate": 501}, 422, "rate"},
		{"rate over rate_limit", map[string]any{"rate": 51}, 422, "rate"},
		{"rate not a number", map[string]any{"rate": "fast"}, 400, "rate"},
	} {
		st, out := replay(c.body)
		if st != c.status || errField(out) != c.field {
			t.Errorf("%s: %d %v, want %d naming %s", c.name, st, out, c.status, c.field)
		}
		if c.name == "rate over rate_limit" && !strings.Contains(out["error"].(map[string]any)["message"].(string), "50") {
			t.Errorf("rate over rate_limit: %v, want the limit named", out)
		}
	}
	// Disabled: neither kind of replay, since what it put back would wait
	// there unsent (and the job report done).
	e.admin.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"state": "disabled"})
	if st, out := replay(map[string]any{"states": []string{"delivered"}}); st != 409 || errField(out) != "state" {
		t.Errorf("bulk replay into a disabled subscription: %d %v, want 409 on state", st, out)
	}
	if st, out := e.admin.Do("POST", "/v1/deliveries/"+dlvs[0]+"/replay", nil); st != 409 || errField(out) != "state" {
		t.Errorf("replay into a disabled subscription: %d %v, want 409 on state", st, out)
	}
	if d := e.admin.Must(http.StatusOK, "GET", "/v1/deliveries/"+dlvs[0], nil); d["state"] != "delivered" {
		t.Errorf("refused replay left the delivery %v", d["state"])
	}
	e.admin.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"state": "active"})
	if n := count(t, db, "SELECT count(*) FROM replay_jobs"); n != 0 {
		t.Fatalf("refused replays wrote %d jobs", n)
	}

	// Delivered ones, resent: each once more, same webhook-id, signed afresh.
	firstTS, _ := strconv.ParseInt(rc.Requests()[2].Header.Get("webhook-timestamp"), 10, 64)
	testenv.Eventually(t, 2*time.Second, "clock passes the first timestamps", func() bool { return time.Now().Unix() > firstTS })
	st, out := replay(map[string]any{"states": []string{"delivered", "delivered"}})
	if st != http.StatusAccepted {
		t.Fatalf("replay of delivered: %d %v", st, out)
	}
	resend := out["job_id"].(string)
	if j := out["job"].(map[string]any); !slices.Equal(anyStrings(j["states"]), []string{"delivered"}) || j["rate"] != 50.0 {
		t.Errorf("job %v, want states [delivered] and rate 50 (the rate_limit)", j)
	}
	testenv.Eventually(t, 10*time.Second, "the delivered events arrive again", func() bool { return rc.Count() == 6 })
	for i, r := range rc.Requests()[3:] {
		id := r.Header.Get("webhook-id")
		ts, _ := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
		if !slices.Contains(events, id) || ts <= firstTS {
			t.Errorf("resend %d: webhook-id %s, timestamp %d; want one of %v, after %d", i, id, ts, events, firstTS)
		}
		if err := webhook.Verify(secret, r.Header, r.Body, time.Now(), webhook.DefaultTolerance); err != nil {
			t.Errorf("resend %d: %v", i, err)
		}
	}
	for _, d := range dlvs {
		got := e.waitDelivery(d, "delivered", 10*time.Second)
		if got["attempt_count"] != 2.0 || len(got["attempts"].([]any)) != 2 {
			t.Errorf("resent delivery %v, want 2 attempts kept", got)
		}
	}
	testenv.Eventually(t, 10*time.Second, "resend job done", func() bool {
		return e.admin.Must(http.StatusOK, "GET", "/v1/replays/"+resend, nil)["state"] == "done"
	})
	// The default: failed and skipped, of which there are none.
	out = e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": since})
	dflt := out["job_id"].(string)
	testenv.Eventually(t, 10*time.Second, "default job done", func() bool {
		j := e.admin.Must(http.StatusOK, "GET", "/v1/replays/"+dflt, nil)
		return j["state"] == "done" && j["replayed"] == 0.0
	})
	if rc.Count() != 6 {
		t.Errorf("the default job sent %d more", rc.Count()-6)
	}

	// The list: newest first, paged, each as GET /v1/replays/{id} answers.
	list := e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub+"/replays", nil)
	data := list["data"].([]any)
	if len(data) != 2 || list["next_cursor"] != nil {
		t.Fatalf("list %v, want 2 jobs on one page", list)
	}
	for i, id := range []string{dflt, resend} {
		want := e.admin.Must(http.StatusOK, "GET", "/v1/replays/"+id, nil)
		if got := data[i].(map[string]any); got["id"] != id || got["updated_at"] != want["updated_at"] || len(got) != len(want) {
			t.Errorf("listed job %d: %v, want %v", i, got, want)
		}
	}
	page := e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub+"/replays?limit=1", nil)
	cursor, _ := page["next_cursor"].(string)
	if p := page["data"].([]any); len(p) != 1 || p[0].(map[string]any)["id"] != dflt || cursor == "" {
		t.Fatalf("first page of one %v", page)
	}
	page = e.admin.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub+"/replays?limit=1&cursor="+cursor, nil)
	if p := page["data"].([]any); len(p) != 1 || p[0].(map[string]any)["id"] != resend || page["next_cursor"] != nil {
		t.Fatalf("second page of one %v", page)
	}
	if st, out := e.admin.Do("GET", "/v1/subscriptions/"+sub+"/replays?limit=0", nil); st != 400 || errField(out) != "limit" {
		t.Errorf("limit=0: %d %v, want 400 naming limit", st, out)
	}

	// Cancelling a finished job: 409 naming its state; it stays done.
	st, out = e.admin.Do("POST", "/v1/replays/"+resend+"/cancel", nil)
	if msg, _ := out["error"].(map[string]any)["message"].(string); st != http.StatusConflict || errCode(out) != "conflict" || !strings.Contains(msg, "done") {
		t.Errorf("cancelling a done job: %d %v, want 409 naming done", st, out)
	}
	if j := e.admin.Must(http.StatusOK, "GET", "/v1/replays/"+resend, nil); j["state"] != "done" || j["cancelled_at"] != nil {
		t.Errorf("a refused cancel changed the job: %v", j)
	}
	if st, _ := e.admin.Do("POST", "/v1/replays/rpl_nope/cancel", nil); st != http.StatusNotFound {
		t.Errorf("cancelling an unknown job: %d, want 404", st)
	}

	// Another tenant sees none of it.
	other := e.tenantKey("globex")
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/replays/" + resend},
		{"POST", "/v1/replays/" + resend + "/cancel"},
		{"GET", "/v1/subscriptions/" + sub + "/replays"},
	} {
		if st, out := other.Do(c.method, c.path, nil); st != http.StatusNotFound {
			t.Errorf("another tenant %s %s: %d %v, want 404", c.method, c.path, st, out)
		}
	}

	// Without a rate_limit the default rate is 500.
	free, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	out = e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+free+"/replay", map[string]any{"since": since})
	if j := out["job"].(map[string]any); j["rate"] != 500.0 {
		t.Errorf("default rate %v, want 500", j["rate"])
	}
}

// Two nodes on one PostgreSQL database: the job is stepped by the node
// that owns its destination, and a cancel made through the other node
// stops it there at once. The count stays, nothing more arrives.
func TestReplayCancelThroughAnotherNodeStopsTheOwner(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	rc := receiverOn(t, a)
	sub, _ := a.subscribe(a.admin, rc.URL, []string{"*"}, nil)
	waitKnown(t, sub, present, a, b)
	const n = 1000
	failedDeliveries(t, a, sub, n)
	// Started through b, which does not own the destination: a steps it.
	job := b.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/replay",
		map[string]any{"since": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "rate": 50})["job_id"].(string)
	testenv.Eventually(t, 20*time.Second, "the replay under way", func() bool { return rc.Count() >= 60 })
	for _, r := range rc.Requests() {
		if ua := r.Header.Get("User-Agent"); ua != "hookd/test-node-a" {
			t.Fatalf("a replayed delivery was sent by %q, want node-a, the owner", ua)
		}
	}

	j := b.admin.Must(http.StatusOK, "POST", "/v1/replays/"+job+"/cancel", nil)
	replayed := int(j["replayed"].(float64))
	if j["state"] != "cancelled" || replayed < 60 || replayed >= n {
		t.Fatalf("cancel through node-b answered %v, want cancelled with between 60 and %d replayed", j, n)
	}
	testenv.Eventually(t, 10*time.Second, "what the job put back arrives", func() bool { return rc.Count() >= replayed })
	stays(t, 2*time.Second, "no more arrivals after the cancel's put-backs", func() bool { return rc.Count() == replayed })
	for _, node := range []*env{a, b} {
		if j := node.admin.Must(http.StatusOK, "GET", "/v1/replays/"+job, nil); j["state"] != "cancelled" || j["replayed"] != float64(replayed) {
			t.Errorf("job read on %s: %v, want cancelled with %d replayed", node.app.dispatch.Node(), j, replayed)
		}
	}
	if got := countIn(t, a, sub, core.DeliveryFailed); got != n-replayed {
		t.Errorf("%d deliveries still failed, want %d", got, n-replayed)
	}
}
