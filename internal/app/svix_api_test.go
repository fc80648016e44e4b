package app

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
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
		{"/api/v1/app/acme/endpoint", map[string]any{"url": rc.URL, "channels": []string{"c"}}, 501, "not_implemented"},
		{"/api/v1/app/acme/endpoint", map[string]any{"url": 5}, 400, "bad_request"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "Order.Created", "payload": map[string]any{}}, 422, "body.eventType"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "hookd.test", "payload": map[string]any{}}, 422, "body.eventType"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b"}, 422, "body.payload"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}, "eventId": strings.Repeat("k", 256)}, 422, "body.eventId"},
		{"/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}, "application": map[string]any{"name": "x"}}, 501, "not_implemented"},
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
	if st, out := a.Do("GET", "/api/v1/app/acme/msg?limit=0", nil); st != 422 || svixLoc(out) != "query.limit" {
		t.Errorf("limit=0: %d %v", st, out)
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
	if st, _ := acme.Do("GET", "/api/v1/app/default", nil); st != 404 {
		t.Fatalf("another application: %d", st)
	}
	if st, _ := acme.Do("DELETE", "/api/v1/app/acme", nil); st != 403 {
		t.Fatalf("a tenant key deleting its application: %d", st)
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
	// Its ID can be taken again.
	e.admin.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Acme again", "uid": "acme"})
	if d := e.admin.Must(http.StatusOK, "GET", "/api/v1/app/acme/endpoint", nil)["data"].([]any); len(d) != 0 {
		t.Fatalf("the new acme has endpoints %v", d)
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
	a.Must(http.StatusCreated, "POST", "/api/v1/app/stats/endpoint", map[string]any{"url": bad.URL, "uid": "bad"})
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
	if st, out := a.Do("GET", "/api/v1/app/stats/endpoint/ok/stats?since=2020-01-01T00:00:00Z", nil); st != 422 {
		t.Errorf("a range over 400 days: %d %v, want 422", st, out)
	}
}
