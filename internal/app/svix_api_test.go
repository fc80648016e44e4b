package app

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/testenv"
	"hookd/webhook"
)

// svixLoc is the field a Svix 422 names: its detail[0].loc.
func svixLoc(out map[string]any) string {
	d, _ := out["detail"].([]any)
	if len(d) == 0 {
		return ""
	}
	loc, _ := d[0].(map[string]any)["loc"].([]any)
	parts := make([]string, len(loc))
	for i, p := range loc {
		parts[i], _ = p.(string)
	}
	return strings.Join(parts, ".")
}

// Bad input to the Svix API answers Svix's 422 naming the Svix field (the
// validation is /v1's, the names the caller's), or 501 for what hookd
// does not have, and writes nothing.
func TestSvixBadInputNamesTheFieldAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	a.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Acme", "uid": "acme"})
	for _, c := range []struct {
		path   string
		body   map[string]any
		status int
		loc    string // 422: where; else the code
	}{
		{"/api/v1/app", map[string]any{"uid": "x"}, 422, "body.name"},
		{"/api/v1/app", map[string]any{"name": "n", "uid": "has space"}, 422, "body.uid"},
		{"/api/v1/app", map[string]any{"name": "n", "rateLimit": 70000}, 422, "body.rateLimit"},
		{"/api/v1/app", map[string]any{"name": "n", "uid": "acme"}, 409, "conflict"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "filterTypes": []string{"ok.type", "Bad Type"}}, 422, "body.filterTypes[1]"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": "ftp://x"}, 422, "body.url"},
		{"/api/v1/app/acme/endpoint", map[string]any{"filterTypes": []string{"a.b"}}, 422, "body.url"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "rateLimit": -1}, 422, "body.rateLimit"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "secret": "whsec_short"}, 422, "body.secret"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "headers": map[string]string{"webhook-id": "x"}}, 422, "body.headers.webhook-id"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "headers": map[string]string{"svix-signature": "v1,FORGED"}}, 422, "body.headers.svix-signature"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "filterTypes": []string{}}, 422, "body.filterTypes"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "eventTypes": []string{"Bad Type"}}, 422, "body.eventTypes[0]"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "filterTypes": []string{"a.b"}, "eventTypes": []string{"a.c"}}, 422, "body.eventTypes"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "throttleRate": -1}, 422, "body.throttleRate"},
		{"/api/v1/app", map[string]any{"name": "n", "throttleRate": 70000}, 422, "body.throttleRate"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "channels": []string{"c"}}, 501, "not_implemented"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": 5}, 422, "body.url"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "filterTypes": "a.b"}, 422, "body.filterTypes"},
		{"/api/v1/app", map[string]any{"name": []string{"n"}}, 422, "body.name"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": 7, "payload": map[string]any{}}, 422, "body.eventType"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}, "tags": 1}, 422, "body.tags"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}, "payloadRetentionPeriod": "x"}, 422, "body.payloadRetentionPeriod"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "version": "1"}, 422, "body.version"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "Order.Created", "payload": map[string]any{}}, 422, "body.eventType"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": "a string"}, 422, "body.payload"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": []int{1}}, 422, "body.payload"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "hookd.test", "payload": map[string]any{}}, 422, "body.eventType"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b"}, 422, "body.payload"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}, "eventId": strings.Repeat("k", 256)}, 422, "body.eventId"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}, "application": map[string]any{"name": "x"}}, 501, "not_implemented"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}, "deliverAt": "2030-01-01T00:00:00Z"}, 501, "not_implemented"},
		{"/api/v1/event-type", map[string]any{"name": "Bad Name", "description": "d"}, 422, "body.name"},
	} {
		st, out := a.Do("POST", c.path, c.body)
		got := svixCode(out)
		if st == 422 {
			got = svixLoc(out)
		}
		if st != c.status || got != c.loc {
			t.Errorf("POST %s %v: %d %v, want %d %s", c.path, c.body, st, out, c.status, c.loc)
		}
	}
	// A body that is not JSON at all is Svix's 422 too, at ["body"].
	for _, raw := range []string{`{"name": "n"`, `[1]`, `{"name": "n"} x`} {
		if st, out := a.Do("POST", "/api/v1/app", raw); st != 422 || svixLoc(out) != "body" {
			t.Errorf("POST /api/v1/app %s: %d %v, want 422 at body", raw, st, out)
		}
	}
	if st, out := a.Do("GET", "/api/v1/app/acme/msg?limit=0", nil); st != 422 || svixLoc(out) != "query.limit" {
		t.Errorf("limit=0: %d %v", st, out)
	}
	if st, out := a.Do("GET", "/api/v1/app?exclude_apps_with_no_endpoints=true", nil); st != 501 {
		t.Errorf("an application filter hookd does not apply: %d %v, want 501", st, out)
	}
	if st, out := a.Do("GET", "/api/v1/app/acme/endpoint?iterator=garbage", nil); st != 422 || svixLoc(out) != "query.iterator" {
		t.Errorf("iterator=garbage: %d %v", st, out)
	}
	// Older SDKs end paths with a slash; the envelope says the limit applied.
	if out := a.Must(http.StatusOK, "GET", "/api/v1/app/?limit=250", nil); out["limit"] != float64(100) || out["done"] != true || out["prevIterator"] != nil {
		t.Errorf("the application list's envelope: %v", out)
	}
	// Nothing was written: one application (and the default tenant), no endpoint, no message.
	if n := len(a.Must(http.StatusOK, "GET", "/api/v1/app", nil)["data"].([]any)); n != 2 {
		t.Errorf("%d applications, want acme and default", n)
	}
	for _, path := range []string{"/api/v1/app/acme/endpoint", "/api/v1/app/acme/msg", "/api/v1/event-type"} {
		if d := a.Must(http.StatusOK, "GET", path, nil)["data"].([]any); len(d) != 0 {
			t.Errorf("%s holds %v", path, d)
		}
	}
}

// An application's uid outside hookd's tenant IDs is kept beside a
// generated ID; both find it. Its endpoint is the same subscription in
// /v1, and its changes go through the same service.
func TestSvixApplicationsAndEndpointsAreTenantsAndSubscriptions(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	app := a.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Big", "uid": "Big.Corp", "rateLimit": 5})
	id := app["id"].(string)
	if !strings.HasPrefix(id, "app_") || id != strings.ToLower(id) || app["uid"] != "Big.Corp" {
		t.Fatalf("application %v", app)
	}
	if got := a.Must(http.StatusOK, "GET", "/api/v1/app/Big.Corp", nil); got["id"] != id {
		t.Fatalf("by uid: %v", got)
	}
	ep := a.Must(http.StatusCreated, "POST", "/api/v1/app/Big.Corp/endpoint", map[string]any{"url": rc.URL, "uid": "main"})
	if ep["rateLimit"] != float64(5) || ep["filterTypes"] != nil || ep["disabled"] != false {
		t.Fatalf("endpoint %v", ep)
	}
	sub := "sub_" + strings.TrimPrefix(ep["id"].(string), "ep_")
	v1 := a.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub, nil)
	if v1["tenant_id"] != id || v1["rate_limit"] != float64(5) || v1["event_types"].([]any)[0] != "*" {
		t.Fatalf("the /v1 view: %v", v1)
	}
	a.Must(http.StatusOK, "PATCH", "/api/v1/app/"+id+"/endpoint/main", map[string]any{"disabled": true, "filterTypes": []string{"a.b"}})
	v1 = a.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub, nil)
	if v1["state"] != "disabled" || v1["disabled_reason"] != "disabled by request" || v1["event_types"].([]any)[0] != "a.b" {
		t.Fatalf("after PATCH disabled: %v", v1)
	}
	// Two endpoints of one application may not share a uid.
	if st, out := a.Do("POST", "/api/v1/app/"+id+"/endpoint", map[string]any{"url": rc.URL, "uid": "main"}); st != 409 || svixCode(out) != "conflict" {
		t.Fatalf("a second uid main: %d %v", st, out)
	}
}

// getOrCreate from several workers at once (a lazy first message) gives
// every one of them the one application, whatever the uid's shape.
func TestSvixGetOrCreateAtOnceGivesOneApplication(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	for _, uid := range []string{"lazy-app", "Lazy.App_2Y6"} {
		const n = 8
		ids := make(chan string, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				st, out := e.admin.Do("POST", "/api/v1/app?get_if_exists=true", map[string]any{"name": "Lazy", "uid": uid})
				if st != http.StatusOK && st != http.StatusCreated {
					t.Errorf("uid %s: %d %v", uid, st, out)
					ids <- ""
					return
				}
				ids <- out["id"].(string)
			})
		}
		wg.Wait()
		close(ids)
		seen := map[string]int{}
		for id := range ids {
			seen[id]++
		}
		if len(seen) != 1 {
			t.Errorf("uid %s: applications %v, want one for all %d calls", uid, seen, n)
		}
	}
}

// Svix's newer clients (npm svix 2.x) name filterTypes eventTypes and
// rateLimit throttleRate, and send only those: either name filters and
// limits, and both are shown.
func TestSvixNewerFieldNamesFilterAndLimit(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	app := a.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "New", "uid": "newer", "throttleRate": 7})
	if app["throttleRate"] != float64(7) || app["rateLimit"] != float64(7) {
		t.Fatalf("application %v", app)
	}
	ep := a.Must(http.StatusCreated, "POST", "/api/v1/app/newer/endpoint", map[string]any{"url": rc.URL, "eventTypes": []string{"order.created"}, "throttleRate": 3})
	if ep["throttleRate"] != float64(3) || ep["rateLimit"] != float64(3) || fmt.Sprint(ep["eventTypes"]) != "[order.created]" || fmt.Sprint(ep["filterTypes"]) != "[order.created]" {
		t.Fatalf("endpoint %v", ep)
	}
	// Without throttleRate the endpoint starts at the application's, as with rateLimit.
	if ep2 := a.Must(http.StatusCreated, "POST", "/api/v1/app/newer/endpoint", map[string]any{"url": rc.URL + "/two", "eventTypes": []string{"none.such"}}); ep2["throttleRate"] != float64(7) {
		t.Fatalf("second endpoint %v", ep2)
	}
	out := a.Must(http.StatusAccepted, "POST", "/api/v1/app/newer/msg", map[string]any{"eventType": "order.deleted", "payload": map[string]any{"marker": "filtered-out"}})
	a.Must(http.StatusAccepted, "POST", "/api/v1/app/newer/msg", map[string]any{"eventType": "order.created", "payload": map[string]any{"marker": "filtered-in"}})
	testenv.Eventually(t, 10*time.Second, "the matching message", func() bool { return len(withMarker(rc, "filtered-in")) == 1 })
	// Fan-out is decided at acceptance: the message filtered out has no delivery at all.
	evt := "evt_" + strings.TrimPrefix(out["id"].(string), "msg_")
	if ds := a.Must(http.StatusOK, "GET", "/v1/events/"+evt, nil)["deliveries"].([]any); len(ds) != 0 {
		t.Errorf("order.deleted fanned out to endpoints filtered by eventTypes: %v", ds)
	}
	patched := a.Must(http.StatusOK, "PATCH", "/api/v1/app/newer/endpoint/"+ep["id"].(string), map[string]any{"eventTypes": nil, "throttleRate": 9})
	if patched["eventTypes"] != nil || patched["throttleRate"] != float64(9) {
		t.Errorf("after PATCH: %v", patched)
	}
}

// An SDK's read, edit and write of an endpoint changes nothing it did not
// edit: a paused subscription (shown disabled) stays paused with its
// pending deliveries (disabling it skipped them), and a rate Svix's whole
// numbers cannot show (0.5 was shown as null, none; 70,000 as a value the
// write then refused) stays the rate it was.
func TestSvixEndpointWrittenBackAsReadChangesNothing(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	a.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Round", "uid": "round"})
	for _, c := range []struct {
		rate  float64
		shown float64
	}{{0.5, 1}, {2.7, 3}, {70000, 65535}} {
		ep := a.Must(http.StatusCreated, "POST", "/api/v1/app/round/endpoint", map[string]any{"url": rc.URL, "filterTypes": []string{"round.trip"}})
		id := ep["id"].(string)
		sub := "/v1/subscriptions/sub_" + strings.TrimPrefix(id, "ep_")
		a.Must(http.StatusOK, "PATCH", sub, map[string]any{"rate_limit": c.rate, "state": "paused"})
		a.Must(http.StatusAccepted, "POST", "/api/v1/app/round/msg", map[string]any{"eventType": "round.trip", "payload": map[string]any{"n": 1}})
		got := a.Must(http.StatusOK, "GET", "/api/v1/app/round/endpoint/"+id, nil)
		if got["disabled"] != true || got["rateLimit"] != c.shown || got["throttleRate"] != c.shown {
			t.Fatalf("rate %v, paused: shown %v", c.rate, got)
		}
		// PUT what was read with a new description, as the SDKs' upsert does; then PATCH disabled: true.
		got["description"] = "edited"
		a.Must(http.StatusOK, "PUT", "/api/v1/app/round/endpoint/"+id, got)
		a.Must(http.StatusOK, "PATCH", "/api/v1/app/round/endpoint/"+id, map[string]any{"disabled": true})
		v1 := a.Must(http.StatusOK, "GET", sub, nil)
		if v1["state"] != "paused" || v1["rate_limit"] != c.rate {
			t.Errorf("rate %v: after the write-back the subscription is %v, rate_limit %v", c.rate, v1["state"], v1["rate_limit"])
		}
		ds := a.Must(http.StatusOK, "GET", sub+"/deliveries", nil)["data"].([]any)
		if len(ds) != 1 || ds[0].(map[string]any)["state"] != "pending" {
			t.Errorf("rate %v: deliveries after the write-back %v", c.rate, ds)
		}
		a.Must(http.StatusNoContent, "DELETE", "/api/v1/app/round/endpoint/"+id, nil)
	}
}

// A tenant key acts on its own application only; deleting an application
// deletes its endpoints and revokes its keys.
func TestSvixTenantKeyAndApplicationDelete(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	acme := e.tenantKey("acme")
	if st, out := acme.Do("POST", "/api/v1/app", map[string]any{"name": "x"}); st != 403 || svixCode(out) != "insufficient access" {
		t.Fatalf("a tenant key creating an application: %d %v", st, out)
	}
	list := acme.Must(http.StatusOK, "GET", "/api/v1/app", nil)["data"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["id"] != "acme" {
		t.Fatalf("a tenant key lists %v", list)
	}
	ep := acme.Must(http.StatusCreated, "POST", "/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL})["id"].(string)
	old := acme.Must(http.StatusAccepted, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{"card": "old owner"},
		"idempotency_key": "ik-old"})["id"].(string)
	_, unused, _ := strings.Cut(e.admin.Must(http.StatusCreated, "POST", "/v1/tenants/acme/portal-link", nil)["url"].(string), "#/portal/")
	if st, _ := acme.Do("GET", "/api/v1/app/default", nil); st != 404 {
		t.Fatalf("another application: %d", st)
	}
	if st, _ := acme.Do("DELETE", "/api/v1/app/acme", nil); st != 403 {
		t.Fatalf("a tenant key deleting its application: %d", st)
	}
	if st, out := e.admin.Do("DELETE", "/api/v1/app/default", nil); st != 409 {
		t.Fatalf("deleting the default application: %d %v, want 409", st, out)
	}
	e.admin.Must(http.StatusNoContent, "DELETE", "/api/v1/app/acme", nil)
	if st, out := acme.Do("GET", "/api/v1/app/acme", nil); st != 401 {
		t.Fatalf("the deleted application's key: %d %v", st, out)
	}
	if st, _ := e.admin.Do("GET", "/v1/subscriptions/sub_"+strings.TrimPrefix(ep, "ep_"), nil); st != 404 {
		t.Fatalf("the deleted application's endpoint: %d", st)
	}
	if st, _ := e.admin.Do("GET", "/api/v1/app/acme", nil); st != 404 {
		t.Fatalf("the deleted application: %d", st)
	}
	if st, out := e.exchange(unused); st != 401 {
		t.Fatalf("exchanging the deleted application's unused portal link: %d %v", st, out)
	}
	// Its ID is never given again, so no new owner reads what it left for
	// retention; its uid is taken again.
	if st, out := e.admin.Do("POST", "/v1/tenants", map[string]any{"id": "acme"}); st != 409 || out["error"].(map[string]any)["field"] != "id" {
		t.Fatalf("a tenant with the deleted one's ID: %d %v, want 409 on id", st, out)
	}
	again := e.admin.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Acme again", "uid": "acme"})
	if again["id"] == "acme" || again["uid"] != "acme" {
		t.Fatalf("the new acme: %v, want a new ID with uid acme", again)
	}
	if d := e.admin.Must(http.StatusOK, "GET", "/api/v1/app/acme/endpoint", nil)["data"].([]any); len(d) != 0 {
		t.Fatalf("the new acme has endpoints %v", d)
	}
	if d := e.admin.Must(http.StatusOK, "GET", "/api/v1/app/acme/msg", nil)["data"].([]any); len(d) != 0 {
		t.Fatalf("the new acme lists the old one's messages %v", d)
	}
	newKey := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants/"+again["id"].(string)+"/keys", map[string]any{})["api_key"].(string)
	newOwner := &testenv.Client{T: t, Base: e.base, Token: newKey}
	if st, _ := newOwner.Do("GET", "/v1/events/"+old, nil); st != 404 {
		t.Fatalf("the new owner reading the old one's event: %d, want 404", st)
	}
	if id := newOwner.Must(http.StatusAccepted, "POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{},
		"idempotency_key": "ik-old"})["id"]; id == old {
		t.Fatalf("the new owner's event took the old one's idempotency key")
	}
}

// An endpoint's Svix stats are the stats API's: a delivered message counts
// as a success, a failed one as a fail.
func TestSvixEndpointStatsCountDeliveries(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	ok, bad := testenv.NewReceiver(t), testenv.NewReceiver(t)
	bad.Respond = testenv.Statuses(http.StatusBadRequest)
	a := e.admin
	a.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Stats", "uid": "stats"})
	a.Must(http.StatusCreated, "POST", "/api/v1/app/stats/endpoint", map[string]any{"url": ok.URL, "uid": "ok"})
	badEp := a.Must(http.StatusCreated, "POST", "/api/v1/app/stats/endpoint", map[string]any{"url": bad.URL, "uid": "bad"})["id"].(string)
	e.noRetries(badEp) // a 400 fails at once
	for i := range 3 {
		a.Must(http.StatusAccepted, "POST", "/api/v1/app/stats/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{"i": i}})
	}
	stats := func(ep string) map[string]any {
		return a.Must(http.StatusOK, "GET", "/api/v1/app/stats/endpoint/"+ep+"/stats", nil)
	}
	testenv.Eventually(t, 10*time.Second, "3 successes and 3 fails", func() bool {
		return stats("ok")["success"] == float64(3) && stats("bad")["fail"] == float64(3)
	})
	if s := stats("ok"); s["fail"] != float64(0) || s["pending"] != float64(0) {
		t.Errorf("the healthy endpoint's stats: %v", s)
	}
	// Any instant is taken (the SDK sends until=now): the counts are kept
	// by UTC day, so the range widens to the days it touches.
	now := time.Now().UTC()
	q := "?since=" + now.Add(-time.Hour).Format(time.RFC3339Nano) + "&until=" + now.Add(time.Second).Format(time.RFC3339Nano)
	if s := a.Must(http.StatusOK, "GET", "/api/v1/app/stats/endpoint/bad/stats"+strings.ReplaceAll(q, "+", "%2B"), nil); s["fail"] != float64(3) || s["canceled"] != float64(0) {
		t.Errorf("stats until now: %v", s)
	}
	if st, out := a.Do("GET", "/api/v1/app/stats/endpoint/ok/stats?since=2020-01-01T00:00:00Z", nil); st != 422 {
		t.Errorf("a range over 400 days: %d %v, want 422", st, out)
	}
}

// svixPostKeyed posts body with Svix's idempotency-key header (the
// testenv client sends none).
func (e *env) svixPostKeyed(path, key string, body any) (int, map[string]any) {
	e.t.Helper()
	buf, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	req, err := http.NewRequest("POST", e.base+path, bytes.NewReader(buf))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	return resp.StatusCode, out
}

// withMarker is what rc got whose body holds marker.
func withMarker(rc *testenv.Receiver, marker string) []testenv.Request {
	var out []testenv.Request
	for _, r := range rc.Requests() {
		if bytes.Contains(r.Body, []byte(marker)) {
			out = append(out, r)
		}
	}
	return out
}

// svixHeaders is r's svix-* headers under the webhook-* names, so
// webhook.Verify checks what Svix's libraries read.
func svixHeaders(r testenv.Request) http.Header {
	h := http.Header{}
	for _, n := range []string{"id", "timestamp", "signature"} {
		h.Set("webhook-"+n, r.Header.Get("svix-"+n))
	}
	return h
}

// msgIDs lists the ids of a Svix list answer.
func msgIDs(out map[string]any) []string {
	var ids []string
	for _, m := range out["data"].([]any) {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	sort.Strings(ids)
	return ids
}

// The migration path: an endpoint created with the secret its receiver
// already has signs with it, under both header names, and GET …/secret
// answers it (given bare or with whsec_).
func TestSvixChosenSecretSignsDeliveries(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	a.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Moved", "uid": "moved"})
	bare := base64.StdEncoding.EncodeToString([]byte("a secret exported from svix!")) // 28 bytes
	secret := webhook.SecretPrefix + bare
	ep := a.Must(http.StatusCreated, "POST", "/api/v1/app/moved/endpoint", map[string]any{"url": rc.URL, "secret": secret})["id"].(string)
	if got := a.Must(http.StatusOK, "GET", "/api/v1/app/moved/endpoint/"+ep+"/secret", nil)["key"]; got != secret {
		t.Fatalf("GET secret: %v, want the chosen %s", got, secret)
	}
	ep2 := a.Must(http.StatusCreated, "POST", "/api/v1/app/moved/endpoint", map[string]any{"url": rc.URL + "/bare", "secret": bare})["id"].(string)
	if got := a.Must(http.StatusOK, "GET", "/api/v1/app/moved/endpoint/"+ep2+"/secret", nil)["key"]; got != secret {
		t.Fatalf("GET the bare secret: %v, want %s", got, secret)
	}
	a.Must(http.StatusAccepted, "POST", "/api/v1/app/moved/msg", map[string]any{"eventType": "order.created", "payload": map[string]any{"marker": "moved-1"}})
	testenv.Eventually(t, 10*time.Second, "both deliveries", func() bool { return len(withMarker(rc, "moved-1")) == 2 })
	for _, r := range withMarker(rc, "moved-1") {
		// Svix POSTs the payload itself: a receiver moved from it parses the same body.
		if string(r.Body) != `{"marker":"moved-1"}` {
			t.Errorf("body %s, want the payload itself", r.Body)
		}
		id, ts := r.Header.Get("svix-id"), r.Header.Get("svix-timestamp")
		if got, want := r.Header.Get("svix-signature"), independentSignature(t, secret, id, ts, r.Body); got != want {
			t.Errorf("svix-signature %q, want %q (HMAC under the chosen secret)", got, want)
		}
		if err := webhook.Verify(secret, svixHeaders(r), r.Body, time.Now(), 0); err != nil {
			t.Errorf("the svix-* headers do not verify under the chosen secret: %v", err)
		}
		if err := webhook.Verify(secret, r.Header, r.Body, time.Now(), 0); err != nil {
			t.Errorf("the webhook-* headers do not verify under the chosen secret: %v", err)
		}
	}
}

// An endpoint made through the Svix API retries a 404, as Svix does; one
// made through /v1 fails on it at once (DESIGN.md "Sending").
func TestSvixEndpointRetriesA4xx(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	viaSvix, viaV1 := testenv.NewReceiver(t), testenv.NewReceiver(t)
	viaSvix.Respond = testenv.Statuses(http.StatusNotFound, http.StatusOK)
	viaV1.Respond = testenv.Statuses(http.StatusNotFound, http.StatusOK)
	a := e.admin
	ep := e.svixEndpoint("retry4xx", viaSvix.URL)
	a.Must(http.StatusOK, "PATCH", "/v1/subscriptions/sub_"+strings.TrimPrefix(ep, "ep_"), map[string]any{"retry_schedule": []string{"1s"}})
	v1 := a.Must(http.StatusCreated, "POST", "/v1/subscriptions", map[string]any{"tenant_id": "retry4xx", "url": viaV1.URL, "event_types": []string{"*"}, "retry_schedule": []string{"1s"}})
	a.Must(http.StatusAccepted, "POST", "/api/v1/app/retry4xx/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{"marker": "m4xx"}})
	state := func(sub string) string {
		ds := a.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub+"/deliveries", nil)["data"].([]any)
		if len(ds) != 1 {
			return ""
		}
		return ds[0].(map[string]any)["state"].(string)
	}
	svixSub := "sub_" + strings.TrimPrefix(ep, "ep_")
	testenv.Eventually(t, 15*time.Second, "the Svix endpoint's delivery delivered, the /v1 one failed", func() bool {
		return state(svixSub) == "delivered" && state(v1["id"].(string)) == "failed"
	})
	if n, m := viaSvix.Count(), viaV1.Count(); n != 2 || m != 1 {
		t.Errorf("attempts: %d at the Svix endpoint (want 404 then 200), %d at the /v1 one (want the 404 only)", n, m)
	}
}

// noRetries sets a Svix endpoint's retry schedule to none through /v1, so
// that its next failure is final: made through the Svix API, it retries
// every answer but a 2xx or 410, as Svix does.
func (e *env) noRetries(ep string) {
	e.admin.Must(http.StatusOK, "PATCH", "/v1/subscriptions/sub_"+strings.TrimPrefix(ep, "ep_"), map[string]any{"retry_schedule": []string{}})
}

// svixEndpoint makes application uid through the Svix API, with one
// endpoint to url, and returns the endpoint's ID.
func (e *env) svixEndpoint(uid, url string) string {
	e.admin.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": uid, "uid": uid})
	return e.admin.Must(http.StatusCreated, "POST", "/api/v1/app/"+uid+"/endpoint", map[string]any{"url": url})["id"].(string)
}

// A repeated eventId, or a repeated idempotency-key header, answers the
// first message and writes nothing: 200 for eventId (as /v1), 202 for the
// header (Svix answers a repeat with its first answer).
func TestSvixRepeatedMessageAnswersTheFirst(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	e.svixEndpoint("idem", rc.URL)
	msg := func(marker string) map[string]any {
		return map[string]any{"eventType": "order.created", "payload": map[string]any{"marker": marker}}
	}
	byID := msg("by-event-id")
	byID["eventId"] = "order-1"
	first := a.Must(http.StatusAccepted, "POST", "/api/v1/app/idem/msg", byID)
	byID["payload"] = map[string]any{"marker": "changed-1"}
	again := a.Must(http.StatusOK, "POST", "/api/v1/app/idem/msg", byID)
	st, keyed := e.svixPostKeyed("/api/v1/app/idem/msg", "key-1", msg("by-header"))
	if st != http.StatusAccepted {
		t.Fatalf("a keyed message: %d %v", st, keyed)
	}
	st, keyedAgain := e.svixPostKeyed("/api/v1/app/idem/msg", "key-1", msg("changed-2"))
	for _, c := range []struct {
		name          string
		status, want  int
		first, repeat map[string]any
		marker        string
	}{
		{"eventId", http.StatusOK, http.StatusOK, first, again, "by-event-id"},
		{"idempotency-key", st, http.StatusAccepted, keyed, keyedAgain, "by-header"},
	} {
		payload, _ := c.repeat["payload"].(map[string]any)
		if c.status != c.want || c.repeat["id"] != c.first["id"] || payload["marker"] != c.marker {
			t.Errorf("a repeated %s: %d %v, want %d and the first message %v", c.name, c.status, c.repeat, c.want, c.first)
		}
	}
	// The header names a request and eventId a message: the same string
	// under the other one is another message, and a keyed message shows no
	// eventId (npm clients send a key of their own with every POST).
	st, crossed := e.svixPostKeyed("/api/v1/app/idem/msg", "order-1", msg("header-like-event-id"))
	if st != http.StatusAccepted || crossed["id"] == first["id"] || keyed["eventId"] != nil || crossed["eventId"] != nil {
		t.Errorf("idempotency-key order-1 beside eventId order-1: %d %v (keyed %v)", st, crossed, keyed)
	}
	byKey := msg("event-id-like-header")
	byKey["eventId"] = "key-1"
	if st, out := a.Do("POST", "/api/v1/app/idem/msg", byKey); st != http.StatusAccepted || out["id"] == keyed["id"] || out["eventId"] != "key-1" {
		t.Errorf("eventId key-1 beside idempotency-key key-1: %d %v", st, out)
	}
	if ids := msgIDs(a.Must(http.StatusOK, "GET", "/api/v1/app/idem/msg", nil)); len(ids) != 4 || !slices.Contains(ids, first["id"].(string)) || !slices.Contains(ids, keyed["id"].(string)) {
		t.Fatalf("messages %v, want the first two and the two crossed ones", ids)
	}
	for _, m := range []map[string]any{first, keyed, crossed} {
		ev := a.Must(http.StatusOK, "GET", "/v1/events/evt_"+strings.TrimPrefix(m["id"].(string), "msg_"), nil)
		if n := len(ev["deliveries"].([]any)); n != 1 {
			t.Errorf("event %v has %d deliveries, want 1", ev["id"], n)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the four messages delivered", func() bool { return rc.Count() >= 4 })
	if n := len(withMarker(rc, "changed-")); n != 0 {
		t.Errorf("the receiver got %d repeats", n)
	}
}

// A message list filters by before, after and event_types (repeated or
// comma-separated); channel and tag filters, and channels on a message,
// answer 501 and write nothing.
func TestSvixMessageListFilters(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	ep := e.svixEndpoint("flt", rc.URL)
	var ids []string
	var times []time.Time
	for _, typ := range []string{"a.one", "a.two", "a.one"} {
		m := a.Must(http.StatusAccepted, "POST", "/api/v1/app/flt/msg", map[string]any{"eventType": typ, "payload": map[string]any{}})
		ts, err := time.Parse(time.RFC3339Nano, m["timestamp"].(string))
		if err != nil {
			t.Fatal(err)
		}
		ids, times = append(ids, m["id"].(string)), append(times, ts)
	}
	afterFirst := times[0].Add(time.Microsecond).Format(time.RFC3339Nano)
	beforeLast := times[2].Add(-time.Microsecond).Format(time.RFC3339Nano)
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", sorted(ids...)},
		{"event_types=a.one", sorted(ids[0], ids[2])},
		{"event_types=a.one,a.two", sorted(ids...)},
		{"event_types=a.two&event_types=a.one", sorted(ids...)},
		{"event_types=a.three", nil},
		{"after=" + afterFirst, sorted(ids[1], ids[2])},
		{"before=" + beforeLast, sorted(ids[0], ids[1])},
		{"after=" + afterFirst + "&before=" + beforeLast, sorted(ids[1])},
		{"after=" + afterFirst + "&event_types=a.one", sorted(ids[2])},
	} {
		if got := msgIDs(a.Must(http.StatusOK, "GET", "/api/v1/app/flt/msg?"+c.query, nil)); !slices.Equal(got, c.want) {
			t.Errorf("messages ?%s: %v, want %v", c.query, got, c.want)
		}
	}
	if st, out := a.Do("GET", "/api/v1/app/flt/msg?after=yesterday", nil); st != 422 || svixLoc(out) != "query.after" {
		t.Errorf("after=yesterday: %d %v, want 422 naming after", st, out)
	}
	for _, path := range []string{"/api/v1/app/flt/msg?channel=c", "/api/v1/app/flt/msg?tag=t",
		"/api/v1/app/flt/attempt/endpoint/" + ep + "?channel=c", "/api/v1/app/flt/attempt/msg/" + ids[0] + "?tag=t",
		"/api/v1/app/flt/endpoint/" + ep + "/msg?channel=c"} {
		if st, out := a.Do("GET", path, nil); st != http.StatusNotImplemented || svixCode(out) != "not_implemented" {
			t.Errorf("GET %s: %d %v, want 501", path, st, out)
		}
	}
	if st, out := a.Do("POST", "/api/v1/app/flt/msg", map[string]any{"eventType": "a.one", "payload": map[string]any{}, "channels": []string{"c"}}); st != http.StatusNotImplemented || svixCode(out) != "not_implemented" {
		t.Errorf("a message with channels: %d %v, want 501", st, out)
	}
	if got := msgIDs(a.Must(http.StatusOK, "GET", "/api/v1/app/flt/msg", nil)); len(got) != 3 {
		t.Errorf("after the 501s the application holds %d messages, want 3", len(got))
	}
}

// ListByMsg with endpoint_id lists that endpoint's attempts only.
func TestSvixAttemptsByMessageForOneEndpoint(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc1, rc2 := testenv.NewReceiver(t), testenv.NewReceiver(t)
	a := e.admin
	ep1 := e.svixEndpoint("two", rc1.URL)
	ep2 := a.Must(http.StatusCreated, "POST", "/api/v1/app/two/endpoint", map[string]any{"url": rc2.URL, "uid": "second"})["id"].(string)
	msg := a.Must(http.StatusAccepted, "POST", "/api/v1/app/two/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}})["id"].(string)
	attempts := func(query string) []map[string]any {
		var out []map[string]any
		for _, x := range a.Must(http.StatusOK, "GET", "/api/v1/app/two/attempt/msg/"+msg+query, nil)["data"].([]any) {
			out = append(out, x.(map[string]any))
		}
		return out
	}
	testenv.Eventually(t, 10*time.Second, "an attempt at each endpoint", func() bool { return len(attempts("")) == 2 })
	for query, want := range map[string]string{"?endpoint_id=" + ep1: ep1, "?endpoint_id=" + ep2: ep2, "?endpoint_id=second": ep2} {
		if got := attempts(query); len(got) != 1 || got[0]["endpointId"] != want || got[0]["msgId"] != msg {
			t.Errorf("attempts %s: %v, want one at %s", query, got, want)
		}
	}
	if st, out := a.Do("GET", "/api/v1/app/two/attempt/msg/"+msg+"?endpoint_id=ep_nothing", nil); st != 404 || svixCode(out) != "not_found" {
		t.Errorf("an unknown endpoint_id: %d %v, want 404", st, out)
	}
}

// Resend sends a delivered message to its endpoint again: the same
// svix-id, signed afresh, and a second attempt listed.
func TestSvixResendRedelivers(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	ep := e.svixEndpoint("again", rc.URL)
	secret := a.Must(http.StatusOK, "GET", "/api/v1/app/again/endpoint/"+ep+"/secret", nil)["key"].(string)
	msg := a.Must(http.StatusAccepted, "POST", "/api/v1/app/again/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{"marker": "resent"}})["id"].(string)
	testenv.Eventually(t, 10*time.Second, "the first delivery's success", func() bool {
		d := a.Must(http.StatusOK, "GET", "/api/v1/app/again/attempt/msg/"+msg, nil)["data"].([]any)
		return len(d) == 1 && d[0].(map[string]any)["status"] == float64(0)
	})
	a.Must(http.StatusAccepted, "POST", "/api/v1/app/again/msg/"+msg+"/endpoint/"+ep+"/resend", nil)
	testenv.Eventually(t, 10*time.Second, "the resent delivery", func() bool { return rc.Count() == 2 })
	got := rc.Requests()
	want := "evt_" + strings.TrimPrefix(msg, "msg_")
	for i, r := range got {
		if r.Header.Get("svix-id") != want || r.Header.Get("webhook-id") != want || !bytes.Contains(r.Body, []byte("resent")) {
			t.Errorf("delivery %d: svix-id %q, webhook-id %q, body %s; want %s and the message", i, r.Header.Get("svix-id"), r.Header.Get("webhook-id"), r.Body, want)
		}
		if err := webhook.Verify(secret, svixHeaders(r), r.Body, time.Now(), 0); err != nil {
			t.Errorf("delivery %d does not verify: %v", i, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, "two attempts listed", func() bool {
		return len(a.Must(http.StatusOK, "GET", "/api/v1/app/again/attempt/msg/"+msg, nil)["data"].([]any)) == 2
	})
}

// Recover with until resends the failed messages created in [since,
// until) only.
func TestSvixRecoverUntilReplaysOnlyTheWindow(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	var fixed atomic.Bool
	rc.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		if fixed.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
	}
	a := e.admin
	since := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	ep := e.svixEndpoint("win", rc.URL)
	e.noRetries(ep) // the 400 fails at once
	failed := func(marker string) map[string]any {
		m := a.Must(http.StatusAccepted, "POST", "/api/v1/app/win/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{"marker": marker}})
		testenv.Eventually(t, 10*time.Second, marker+" failed", func() bool {
			d := a.Must(http.StatusOK, "GET", "/api/v1/app/win/attempt/msg/"+m["id"].(string), nil)["data"].([]any)
			return len(d) == 1 && d[0].(map[string]any)["status"] == float64(2)
		})
		return m
	}
	failed("inside")
	outside := failed("outside")
	fixed.Store(true)
	task := a.Must(http.StatusAccepted, "POST", "/api/v1/app/win/endpoint/"+ep+"/recover",
		map[string]any{"since": since, "until": outside["timestamp"]})
	var done map[string]any
	testenv.Eventually(t, 10*time.Second, "the recover to finish", func() bool {
		done = a.Must(http.StatusOK, "GET", "/api/v1/background-task/"+task["id"].(string), nil)
		return done["status"] == "finished"
	})
	if n := done["data"].(map[string]any)["replayed"]; n != float64(1) {
		t.Errorf("the recover replayed %v, want 1 (the message inside the window)", n)
	}
	testenv.Eventually(t, 10*time.Second, "inside resent", func() bool { return len(withMarker(rc, "inside")) == 2 })
	if n := len(withMarker(rc, "outside")); n != 1 {
		t.Errorf("the message at until was sent %d times, want once", n)
	}
	if d := a.Must(http.StatusOK, "GET", "/api/v1/app/win/attempt/msg/"+outside["id"].(string), nil)["data"].([]any); len(d) != 1 {
		t.Errorf("the message at until has %d attempts, want 1", len(d))
	}
}

// /v1 is unchanged by the Svix API: a subscription made through /v1 gets
// no svix-* headers (one made through /api/v1 gets both, equal), and /v1
// still refuses a member it does not know, such as Svix's eventId.
func TestSvixHeadersOnlyForSvixEndpointsAndV1Unchanged(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	viaV1, viaSvix := testenv.NewReceiver(t), testenv.NewReceiver(t)
	acme := e.tenantKey("acme")
	e.subscribe(acme, viaV1.URL, []string{"*"}, nil)
	acme.Must(http.StatusCreated, "POST", "/api/v1/app/acme/endpoint", map[string]any{"url": viaSvix.URL})
	e.post(acme, "order.created", map[string]any{"n": 1})
	testenv.Eventually(t, 10*time.Second, "both deliveries", func() bool { return viaV1.Count() == 1 && viaSvix.Count() == 1 })
	v1, svix := viaV1.Requests()[0], viaSvix.Requests()[0]
	for name := range v1.Header {
		if strings.HasPrefix(strings.ToLower(name), "svix-") {
			t.Errorf("the /v1 subscription got %s", name)
		}
	}
	for _, n := range []string{"id", "timestamp", "signature"} {
		if w, s := svix.Header.Get("webhook-"+n), svix.Header.Get("svix-"+n); w == "" || w != s {
			t.Errorf("the Svix endpoint got webhook-%s %q and svix-%s %q, want both, equal", n, w, n, s)
		}
		if v1.Header.Get("webhook-"+n) == "" {
			t.Errorf("the /v1 subscription got no webhook-%s", n)
		}
	}
	for _, c := range []struct {
		path  string
		body  map[string]any
		field string
	}{
		{"/v1/events", map[string]any{"type": "order.created", "payload": map[string]any{}, "eventId": "x"}, "eventId"},
		{"/v1/subscriptions", map[string]any{"url": viaV1.URL, "event_types": []string{"*"}, "filterTypes": []string{"a.b"}}, "filterTypes"},
	} {
		if st, out := acme.Do("POST", c.path, c.body); st != http.StatusBadRequest || errField(out) != c.field {
			t.Errorf("POST %s with %s: %d %v, want 400 naming it", c.path, c.field, st, out)
		}
	}
	if n := len(acme.Must(http.StatusOK, "GET", "/v1/events", nil)["data"].([]any)); n != 1 {
		t.Errorf("acme holds %d events, want the one", n)
	}
	if n := len(acme.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)["data"].([]any)); n != 2 {
		t.Errorf("acme holds %d subscriptions, want the two", n)
	}
}

// PUT …/headers sets them all and requires headers (a PUT without it would
// clear every credential); PATCH adds, and its null removes one, as on
// Svix's server. A null value anywhere else is refused, not sent empty.
func TestSvixEndpointHeadersPutPatchAndNull(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a := e.admin
	a.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Acme", "uid": "acme"})
	ep := a.Must(http.StatusCreated, "POST", "/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL})["id"].(string)
	path := "/api/v1/app/acme/endpoint/" + ep + "/headers"
	names := func() []string {
		h := a.Must(http.StatusOK, "GET", path, nil)["headers"].(map[string]any)
		return slices.Sorted(maps.Keys(h))
	}
	a.Must(http.StatusNoContent, "PUT", path, `{"headers":{"X-Token":"secret1","X-Keep":"k"}}`)
	for _, c := range []struct{ method, body, loc string }{
		{"PUT", `{"header":{"X-Token":"typo"}}`, "body.headers"},
		{"PUT", `{}`, "body.headers"},
		{"PUT", `{"headers":null}`, "body.headers"},
		{"PUT", `{"headers":{"X-Token":null}}`, "body.headers"},
		{"PATCH", `{"header":{"X-Token":null}}`, "body.headers"},
	} {
		if st, out := a.Do(c.method, path, c.body); st != 422 || svixLoc(out) != c.loc {
			t.Errorf("%s %s: %d %v, want 422 at %s", c.method, c.body, st, out, c.loc)
		}
	}
	if got := names(); !slices.Equal(got, []string{"X-Keep", "X-Token"}) {
		t.Fatalf("after refused calls the endpoint has headers %v, want X-Keep and X-Token", got)
	}
	a.Must(http.StatusNoContent, "PATCH", path, `{"headers":{"x-token":null,"X-New":"n"}}`)
	if got := names(); !slices.Equal(got, []string{"X-Keep", "X-New"}) {
		t.Fatalf("after PATCH removing x-token: headers %v, want X-Keep and X-New", got)
	}
	a.Must(http.StatusAccepted, "POST", "/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}})
	testenv.Eventually(t, 10*time.Second, "the delivery", func() bool { return rc.Count() == 1 })
	if h := rc.Requests()[0].Header; h.Get("X-Keep") != "k" || h.Get("X-New") != "n" || h.Values("X-Token") != nil {
		t.Errorf("the delivery carried X-Keep %q, X-New %q, X-Token %q; want k, n and none", h.Get("X-Keep"), h.Get("X-New"), h.Values("X-Token"))
	}
	// Creating with a null value: Svix's 422, /v1's 400; nothing made.
	if st, out := a.Do("POST", "/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "headers": map[string]any{"Authorization": nil}}); st != 422 || svixLoc(out) != "body.headers" {
		t.Errorf("a Svix endpoint with a null header: %d %v, want 422 at body.headers", st, out)
	}
	if st, out := a.Do("POST", "/v1/subscriptions", map[string]any{"url": rc.URL, "event_types": []string{"*"}, "tenant_id": "acme",
		"headers": map[string]any{"Authorization": nil}}); st != http.StatusBadRequest || errField(out) != "headers" {
		t.Errorf("a /v1 subscription with a null header: %d %v, want 400 naming headers", st, out)
	}
	if n := len(a.Must(http.StatusOK, "GET", "/v1/subscriptions?tenant_id=acme", nil)["data"].([]any)); n != 1 {
		t.Errorf("acme holds %d subscriptions, want the one endpoint", n)
	}
	// The portal link's expiry of the wrong type is Svix's 422 too.
	if st, out := a.Do("POST", "/api/v1/auth/app-portal-access/acme", `{"expiry":"3600"}`); st != 422 || svixLoc(out) != "body.expiry" {
		t.Errorf("expiry \"3600\": %d %v, want 422 at body.expiry", st, out)
	}
}
