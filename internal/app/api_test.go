package app

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/testenv"
)

func TestSSRFGuardWithoutAllowNetwork(t *testing.T) {
	t.Parallel()
	e := start(t, false)
	rc := testenv.NewReceiver(t)
	port := rc.URL[strings.LastIndex(rc.URL, ":")+1:]
	// IP literals are refused at registration.
	for _, host := range []string{"127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "0x7f000001", "2130706433", "169.254.169.254", "10.0.0.1"} {
		st, out := e.admin.Do("POST", "/v1/subscriptions", map[string]any{"url": "http://" + host + ":" + port + "/", "event_types": []string{"*"}})
		if st != http.StatusUnprocessableEntity || errField(out) != "url" {
			t.Errorf("registering %s: %d %v, want 422 naming url", host, st, out)
		}
	}
	// A name that resolves to loopback passes registration; the dialer refuses it.
	e.subscribe(e.admin, "http://localhost:"+port+"/", []string{"*"}, nil)
	got := e.waitDelivery(e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{})), "failed", 10*time.Second)
	if !strings.Contains(got["last_error"].(string), "blocked") {
		t.Errorf("last_error %q, want it to say blocked", got["last_error"])
	}
	if n := rc.Count(); n != 0 {
		t.Fatalf("the loopback receiver got %d requests", n)
	}
}

func errField(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	f, _ := e["field"].(string)
	return f
}

func errCode(out map[string]any) string {
	e, _ := out["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

func TestTenantKeySeesOnlyItsTenant(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	keyA := e.admin.Must(201, "POST", "/v1/tenants", map[string]any{"id": "acme"})["api_key"].(string)
	keyB := e.admin.Must(201, "POST", "/v1/tenants", map[string]any{"name": "Globex"})["api_key"].(string)
	a := &testenv.Client{T: t, Base: e.base, Token: keyA}
	b := &testenv.Client{T: t, Base: e.base, Token: keyB}

	subA, _ := e.subscribe(a, rc.URL, []string{"*"}, nil)
	evA := e.post(a, "a.b", map[string]any{})
	dlA := e.onlyDelivery(evA)
	e.waitDelivery(dlA, "delivered", 10*time.Second)

	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/events/" + evA},
		{"GET", "/v1/subscriptions/" + subA},
		{"PATCH", "/v1/subscriptions/" + subA},
		{"DELETE", "/v1/subscriptions/" + subA},
		{"POST", "/v1/subscriptions/" + subA + "/rotate-secret"},
		{"GET", "/v1/subscriptions/" + subA + "/deliveries"},
		{"GET", "/v1/deliveries/" + dlA},
		{"POST", "/v1/deliveries/" + dlA + "/replay"},
	} {
		var body any
		if c.method == "PATCH" {
			body = map[string]any{"state": "paused"}
		}
		if st, _ := b.Do(c.method, c.path, body); st != 404 {
			t.Errorf("tenant B %s %s: %d, want 404", c.method, c.path, st)
		}
	}
	if st, _ := b.Do("POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}, "tenant_id": "acme"}); st != 404 {
		t.Errorf("tenant B posting into acme: %d, want 404", st)
	}
	if st, _ := b.Do("POST", "/v1/subscriptions", map[string]any{"url": rc.URL, "event_types": []string{"*"}, "tenant_id": "acme"}); st != 404 {
		t.Errorf("tenant B subscribing in acme: %d, want 404", st)
	}
	if st, _ := b.Do("POST", "/v1/tenants", map[string]any{}); st != 403 {
		t.Errorf("tenant key creating a tenant: %d, want 403", st)
	}
	if list := b.Must(200, "GET", "/v1/subscriptions", nil)["data"].([]any); len(list) != 0 {
		t.Errorf("tenant B lists %d subscriptions, want 0", len(list))
	}
	if st, _ := b.Do("GET", "/v1/subscriptions?tenant_id=acme", nil); st != 404 {
		t.Errorf("tenant B listing acme: %d, want 404", st)
	}
	// Nothing of A changed, nothing was sent again.
	s := a.Must(200, "GET", "/v1/subscriptions/"+subA, nil)
	if s["state"] != "active" || rc.Count() != 1 {
		t.Errorf("after B's attempts: state %v, requests %d; want active and 1", s["state"], rc.Count())
	}
	if list := a.Must(200, "GET", "/v1/subscriptions", nil)["data"].([]any); len(list) != 1 {
		t.Errorf("tenant A lists %d subscriptions, want 1", len(list))
	}
	// Bad or missing tokens.
	for _, tok := range []string{"", "hk_wrong"} {
		c := &testenv.Client{T: t, Base: e.base, Token: tok}
		if st, out := c.Do("GET", "/v1/subscriptions", nil); st != 401 || errCode(out) != "unauthorized" {
			t.Errorf("token %q: %d %v, want 401", tok, st, out)
		}
	}
}

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	big := `{"type":"a.b","payload":"` + strings.Repeat("x", 256<<10) + `"}`
	cases := []struct {
		name, method, path string
		body               any
		status             int
		field              string
	}{
		{"not json", "POST", "/v1/events", `{"type":`, 400, "body"},
		{"two objects", "POST", "/v1/events", `{"type":"a.b","payload":{}} {}`, 400, "body"},
		{"unknown field", "POST", "/v1/events", `{"type":"a.b","payload":{},"typo":1}`, 400, "typo"},
		{"type missing", "POST", "/v1/events", `{"payload":{}}`, 422, "type"},
		{"type not dotted lowercase", "POST", "/v1/events", `{"type":"Order Created","payload":{}}`, 422, "type"},
		{"type wrong kind", "POST", "/v1/events", `{"type":5,"payload":{}}`, 400, "type"},
		{"payload missing", "POST", "/v1/events", `{"type":"a.b"}`, 422, "payload"},
		{"payload null", "POST", "/v1/events", `{"type":"a.b","payload":null}`, 422, "payload"},
		{"payload too large", "POST", "/v1/events", big, 413, "payload"},
		{"unknown tenant", "POST", "/v1/events", `{"type":"a.b","payload":{},"tenant_id":"nope"}`, 404, "tenant_id"},
		{"url missing", "POST", "/v1/subscriptions", `{"event_types":["*"]}`, 422, "url"},
		{"url not http", "POST", "/v1/subscriptions", `{"url":"ftp://example.com","event_types":["*"]}`, 422, "url"},
		{"url relative", "POST", "/v1/subscriptions", `{"url":"/hook","event_types":["*"]}`, 422, "url"},
		{"event_types missing", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `"}`, 422, "event_types"},
		{"event_types empty", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":[]}`, 422, "event_types"},
		{"event_types bad pattern", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["a.*.b"]}`, 422, "event_types[0]"},
		{"retry_schedule not duration", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"retry_schedule":["soon"]}`, 422, "retry_schedule[0]"},
		{"retry_schedule too short", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"retry_schedule":["1ms"]}`, 422, "retry_schedule[0]"},
		{"timeout too long", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"timeout":"1m"}`, 422, "timeout"},
		{"max_concurrency negative", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"max_concurrency":-1}`, 422, "max_concurrency"},
		{"rate_limit negative", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"rate_limit":-1}`, 422, "rate_limit"},
		{"retry_status_codes 2xx", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"retry_status_codes":[200]}`, 422, "retry_status_codes[0]"},
		{"retry_status_codes twice", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"retry_status_codes":[429,301,429]}`, 422, "retry_status_codes[2]"},
		{"rate_limit too slow", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"rate_limit":0.0000001}`, 422, "rate_limit"},
		// 1e-400 is below the smallest float64: decoded as 0 it was "unlimited".
		{"rate_limit under a float's range", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"rate_limit":1e-400}`, 400, "rate_limit"},
		{"header svix-*", "POST", "/v1/subscriptions", `{"url":"` + rc.URL + `","event_types":["*"],"headers":{"Svix-Signature":"v1,x"}}`, 422, "headers.Svix-Signature"},
		{"replay rate too slow", "POST", "/v1/subscriptions/" + sub + "/replay", `{"since":"2026-01-01T00:00:00Z","rate":1e-300}`, 422, "rate"},
		{"replay rate under a float's range", "POST", "/v1/subscriptions/" + sub + "/replay", `{"since":"2026-01-01T00:00:00Z","rate":-1e-400}`, 400, "rate"},
		{"patch bad state", "PATCH", "/v1/subscriptions/" + sub, `{"state":"gone"}`, 422, "state"},
		{"patch bad url", "PATCH", "/v1/subscriptions/" + sub, `{"url":"nope","state":"paused"}`, 422, "url"},
		{"list bad state", "GET", "/v1/subscriptions/" + sub + "/deliveries?state=lost", nil, 400, "state"},
		{"list bad since", "GET", "/v1/subscriptions/" + sub + "/deliveries?since=yesterday", nil, 400, "since"},
		{"list bad limit", "GET", "/v1/subscriptions/" + sub + "/deliveries?limit=1000", nil, 400, "limit"},
		{"tenant bad id", "POST", "/v1/tenants", `{"id":"Has Spaces"}`, 422, "id"},
		{"tenant empty id", "POST", "/v1/tenants", `{"id":""}`, 422, "id"},
		{"replay from the future", "POST", "/v1/subscriptions/" + sub + "/replay", `{"since":"2999-01-01T00:00:00Z"}`, 422, "since"},
		{"events bad type", "GET", "/v1/events?type=Not%20A%20Type", nil, 400, "type"},
		{"events bad since", "GET", "/v1/events?since=monday", nil, 400, "since"},
		{"events until before since", "GET", "/v1/events?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", nil, 400, "until"},
		{"events long key", "GET", "/v1/events?idempotency_key=" + strings.Repeat("k", 256), nil, 400, "idempotency_key"},
		{"events bad cursor", "GET", "/v1/events?cursor=evt_x", nil, 400, "cursor"},
		{"events bad limit", "GET", "/v1/events?limit=0", nil, 400, "limit"},
		{"deliveries bad state", "GET", "/v1/deliveries?state=lost", nil, 400, "state"},
		{"deliveries bad status", "GET", "/v1/deliveries?status=600", nil, 400, "status"},
		{"deliveries status not a number", "GET", "/v1/deliveries?status=5xx", nil, 400, "status"},
		{"deliveries bad event_type", "GET", "/v1/deliveries?event_type=*", nil, 400, "event_type"},
		{"deliveries bad until", "GET", "/v1/deliveries?until=later", nil, 400, "until"},
		{"event types bad limit", "GET", "/v1/event-types?limit=101", nil, 400, "limit"},
		{"count bad state", "GET", "/v1/subscriptions/" + sub + "/deliveries/count?state=failed,lost", nil, 400, "state"},
		{"count bad event_types", "GET", "/v1/subscriptions/" + sub + "/deliveries/count?event_types=a.b,A", nil, 400, "event_types"},
		{"count bad since", "GET", "/v1/subscriptions/" + sub + "/deliveries/count?since=x", nil, 400, "since"},
		{"list bad include", "GET", "/v1/subscriptions?include=everything", nil, 400, "include"},
		{"deliveries garbage cursor", "GET", "/v1/subscriptions/" + sub + "/deliveries?cursor=garbage", nil, 400, "cursor"},
		{"deliveries cursor of another list", "GET", "/v1/subscriptions/" + sub + "/deliveries?cursor=" + sub, nil, 400, "cursor"},
		{"subscriptions garbage cursor", "GET", "/v1/subscriptions?cursor=garbage", nil, 400, "cursor"},
		{"tenants cursor no tenant could have", "GET", "/v1/tenants?cursor=Not%20A%20Tenant", nil, 400, "cursor"},
		{"failing garbage cursor", "GET", "/v1/failing?cursor=sub_", nil, 400, "cursor"},
		{"audit garbage cursor", "GET", "/v1/audit?cursor=%20", nil, 400, "cursor"},
		{"keys garbage cursor", "GET", "/v1/tenants/default/keys?cursor=garbage", nil, 400, "cursor"},
		{"replays garbage cursor", "GET", "/v1/subscriptions/" + sub + "/replays?cursor=garbage", nil, 400, "cursor"},
		{"deliveries until before since", "GET", "/v1/subscriptions/" + sub + "/deliveries?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", nil, 400, "until"},
		{"deliveries by status", "GET", "/v1/subscriptions/" + sub + "/deliveries?status=500", nil, 400, "status"},
		// A query parameter the route does not take: a typo, or another
		// list's filter, read as filtered.
		{"events misspelt filter", "GET", "/v1/events?tpye=a.b", nil, 400, "tpye"},
		{"deliveries of a subscription by event", "GET", "/v1/subscriptions/" + sub + "/deliveries?event_id=evt_x", nil, 400, "event_id"},
		{"event with a query", "POST", "/v1/events?tenant_id=default", `{"type":"a.b","payload":{}}`, 400, "tenant_id"},
		{"subscription with a query", "POST", "/v1/subscriptions?dry_run=1", `{"url":"` + rc.URL + `","event_types":["*"]}`, 400, "dry_run"},
		{"patch with a query", "PATCH", "/v1/subscriptions/" + sub + "?state=paused", `{"state":"paused"}`, 400, "state"},
		{"limit twice", "GET", "/v1/events?limit=1&limit=100", nil, 400, "limit"},
		{"state twice", "GET", "/v1/deliveries?state=failed&state=pending", nil, 400, "state"},
		{"a semicolon", "GET", "/v1/deliveries?state=failed;limit=5", nil, 400, "query"},
		{"a parameter with no name", "GET", "/v1/events?=x", nil, 400, "query"},
		{"tenant null", "POST", "/v1/tenants", `null`, 400, "body"},
		{"event null", "POST", "/v1/events", ` null`, 400, "body"},
		{"patch null", "PATCH", "/v1/subscriptions/" + sub, `null`, 400, "body"},
		{"rotate with a body", "POST", "/v1/subscriptions/" + sub + "/rotate-secret", `{"x":1} trailing`, 400, "body"},
		{"rotate with junk", "POST", "/v1/subscriptions/" + sub + "/rotate-secret", `not json at all`, 400, "body"},
		{"delete with a body", "DELETE", "/v1/subscriptions/" + sub, `{"force":true}`, 400, "body"},
	}
	before := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub, nil)
	tenants := len(e.admin.Must(200, "GET", "/v1/tenants", nil)["data"].([]any))
	for _, c := range cases {
		st, out := e.admin.Do(c.method, c.path, c.body)
		if st != c.status || errField(out) != c.field {
			t.Errorf("%s: %d field %q (%v), want %d field %q", c.name, st, errField(out), out, c.status, c.field)
		}
		if msg, _ := out["error"].(map[string]any)["message"].(string); !strings.Contains(msg, c.field) {
			t.Errorf("%s: message %q does not name %q", c.name, msg, c.field)
		}
	}
	// Nothing was written: one subscription, unchanged, and no delivery.
	list := e.admin.Must(200, "GET", "/v1/subscriptions", nil)["data"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["state"] != "active" || list[0].(map[string]any)["url"] != rc.URL {
		t.Errorf("subscriptions after bad input: %v", list)
	}
	if ds := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub+"/deliveries", nil)["data"].([]any); len(ds) != 0 {
		t.Errorf("%d deliveries after bad input, want 0", len(ds))
	}
	if rc.Count() != 0 {
		t.Errorf("receiver got %d requests after bad input", rc.Count())
	}
	if after := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub, nil); after["updated_at"] != before["updated_at"] ||
		after["previous_secret_expires_at"] != before["previous_secret_expires_at"] {
		t.Errorf("subscription changed by bad input: %v, was %v", after, before)
	}
	if n := len(e.admin.Must(200, "GET", "/v1/tenants", nil)["data"].([]any)); n != tenants {
		t.Errorf("%d tenants after bad input, want %d", n, tenants)
	}
	// A whole number too large says so (it was told to be a whole number).
	if st, out := e.admin.Do("POST", "/v1/subscriptions", `{"url":"`+rc.URL+`","event_types":["*"],"max_concurrency":9223372036854775808}`); st != 400 ||
		!strings.Contains(fmt.Sprint(out), "out of range") {
		t.Errorf("max_concurrency 2^63: %d %v", st, out)
	}
	// A payload nested past the decoder's bound names the place in a
	// message of bounded size: the whole pointer made one of 20 KB.
	deep := `{"type":"a.b","payload":` + strings.Repeat(`{"a":`, 10001) + `1` + strings.Repeat(`}`, 10001) + `}`
	if st, out := e.admin.Do("POST", "/v1/events", deep); st != 400 || errField(out) != "payload" {
		t.Errorf("a payload nested 10,001 deep: %d %v", st, errField(out))
	} else if msg, _ := out["error"].(map[string]any)["message"].(string); len(msg) > 400 || !strings.Contains(msg, "at /payload/") {
		t.Errorf("a payload nested 10,001 deep: a message of %d bytes (%.120q…), want under 400 naming where", len(msg), msg)
	}
	// A call that takes no body still takes {}.
	e.admin.Must(200, "POST", "/v1/subscriptions/"+sub+"/rotate-secret", map[string]any{})
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	body := map[string]any{"type": "a.b", "payload": map[string]any{"n": 1}, "idempotency_key": "k-1"}
	first := e.admin.Must(202, "POST", "/v1/events", body)["id"]
	again := e.admin.Must(200, "POST", "/v1/events", body)["id"]
	if first != again {
		t.Fatalf("repeat answered %v, want the first id %v", again, first)
	}
	testenv.Eventually(t, 5*time.Second, "delivered", func() bool { return rc.Count() >= 1 })
	if ds := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub+"/deliveries", nil)["data"].([]any); len(ds) != 1 {
		t.Errorf("%d deliveries for one idempotent event, want 1", len(ds))
	}
}

func TestSubscriptionLifecycle(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	sub, secret := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	got := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub, nil)
	if _, shown := got["secret"]; shown {
		t.Error("GET shows the secret")
	}
	if got["timeout"] != "10s" || len(got["retry_schedule"].([]any)) != 7 {
		t.Errorf("defaults: timeout %v, schedule %v", got["timeout"], got["retry_schedule"])
	}
	// -0 is 0, shown as 0 (it was echoed as -0).
	if r, ok := e.admin.Must(200, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"rate_limit": math.Copysign(0, -1)})["rate_limit"].(float64); !ok || r != 0 || math.Signbit(r) {
		t.Errorf("rate_limit -0 shown as %v", r)
	}

	// Paused: deliveries wait; resumed: they go.
	e.admin.Must(200, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"state": "paused"})
	dl := e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{}))
	if d := e.admin.Must(200, "GET", "/v1/deliveries/"+dl, nil); d["state"] != "pending" || rc.Count() != 0 {
		t.Fatalf("paused: state %v, requests %d", d["state"], rc.Count())
	}
	// Replaying what is already pending is refused.
	if st, out := e.admin.Do("POST", "/v1/deliveries/"+dl+"/replay", nil); st != http.StatusConflict || errCode(out) != "conflict" {
		t.Errorf("replay of a pending delivery: %d %v, want 409", st, out)
	}
	e.admin.Must(200, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"state": "active"})
	e.waitDelivery(dl, "delivered", 10*time.Second)

	// Rotation: the new secret and the old one both sign for 24 h.
	rot := e.admin.Must(200, "POST", "/v1/subscriptions/"+sub+"/rotate-secret", nil)
	newSecret := rot["secret"].(string)
	if newSecret == secret || !strings.HasPrefix(newSecret, "whsec_") {
		t.Fatalf("rotated secret %q", newSecret)
	}
	dl2 := e.onlyDelivery(e.post(e.admin, "a.b", map[string]any{}))
	e.waitDelivery(dl2, "delivered", 10*time.Second)
	last := rc.Requests()[rc.Count()-1]
	if sigs := strings.Fields(last.Header.Get("webhook-signature")); len(sigs) != 2 {
		t.Errorf("during rotation %d signatures, want 2", len(sigs))
	}

	e.admin.Must(204, "DELETE", "/v1/subscriptions/"+sub, nil)
	if st, _ := e.admin.Do("GET", "/v1/subscriptions/"+sub, nil); st != 404 {
		t.Errorf("deleted subscription: %d, want 404", st)
	}
	ev := e.admin.Must(202, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}})
	if ds := e.admin.Must(200, "GET", "/v1/events/"+ev["id"].(string), nil)["deliveries"].([]any); len(ds) != 0 {
		t.Errorf("deleted subscription still matched: %v", ds)
	}
}

func TestBulkReplayResendsWhatWasMissed(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	var down atomic.Bool
	down.Store(true)
	rc.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusBadRequest) // a bad deploy: everything fails at once
			return
		}
		w.WriteHeader(http.StatusOK)
	}
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"order.*", "invoice.*"}, nil)
	since := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	var orders []string
	for i := range 6 {
		typ := "order.created"
		if i%3 == 2 {
			typ = "invoice.paid"
		}
		id := e.post(e.admin, typ, map[string]any{"i": i})
		if typ == "order.created" {
			orders = append(orders, id)
		}
		e.waitDelivery(e.onlyDelivery(id), "failed", 10*time.Second)
	}
	down.Store(false)
	before := rc.Count()

	// Only order.* events: the invoices stay failed.
	out := e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/replay",
		map[string]any{"since": since, "event_types": []string{"order.created"}})
	job := out["job_id"].(string)
	var j map[string]any
	testenv.Eventually(t, 10*time.Second, "replay job done", func() bool {
		j = e.admin.Must(200, "GET", "/v1/replays/"+job, nil)
		return j["state"] == "done"
	})
	if j["replayed"].(float64) != float64(len(orders)) {
		t.Errorf("job replayed %v, want %d", j["replayed"], len(orders))
	}
	for _, id := range orders {
		e.waitDelivery(e.onlyDelivery(id), "delivered", 10*time.Second)
	}
	got := map[string]int{}
	for _, r := range rc.Requests()[before:] {
		got[r.Header.Get("webhook-id")]++
	}
	if len(got) != len(orders) {
		t.Errorf("replay resent %d events (%v), want the %d orders", len(got), got, len(orders))
	}
	// Bad input and other tenants.
	if st, out := e.admin.Do("POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{}); st != 422 || errField(out) != "since" {
		t.Errorf("no since: %d %v", st, out)
	}
	if st, out := e.admin.Do("POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": since, "until": since}); st != 422 || errField(out) != "until" {
		t.Errorf("until not after since: %d %v", st, out)
	}
	key := e.admin.Must(201, "POST", "/v1/tenants", map[string]any{})["api_key"].(string)
	other := &testenv.Client{T: t, Base: e.base, Token: key}
	if st, _ := other.Do("GET", "/v1/replays/"+job, nil); st != 404 {
		t.Errorf("another tenant reads the job: %d", st)
	}
	if st, _ := other.Do("POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": since}); st != 404 {
		t.Errorf("another tenant replays: %d", st)
	}
}
