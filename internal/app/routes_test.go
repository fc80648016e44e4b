package app

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
)

// operation is one documented route: method, path template, and whether
// it documents a 403 (admin only).
type operation struct {
	method, path string
	adminOnly    bool
	tenantQuery  bool // takes ?tenant_id=
}

// documentedOperations reads every /v1 operation from the server's own
// GET /openapi.json, which internal/api's tests hold equal to the routes
// the server registers: a route added to the server is walked here.
func documentedOperations(t *testing.T, base string) []operation {
	t.Helper()
	var ops []operation
	for _, op := range allDocumentedOperations(t, base) {
		if strings.HasPrefix(op.path, "/v1/") {
			ops = append(ops, op)
		}
	}
	if len(ops) < 15 {
		t.Fatalf("openapi.json documents only %d /v1 operations", len(ops))
	}
	return ops
}

// allDocumentedOperations is every operation GET /openapi.json documents.
func allDocumentedOperations(t *testing.T, base string) []operation {
	t.Helper()
	resp, err := http.Get(base + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	var ops []operation
	for path, item := range doc.Paths {
		for _, m := range []string{"get", "post", "put", "patch", "delete"} {
			raw, ok := item[m]
			if !ok {
				continue
			}
			var op struct {
				Responses  map[string]json.RawMessage `json:"responses"`
				Parameters []struct {
					Ref  string `json:"$ref"`
					Name string `json:"name"`
				} `json:"parameters"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", m, path, err)
			}
			_, forbidden := op.Responses["403"]
			tq := false
			for _, p := range op.Parameters {
				tq = tq || p.Name == "tenant_id" || p.Ref == "#/components/parameters/TenantID"
			}
			ops = append(ops, operation{strings.ToUpper(m), path, forbidden, tq})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].path+ops[i].method < ops[j].path+ops[j].method })
	return ops
}

var templateParam = regexp.MustCompile(`\{([a-z_]+)\}`)

// fill puts fixture IDs into a path template, each chosen by the segment
// before it (/subscriptions/{id} is a subscription ID). A parameter with
// no fixture fails the test: add one for a new kind of object.
func fill(t *testing.T, path string, ids map[string]string) string {
	t.Helper()
	return templateParam.ReplaceAllStringFunc(path, func(p string) string {
		before := path[:strings.Index(path, p)-1]
		kind := before[strings.LastIndex(before, "/")+1:]
		id, ok := ids[kind]
		if !ok {
			t.Fatalf("%s: no fixture for %s after /%s/; add one to the table test", path, p, kind)
		}
		return id
	})
}

// Every /v1 route, walked from the OpenAPI document: without a key it
// answers 401; with another tenant's key it answers 404 for that tenant's
// objects and for a tenant_id naming that tenant (403 where the route is
// admin only), and changes nothing. A route added without authentication
// or without tenant scoping fails here.
func TestEveryRouteNeedsAKeyAndHidesOtherTenants(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	rc := testenv.NewReceiver(t)
	a, b := e.tenantKey("acme"), e.tenantKey("globex")
	sub, _ := e.subscribe(a, rc.URL, []string{"*"}, nil)
	ev := e.post(a, "a.b", map[string]any{})
	dlv := e.onlyDelivery(ev)
	e.waitDelivery(dlv, "delivered", 10*time.Second)
	job := a.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": "2020-01-01T00:00:00Z"})["job_id"].(string)
	var key string
	for id := range e.keys(a, "acme") {
		key = id
	}
	ids := map[string]string{"events": ev, "subscriptions": sub, "deliveries": dlv, "replays": job, "tenants": "acme", "keys": key}
	// Bodies valid but for the tenant, so an answer is about tenancy.
	bodies := map[string]map[string]any{
		"POST /v1/events":                    {"type": "a.b", "payload": map[string]any{}},
		"POST /v1/subscriptions":             {"url": rc.URL, "event_types": []string{"*"}},
		"POST /v1/subscriptions/{id}/replay": {"since": "2020-01-01T00:00:00Z"},
		"PATCH /v1/subscriptions/{id}":       {"state": "paused"},
	}
	auditBefore := len(auditRows(t, a, ""))
	sent := rc.Count()

	for _, op := range documentedOperations(t, e.base) {
		route := op.method + " " + op.path
		path := fill(t, op.path, ids)
		var body any
		if op.method == "POST" || op.method == "PATCH" || op.method == "PUT" {
			m := map[string]any{}
			for k, v := range bodies[route] {
				m[k] = v
			}
			if !strings.Contains(op.path, "{") && !op.adminOnly {
				m["tenant_id"] = "acme" // a collection: the tenant is named in the body
			}
			body = m
		} else if !strings.Contains(op.path, "{") && op.tenantQuery {
			path += "?tenant_id=acme" // a collection: the tenant is named in the query
		}

		for _, tok := range []string{"", "hk_not-a-key"} {
			c := &testenv.Client{T: t, Base: e.base, Token: tok}
			if st, out := c.Do(op.method, path, body); st != http.StatusUnauthorized || errCode(out) != "unauthorized" {
				t.Errorf("%s with token %q: %d %v, want 401", route, tok, st, out)
			}
		}
		want, code := http.StatusNotFound, "not_found"
		if op.adminOnly {
			want, code = http.StatusForbidden, "forbidden"
		}
		if st, out := b.Do(op.method, path, body); st != want || errCode(out) != code {
			t.Errorf("%s as another tenant (%s): %d %v, want %d", route, path, st, out, want)
		}
		if op.method == "GET" && !op.adminOnly { // the fixture is real: its own tenant reads it
			if st, out := a.Do(op.method, path, nil); st != http.StatusOK {
				t.Errorf("%s as its own tenant (%s): %d %v, want 200", route, path, st, out)
			}
		}
	}

	// Another tenant's calls changed nothing of acme's.
	if s := a.Must(http.StatusOK, "GET", "/v1/subscriptions/"+sub, nil); s["state"] != "active" {
		t.Errorf("acme's subscription is %v", s["state"])
	}
	if d := a.Must(http.StatusOK, "GET", "/v1/deliveries/"+dlv, nil); d["state"] != "delivered" {
		t.Errorf("acme's delivery is %v", d["state"])
	}
	if n := len(auditRows(t, a, "")); n != auditBefore {
		t.Errorf("acme's audit log grew from %d to %d entries under another tenant's calls", auditBefore, n)
	}
	if n := len(a.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)["data"].([]any)); n != 1 {
		t.Errorf("acme has %d subscriptions, want 1", n)
	}
	if rc.Count() != sent {
		t.Errorf("the receiver got %d more requests", rc.Count()-sent)
	}
}
