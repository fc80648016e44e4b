package app

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
)

// closedPort returns a loopback URL nothing listens on: connections to it
// are refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/hook"
	ln.Close()
	return url
}

// status answers every request with code and body.
func status(t *testing.T, code int, body string) *testenv.Receiver {
	rc := testenv.NewReceiver(t)
	rc.Respond = func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(code)
		w.Write([]byte(body))
	}
	return rc
}

// Health and the list say why an endpoint fails: the last failure's
// status, class, error and answer, with one word for the endpoint; the
// list embeds it (one request for a page), and /v1/failing gathers the
// failing ones, across tenants for the admin.
func TestHealthSaysWhyEndpointsFail(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	acme, globex := e.tenantKey("acme"), e.tenantKey("globex")
	five := status(t, http.StatusBadGateway, "<html><body>502 Bad Gateway</body></html>")
	four := status(t, http.StatusBadRequest, `{"error":"bad signature"}`)
	ok := testenv.NewReceiver(t)
	fast := map[string]any{"retry_schedule": []string{"1h"}} // one retry, long after the test
	fiveSub, _ := e.subscribe(acme, five.URL, []string{"*"}, fast)
	refusedSub, _ := e.subscribe(acme, closedPort(t), []string{"*"}, fast)
	fourSub, _ := e.subscribe(acme, four.URL, []string{"*"}, fast)
	okSub, _ := e.subscribe(acme, ok.URL, []string{"*"}, nil)
	theirs, _ := e.subscribe(globex, closedPort(t), []string{"*"}, fast)
	e.post(acme, "order.created", map[string]any{})
	e.post(globex, "order.created", map[string]any{})

	health := func(c *testenv.Client, id string) map[string]any {
		return c.Must(http.StatusOK, "GET", "/v1/subscriptions/"+id+"/health", nil)
	}
	for _, id := range []string{fiveSub, refusedSub, fourSub} {
		testenv.Eventually(t, 10*time.Second, id+" to fail", func() bool { return health(acme, id)["last_failure"] != nil })
	}
	testenv.Eventually(t, 10*time.Second, "the healthy endpoint to get its event", func() bool { return ok.Count() == 1 })
	for id, want := range map[string]struct {
		status any
		class  string
		text   string
	}{
		fiveSub:    {float64(502), "http_5xx", "<html><body>502 Bad Gateway</body></html>"},
		refusedSub: {nil, "connection_refused", "connection refused"},
		fourSub:    {float64(400), "http_4xx", `{"error":"bad signature"}`},
	} {
		h := health(acme, id)
		f := h["last_failure"].(map[string]any)
		text := f["response"]
		if want.status == nil {
			text = f["error"]
		}
		if h["status"] != "failing" || f["status"] != want.status || f["class"] != want.class || text != want.text || f["at"] == nil {
			t.Errorf("%s: status %v, last failure %v; want failing with %v %s %q", id, h["status"], f, want.status, want.class, want.text)
		}
		if h["failing_since"] == nil {
			t.Errorf("%s: failing_since null while it fails", id)
		}
	}
	// Retried ones say when they are tried next; the 400 failed at once, nothing is left to try.
	if h := health(acme, fiveSub); h["pending"] != float64(1) || h["next_attempt_at"] == nil {
		t.Errorf("502 endpoint: pending %v, next attempt %v; want 1 and a time", h["pending"], h["next_attempt_at"])
	}
	if h := health(acme, fourSub); h["pending"] != float64(0) || h["next_attempt_at"] != nil {
		t.Errorf("400 endpoint: pending %v, next attempt %v; want 0 and none", h["pending"], h["next_attempt_at"])
	}
	if h := health(acme, okSub); h["status"] != "healthy" || h["last_failure"] != nil || h["held_by"] != nil {
		t.Errorf("healthy endpoint: %v", h)
	}
	if h := health(acme, okSub); len(h["recent_attempts"].([]any)) != 60 {
		t.Errorf("healthy endpoint's recent attempts: %v, want 60 minutes", h["recent_attempts"])
	}

	// The list embeds the same, one request for the page.
	list := acme.Must(http.StatusOK, "GET", "/v1/subscriptions?include=health", nil)["data"].([]any)
	seen := map[string]string{}
	for _, s := range list {
		s := s.(map[string]any)
		h, _ := s["health"].(map[string]any)
		if h == nil {
			t.Fatalf("subscription %v has no health", s["id"])
		}
		seen[s["id"].(string)] = h["status"].(string)
		if s["id"] == refusedSub && h["last_failure"].(map[string]any)["class"] != "connection_refused" {
			t.Errorf("listed refused endpoint: %v", h["last_failure"])
		}
	}
	if len(seen) != 4 || seen[okSub] != "healthy" || seen[fiveSub] != "failing" || seen[fourSub] != "failing" || seen[refusedSub] != "failing" {
		t.Errorf("listed statuses %v", seen)
	}
	if _, has := acme.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)["data"].([]any)[0].(map[string]any)["health"]; has {
		t.Error("health embedded without include=health")
	}
	if st, out := acme.Do("GET", "/v1/subscriptions?include=stats", nil); st != http.StatusBadRequest || errField(out) != "include" {
		t.Errorf("include=stats: %d %v, want 400 naming include", st, out)
	}

	// Failing now: a tenant sees its own three, the admin every tenant's.
	failing := func(c *testenv.Client, query string) []string {
		var ids []string
		for _, s := range c.Must(http.StatusOK, "GET", "/v1/failing"+query, nil)["data"].([]any) {
			s := s.(map[string]any)
			if s["health"].(map[string]any)["status"] != "failing" {
				t.Errorf("%v listed failing with status %v", s["id"], s["health"])
			}
			ids = append(ids, s["id"].(string))
		}
		return ids
	}
	testenv.Eventually(t, 10*time.Second, "globex's endpoint to fail", func() bool { return health(globex, theirs)["last_failure"] != nil })
	if got := strings.Join(failing(acme, ""), " "); got != strings.Join(sorted(fiveSub, refusedSub, fourSub), " ") {
		t.Errorf("acme's failing: %s", got)
	}
	if got := failing(e.admin, ""); len(got) != 4 {
		t.Errorf("admin's failing across tenants: %v, want 4", got)
	}
	if got := failing(e.admin, "?tenant_id=globex"); len(got) != 1 || got[0] != theirs {
		t.Errorf("admin's failing of globex: %v", got)
	}
	if st, _ := acme.Do("GET", "/v1/failing?tenant_id=globex", nil); st != http.StatusNotFound {
		t.Errorf("acme asking for globex's failing: %d, want 404", st)
	}
	if st, out := e.admin.Do("GET", "/v1/failing?limit=0", nil); st != http.StatusBadRequest || errField(out) != "limit" {
		t.Errorf("limit=0: %d %v", st, out)
	}

	// The admin's tenant list names every tenant; a tenant key may not read it.
	var tenants []string
	for _, tn := range e.admin.Must(http.StatusOK, "GET", "/v1/tenants", nil)["data"].([]any) {
		tenants = append(tenants, tn.(map[string]any)["id"].(string))
	}
	if strings.Join(tenants, " ") != "acme default globex" {
		t.Errorf("tenants %v", tenants)
	}
	if st, out := acme.Do("GET", "/v1/tenants", nil); st != http.StatusForbidden || errCode(out) != "forbidden" {
		t.Errorf("a tenant key listing tenants: %d %v, want 403", st, out)
	}
}

func sorted(ids ...string) []string {
	out := append([]string(nil), ids...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// The event log over HTTP: a tenant's events and deliveries newest first,
// paged both ways by the cursors it gives, filtered, looked up by
// idempotency key; the types it sent; and the count a bulk replay would
// put back. Another tenant sees none of it.
func TestEventLogAPI(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	acme, globex := e.tenantKey("acme"), e.tenantKey("globex")
	four := status(t, http.StatusBadRequest, "no")
	ok := testenv.NewReceiver(t)
	bad, _ := e.subscribe(acme, four.URL, []string{"order.*"}, nil)
	e.subscribe(acme, ok.URL, []string{"*"}, nil)
	e.subscribe(globex, ok.URL, []string{"*"}, nil)
	var posted []string // acme's, oldest first
	for i := range 7 {
		body := map[string]any{"type": []string{"order.created", "invoice.sent"}[i%2], "payload": map[string]any{"i": i}}
		if i == 3 {
			body["idempotency_key"] = "order-3"
		}
		posted = append(posted, acme.Must(http.StatusAccepted, "POST", "/v1/events", body)["id"].(string))
	}
	e.post(globex, "secret.thing", map[string]any{})
	testenv.Eventually(t, 10*time.Second, "every delivery done", func() bool { return ok.Count() == 8 && four.Count() == 4 })
	testenv.Eventually(t, 10*time.Second, "the 400s recorded", func() bool {
		return len(acme.Must(http.StatusOK, "GET", "/v1/deliveries?state=failed", nil)["data"].([]any)) == 4
	})

	// page lists IDs (or types), leaving out hookd's own events: the 400s
	// make hookd tell acme its endpoint fails (hookd.subscription.failing).
	page := func(c *testenv.Client, path string) ([]string, string) {
		out := c.Must(http.StatusOK, "GET", path, nil)
		var ids []string
		for _, x := range out["data"].([]any) {
			if s, isString := x.(string); isString {
				if !strings.HasPrefix(s, "hookd.") {
					ids = append(ids, s)
				}
				continue
			}
			if typ, _ := x.(map[string]any)["type"].(string); !strings.HasPrefix(typ, "hookd.") {
				ids = append(ids, x.(map[string]any)["id"].(string))
			}
		}
		next, _ := out["next_cursor"].(string)
		return ids, next
	}
	var got []string
	for path, n := "/v1/events?limit=3", 0; path != "" && n < 10; n++ {
		ids, next := page(acme, path)
		got = append(got, ids...)
		path = ""
		if next != "" {
			path = "/v1/events?limit=3&cursor=" + url.QueryEscape(next)
		}
	}
	if want := reversed(posted); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events in pages of 3:\n got  %v\n want %v (newest first)", got, want)
	}
	if ids, _ := page(acme, "/v1/events?type=invoice.sent"); strings.Join(ids, " ") != strings.Join([]string{posted[5], posted[3], posted[1]}, " ") {
		t.Errorf("invoice.sent events: %v", ids)
	}
	if ids, _ := page(acme, "/v1/events?idempotency_key=order-3"); len(ids) != 1 || ids[0] != posted[3] {
		t.Errorf("by idempotency key: %v, want %s", ids, posted[3])
	}
	if ids, _ := page(acme, "/v1/events?type=secret.thing"); len(ids) != 0 {
		t.Errorf("acme sees globex's events: %v", ids)
	}
	if ids, _ := page(acme, "/v1/events?since="+url.QueryEscape(time.Now().Add(time.Minute).Format(time.RFC3339))); len(ids) != 0 {
		t.Errorf("events since a minute ahead: %v", ids)
	}
	// Deliveries: failed ones answered 400, of order.created, each of the bad subscription.
	out := acme.Must(http.StatusOK, "GET", "/v1/deliveries?state=failed&status=400&event_type=order.created", nil)["data"].([]any)
	if len(out) != 4 {
		t.Fatalf("failed 400 deliveries of order.created: %d, want 4", len(out))
	}
	for _, d := range out {
		d := d.(map[string]any)
		if d["subscription_id"] != bad || d["last_status"] != float64(400) || d["state"] != "failed" {
			t.Errorf("listed delivery %v", d)
		}
	}
	if all, _ := page(acme, "/v1/deliveries?limit=100"); len(all) != 11 {
		t.Errorf("acme's deliveries: %d, want 11 (7 to the catch-all, 4 to order.*)", len(all))
	}
	if types, _ := page(acme, "/v1/event-types"); strings.Join(types, " ") != "invoice.sent order.created" {
		t.Errorf("acme's event types: %v", types)
	}
	if types, next := page(acme, "/v1/event-types?limit=1&cursor=hookd.~"); len(types) != 1 || next != "invoice.sent" {
		t.Errorf("first of acme's event types after hookd's: %v then %q", types, next)
	}
	// What a bulk replay would put back: the four failed, none skipped.
	if c := acme.Must(http.StatusOK, "GET", "/v1/subscriptions/"+bad+"/deliveries/count", nil); c["count"] != float64(4) || c["exact"] != true {
		t.Errorf("count of failed and skipped: %v, want 4", c)
	}
	if c := acme.Must(http.StatusOK, "GET", "/v1/subscriptions/"+bad+"/deliveries/count?state=delivered", nil); c["count"] != float64(0) {
		t.Errorf("count of delivered: %v, want 0", c)
	}
	// Globex: none of acme's, and naming acme answers 404.
	if ids, _ := page(globex, "/v1/events"); len(ids) != 1 {
		t.Errorf("globex's events: %v", ids)
	}
	for _, path := range []string{"/v1/events?tenant_id=acme", "/v1/deliveries?tenant_id=acme", "/v1/event-types?tenant_id=acme",
		"/v1/subscriptions/" + bad + "/deliveries/count"} {
		if st, out := globex.Do("GET", path, nil); st != http.StatusNotFound {
			t.Errorf("globex GET %s: %d %v, want 404", path, st, out)
		}
	}
	// The admin reads acme's by naming it.
	if ids, _ := page(e.admin, "/v1/events?tenant_id=acme&limit=100"); len(ids) != 7 {
		t.Errorf("admin's view of acme's events: %d", len(ids))
	}
}

func reversed(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[len(xs)-1-i] = x
	}
	return out
}

// credential is the endpoint header failedOnce's subscription carries.
const credential = "secret-credential-value"

// failedOnce subscribes a receiver, with an X-Api-Key credential, that
// answers its first request 400 "try later" (and an X-Why header) and
// every later one 204, posts one event and waits for its delivery to fail.
func (e *env) failedOnce(t *testing.T) (*testenv.Receiver, string) {
	rc := testenv.NewReceiver(t)
	rc.Respond = func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			w.Header().Set("X-Why", "busy")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte("try later"))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
	e.subscribe(e.admin, rc.URL, []string{"*"}, map[string]any{"headers": map[string]string{"X-Api-Key": credential}})
	dlv := e.onlyDelivery(e.post(e.admin, "order.created", map[string]any{"note": "<b>é</b>"}))
	e.waitDelivery(dlv, "failed", 10*time.Second)
	return rc, dlv
}

// A delivery shows what was sent (headers with signatures cut short, the
// endpoint's credentials redacted, the body byte for byte) and what came
// back (status, headers, body head), and marks a replay.
func TestDeliveryShowsRequestAndAnswer(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc, dlv := e.failedOnce(t)

	st, raw := e.admin.Do("GET", "/v1/deliveries/"+dlv, nil)
	if st != http.StatusOK {
		t.Fatalf("GET delivery: %d %v", st, raw)
	}
	sent := rc.Requests()[0]
	req := raw["request"].(map[string]any)
	headers := req["headers"].(map[string]any)
	if req["body"] != string(sent.Body) {
		t.Errorf("request body %q, the endpoint got %q", req["body"], sent.Body)
	}
	sig := sent.Header.Get("webhook-signature")
	if headers["webhook-id"] != sent.Header.Get("webhook-id") || headers["webhook-timestamp"] != sent.Header.Get("webhook-timestamp") ||
		headers["webhook-signature"] != sig[:11]+"…" || headers["user-agent"] != sent.Header.Get("user-agent") {
		t.Errorf("request headers %v; the endpoint got %v", headers, sent.Header)
	}
	if headers["X-Api-Key"] != "[redacted]" || strings.Contains(fmt.Sprint(raw), credential) {
		t.Errorf("the endpoint's credential shows: %v", headers)
	}
	a := raw["attempts"].([]any)[0].(map[string]any)
	if a["status_code"] != float64(400) || a["response"] != "try later" || a["response_headers"].(map[string]any)["X-Why"] != "busy" {
		t.Errorf("attempt %v, want 400, its body and its X-Why header", a)
	}
	if raw["replayed_at"] != nil || raw["round_start"] != float64(0) {
		t.Errorf("never replayed: replayed_at %v, round_start %v", raw["replayed_at"], raw["round_start"])
	}

	e.admin.Must(http.StatusAccepted, "POST", "/v1/deliveries/"+dlv+"/replay", nil)
	got := e.waitDelivery(dlv, "delivered", 10*time.Second)
	if got["replayed_at"] == nil || got["round_start"] != float64(1) || len(got["attempts"].([]any)) != 2 {
		t.Errorf("after a replay: replayed_at %v, round_start %v, %d attempts; want a time, 1 and 2", got["replayed_at"], got["round_start"], len(got["attempts"].([]any)))
	}
}

// Minute stats come from the store, as hours and days do: a tenant's and a
// subscription's agree, pending included; subscription_ids breaks them
// down per subscription in one call (another tenant's counting nothing),
// include=event_types adds the types sent; a day of minutes is the most
// one call reads, and bad input answers 400 naming the field.
func TestStatsByMinute(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	acme, globex := e.tenantKey("acme"), e.tenantKey("globex")
	ok, four := testenv.NewReceiver(t), status(t, http.StatusBadRequest, "no")
	good, _ := e.subscribe(acme, ok.URL, []string{"order.*"}, nil)
	bad, _ := e.subscribe(acme, four.URL, []string{"order.*"}, nil)
	held, _ := e.subscribe(acme, ok.URL+"/held", []string{"order.*"}, nil)
	acme.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+held, map[string]any{"state": "paused"})
	theirs, _ := e.subscribe(globex, ok.URL, []string{"*"}, nil)
	for i := range 3 {
		e.post(acme, "order.created", map[string]any{"i": i})
	}
	e.post(globex, "secret.thing", map[string]any{})
	testenv.Eventually(t, 10*time.Second, "every delivery done", func() bool { return ok.Count() == 4 && four.Count() == 3 })
	testenv.Eventually(t, 10*time.Second, "the 400s recorded", func() bool {
		return acme.Must(http.StatusOK, "GET", "/v1/subscriptions/"+bad+"/health", nil)["failed"] == float64(3)
	})

	sum := func(data any) map[string]float64 {
		out := map[string]float64{}
		for _, b := range data.([]any) {
			for k, v := range b.(map[string]any) {
				if n, isNum := v.(float64); isNum {
					out[k] += n
				}
			}
		}
		return out
	}
	all := acme.Must(http.StatusOK, "GET", "/v1/stats?granularity=minute", nil)
	since, _ := time.Parse(time.RFC3339, all["since"].(string))
	until, _ := time.Parse(time.RFC3339, all["until"].(string))
	if n := len(all["data"].([]any)); all["granularity"] != "minute" || n != 60 || until.Sub(since) != time.Hour || until.Before(time.Now()) {
		t.Errorf("minute stats: %v by %s from %v to %v; want the last hour's 60", n, all["granularity"], since, until)
	}
	if s := sum(all["data"]); s["delivered"] != 3 || s["failed"] != 3 || s["pending"] != 3 || s["attempts"] != 6 {
		t.Errorf("acme's minutes add up to %v; want 3 delivered, 3 failed, 3 pending (paused), 6 attempts", s)
	}

	q := "granularity=minute&since=" + since.Format(time.RFC3339) + "&until=" + until.Format(time.RFC3339)
	each := acme.Must(http.StatusOK, "GET", "/v1/stats?"+q+"&include=event_types&subscription_ids="+
		strings.Join([]string{good, bad, held, theirs, good}, ","), nil)
	var types []string
	for _, ty := range each["event_types"].([]any) {
		if !strings.HasPrefix(ty.(string), "hookd.") { // the 400s tell acme its endpoint fails
			types = append(types, ty.(string))
		}
	}
	if strings.Join(types, " ") != "order.created" {
		t.Errorf("acme's event types in the stats: %v", each["event_types"])
	}
	parts := each["subscriptions"].([]any)
	if len(parts) != 4 {
		t.Fatalf("%d subscriptions apart, want 4 (the repeated one once): %v", len(parts), parts)
	}
	for i, id := range []string{good, bad, held, theirs} {
		part := parts[i].(map[string]any)
		if part["subscription_id"] != id {
			t.Errorf("subscription %d apart is %v, want %s", i, part["subscription_id"], id)
			continue
		}
		if id == theirs {
			if s := sum(part["data"]); s["delivered"]+s["attempts"] != 0 {
				t.Errorf("acme's stats count globex's subscription: %v", s)
			}
			continue
		}
		// Bucket by bucket what the subscription's own stats say.
		own := acme.Must(http.StatusOK, "GET", "/v1/subscriptions/"+id+"/stats?"+q, nil)["data"].([]any)
		for j, b := range part["data"].([]any) {
			b, o := b.(map[string]any), own[j].(map[string]any)
			for _, k := range []string{"start", "delivered", "failed", "skipped", "pending", "attempts"} {
				if b[k] != o[k] {
					t.Errorf("%s minute %d: %s %v apart, %v in its own stats", id, j, k, b[k], o[k])
				}
			}
		}
	}
	if s := sum(parts[2].(map[string]any)["data"]); s["pending"] != 3 {
		t.Errorf("the paused subscription's minutes: %v, want 3 pending", s)
	}
	if _, has := all["subscriptions"]; has {
		t.Errorf("subscriptions apart without subscription_ids: %v", all["subscriptions"])
	}

	// A day of minutes at most; 200 subscriptions and 12,000 buckets across them.
	day := "&since=2026-01-01T00:00:00Z&until=2026-01-02T00:00:00Z"
	acme.Must(http.StatusOK, "GET", "/v1/stats?granularity=minute"+day, nil)
	acme.Must(http.StatusOK, "GET", "/v1/subscriptions/"+good+"/stats?granularity=minute"+day, nil)
	many := make([]string, 201)
	for i := range many {
		many[i] = fmt.Sprintf("sub_%d", i)
	}
	acme.Must(http.StatusOK, "GET", "/v1/stats?granularity=minute&subscription_ids="+strings.Join(many[:200], ","), nil)
	for _, c := range []struct{ path, field string }{
		{"/v1/stats?granularity=minute&since=2026-01-01T00:00:00Z&until=2026-01-02T00:01:00Z", "until"},
		{"/v1/subscriptions/" + good + "/stats?granularity=minute&since=2026-01-01T00:00:00Z&until=2026-01-02T00:00:01Z", "until"},
		{"/v1/stats?granularity=minute&since=" + url.QueryEscape(time.Now().Add(-25*time.Hour).Format(time.RFC3339)), "since"},
		{"/v1/subscriptions/" + good + "/stats?granularity=minute&since=" + url.QueryEscape(time.Now().Add(-25*time.Hour).Format(time.RFC3339)), "since"},
		{"/v1/stats?subscription_ids=", "subscription_ids"},
		{"/v1/stats?subscription_ids=" + good + ",,", "subscription_ids"},
		{"/v1/stats?subscription_ids=" + strings.Join(many, ","), "subscription_ids"},
		{"/v1/stats?granularity=minute&subscription_ids=" + strings.Join(many[:10], ",") + day, "subscription_ids"},
		{"/v1/stats?include=health", "include"},
	} {
		if st, out := acme.Do("GET", c.path, nil); st != http.StatusBadRequest || errField(out) != c.field {
			t.Errorf("GET %s: %d %v, want 400 naming %s", c.path, st, out, c.field)
		}
	}
}

// Minute stats read the store, so every node of a cluster answers the
// same ones, not only the node that sent (whose memory recent_attempts is).
func TestMinuteStatsOnEveryNode(t *testing.T) {
	t.Parallel()
	a, b := twoNodes(t)
	rc := receiverOn(t, a)
	sub, _ := a.subscribe(a.admin, rc.URL, []string{"*"}, nil)
	waitKnown(t, sub, present, a, b)
	for i := range 4 {
		a.post(a.admin, "order.created", map[string]any{"i": i})
	}
	testenv.Eventually(t, 10*time.Second, "the four delivered", func() bool { return rc.Count() == 4 })
	path := "/v1/stats?granularity=minute&subscription_ids=" + sub
	testenv.Eventually(t, 10*time.Second, "the results recorded", func() bool {
		got := 0.0
		for _, m := range a.admin.Must(http.StatusOK, "GET", path, nil)["subscriptions"].([]any)[0].(map[string]any)["data"].([]any) {
			got += m.(map[string]any)["delivered"].(float64)
		}
		return got == 4
	})
	first := a.admin.Must(http.StatusOK, "GET", path, nil)
	fixed := path + "&since=" + url.QueryEscape(first["since"].(string)) + "&until=" + url.QueryEscape(first["until"].(string))
	delivered := func(n *env) []any {
		var out []any
		for _, m := range n.admin.Must(http.StatusOK, "GET", fixed, nil)["subscriptions"].([]any)[0].(map[string]any)["data"].([]any) {
			out = append(out, m.(map[string]any)["delivered"])
		}
		return out
	}
	if fa, fb := fmt.Sprint(delivered(a)), fmt.Sprint(delivered(b)); fa != fb {
		t.Errorf("node a's minutes %s, node b's %s; want the same", fa, fb)
	}
}
