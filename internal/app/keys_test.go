package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"hookd/internal/api"
	"hookd/internal/testenv"
)

// tenantKey creates a tenant through the admin and returns a client with
// its first key.
func (e *env) tenantKey(id string) *testenv.Client {
	e.t.Helper()
	key := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants", map[string]any{"id": id})["api_key"].(string)
	return &testenv.Client{T: e.t, Base: e.base, Token: key}
}

func (e *env) keys(c *testenv.Client, tenant string) map[string]map[string]any {
	e.t.Helper()
	out := map[string]map[string]any{}
	for _, k := range c.Must(http.StatusOK, "GET", "/v1/tenants/"+tenant+"/keys", nil)["data"].([]any) {
		m := k.(map[string]any)
		out[m["id"].(string)] = m
	}
	return out
}

func TestKeysCreateListRevoke(t *testing.T) {
	t.Parallel()
	e := start(t, false)
	acme := e.tenantKey("acme")
	first := e.keys(acme, "acme")
	if len(first) != 1 {
		t.Fatalf("a new tenant has %d keys, want 1", len(first))
	}

	expires := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	out := acme.Must(http.StatusCreated, "POST", "/v1/tenants/acme/keys",
		map[string]any{"name": "ci", "expires_at": expires.Format(time.RFC3339)})
	plain, _ := out["api_key"].(string)
	id, _ := out["id"].(string)
	if !strings.HasPrefix(plain, "hk_") || !strings.HasPrefix(id, "key_") || out["prefix"] != plain[:7] ||
		out["name"] != "ci" || out["expires_at"] != expires.Format(time.RFC3339) || out["created_at"] == nil {
		t.Fatalf("created key %v", out)
	}
	ci := &testenv.Client{T: t, Base: e.base, Token: plain}
	ci.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)

	// The list shows both keys, never the key itself nor its hash.
	keys := e.keys(e.admin, "acme")
	got := keys[id]
	if len(keys) != 2 || got == nil || got["name"] != "ci" || got["prefix"] != plain[:7] ||
		got["expires_at"] != expires.Format(time.RFC3339) || got["revoked_at"] != nil {
		t.Fatalf("keys listed %v", keys)
	}
	raw, _ := json.Marshal(keys)
	if strings.Contains(string(raw), plain) || strings.Contains(string(raw), api.HashKey(plain)) {
		t.Fatalf("the list shows the key or its hash: %s", raw)
	}

	// Last use is written off the request path, at most once a minute; a
	// flush (as at shutdown) writes it now.
	if err := e.app.keys.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if lu := e.keys(acme, "acme")[id]["last_used_at"]; lu == nil {
		t.Fatalf("last_used_at of a used key is %v", lu)
	}

	// Revoked: refused on the very next request, though it was cached.
	acme.Must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+id, nil)
	if st, out := ci.Do("GET", "/v1/subscriptions", nil); st != http.StatusUnauthorized || errCode(out) != "unauthorized" {
		t.Fatalf("revoked key: %d %v, want 401", st, out)
	}
	if st, out := acme.Do("DELETE", "/v1/tenants/acme/keys/"+id, nil); st != http.StatusConflict {
		t.Fatalf("revoking twice: %d %v, want 409", st, out)
	}
	if e.keys(acme, "acme")[id]["revoked_at"] == nil {
		t.Fatal("a revoked key lists no revoked_at")
	}

	// A tenant may revoke the key it calls with, even its last live one;
	// the admin can issue it another.
	var firstID string
	for k := range first {
		firstID = k
	}
	acme.Must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+firstID, nil)
	if st, _ := acme.Do("GET", "/v1/subscriptions", nil); st != http.StatusUnauthorized {
		t.Fatalf("a key that revoked itself: %d, want 401", st)
	}
	fresh := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants/acme/keys", map[string]any{})["api_key"].(string)
	(&testenv.Client{T: t, Base: e.base, Token: fresh}).Must(http.StatusOK, "GET", "/v1/subscriptions", nil)
}

// An expired key is refused from its expiry on, though cached.
func TestExpiredKeyIsRefused(t *testing.T) {
	t.Parallel()
	e := start(t, false)
	e.tenantKey("acme")
	expires := time.Now().Add(1500 * time.Millisecond)
	out := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants/acme/keys",
		map[string]any{"expires_at": expires.Format(time.RFC3339Nano)})
	c := &testenv.Client{T: t, Base: e.base, Token: out["api_key"].(string)}
	c.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)
	testenv.Eventually(t, 5*time.Second, "the expired key to be refused", func() bool {
		st, _ := c.Do("GET", "/v1/subscriptions", nil)
		if st == http.StatusOK && time.Now().After(expires.Add(time.Second)) {
			t.Fatal("accepted a second after its expiry")
		}
		if st == http.StatusUnauthorized && time.Now().Before(expires) {
			t.Fatal("refused before its expiry")
		}
		return st == http.StatusUnauthorized
	})
}

// A tenant key cannot see, issue or revoke another tenant's keys (404 as
// everywhere), and bad input changes nothing.
func TestKeysOfAnotherTenantAndBadInput(t *testing.T) {
	t.Parallel()
	e := start(t, false)
	a, b := e.tenantKey("acme"), e.tenantKey("globex")
	var aKey string
	for id := range e.keys(a, "acme") {
		aKey = id
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/tenants/acme/keys", nil},
		{"POST", "/v1/tenants/acme/keys", map[string]any{}},
		{"DELETE", "/v1/tenants/acme/keys/" + aKey, nil},
		{"DELETE", "/v1/tenants/globex/keys/" + aKey, nil}, // through its own tenant
		{"GET", "/v1/tenants/nosuch/keys", nil},
	} {
		if st, out := b.Do(c.method, c.path, c.body); st != http.StatusNotFound || errCode(out) != "not_found" {
			t.Errorf("globex %s %s: %d %v, want 404", c.method, c.path, st, out)
		}
	}
	if st, _ := e.admin.Do("GET", "/v1/tenants/nosuch/keys", nil); st != http.StatusNotFound {
		t.Errorf("admin listing an unknown tenant's keys: %d, want 404", st)
	}
	for _, c := range []struct {
		body   any
		status int
		field  string
	}{
		{map[string]any{"expires_at": time.Now().Add(-time.Minute).Format(time.RFC3339)}, 422, "expires_at"},
		{map[string]any{"expires_at": "9999-12-31T23:59:59Z"}, 422, "expires_at"},
		{map[string]any{"expires_at": "tomorrow"}, 422, "expires_at"},
		{map[string]any{"name": strings.Repeat("n", 101)}, 422, "name"},
		{map[string]any{"scope": "admin"}, 400, "scope"},
		{"", 400, "body"},
	} {
		if st, out := a.Do("POST", "/v1/tenants/acme/keys", c.body); st != c.status || errField(out) != c.field {
			t.Errorf("creating a key with %v: %d %v, want %d naming %s", c.body, st, out, c.status, c.field)
		}
	}
	if n := len(e.keys(a, "acme")); n != 1 {
		t.Fatalf("acme has %d keys after refused requests, want 1", n)
	}
	a.Must(http.StatusOK, "GET", "/v1/subscriptions", nil) // untouched by globex's tries
}

// Revoked through one node, a key is refused by another that had it
// cached, within a notification round trip: well inside the cache's own
// lifetime, which only covers for lost notifications.
func TestRevokedKeyIsRefusedOnEveryNode(t *testing.T) {
	a, b := twoNodes(t)
	out := a.admin.Must(http.StatusCreated, "POST", "/v1/tenants", map[string]any{"id": "acme"})
	onB := &testenv.Client{T: t, Base: b.base, Token: out["api_key"].(string)}
	onB.Must(http.StatusOK, "GET", "/v1/subscriptions", nil) // cached on b
	var id string
	for k := range a.keys(a.admin, "acme") {
		id = k
	}
	a.admin.Must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+id, nil)
	const within = 2 * time.Second
	if within >= api.KeyCacheTTL {
		t.Fatalf("the bound %s would let the cache lapse (%s) and hide a missed notification", within, api.KeyCacheTTL)
	}
	testenv.Eventually(t, within, "node b to refuse the key revoked through node a", func() bool {
		st, _ := onB.Do("GET", "/v1/subscriptions", nil)
		return st == http.StatusUnauthorized
	})
}

// A key that expires is accepted by both nodes, each caching it, and
// refused by both from its expiry on: the expiry is the key's, checked at
// each use, not the cache's lifetime. (The key cache's clock is its own,
// so this waits on real time: an expiry two seconds out.)
func TestExpiredKeyIsRefusedOnEveryNode(t *testing.T) {
	a, b := twoNodes(t)
	a.admin.Must(http.StatusCreated, "POST", "/v1/tenants", map[string]any{"id": "acme"})
	// Round(0) drops the monotonic reading: the servers compare wall
	// clocks, and so must the test.
	expires := time.Now().Add(2 * time.Second).Round(0)
	out := a.admin.Must(http.StatusCreated, "POST", "/v1/tenants/acme/keys",
		map[string]any{"expires_at": expires.Format(time.RFC3339Nano)})
	nodes := map[string]*testenv.Client{
		"a": {T: t, Base: a.base, Token: out["api_key"].(string)},
		"b": {T: t, Base: b.base, Token: out["api_key"].(string)},
	}
	for name, c := range nodes {
		if st, _ := c.Do("GET", "/v1/subscriptions", nil); st != http.StatusOK {
			t.Fatalf("node %s before the expiry (%s left): %d, want 200", name, time.Until(expires).Round(time.Millisecond), st)
		}
	}
	const slack = time.Second // the test's and the server's reading of the clock, a request's length
	if slack >= api.KeyCacheTTL {
		t.Fatalf("the slack %s would let the cache lapse (%s) and hide a cached key outliving its expiry", slack, api.KeyCacheTTL)
	}
	for name, c := range nodes {
		testenv.Eventually(t, time.Until(expires)+2*slack, "node "+name+" to refuse the expired key", func() bool {
			st, _ := c.Do("GET", "/v1/subscriptions", nil)
			if st == http.StatusOK && time.Now().After(expires.Add(slack)) {
				t.Fatalf("node %s accepted the key %s after its expiry", name, time.Since(expires).Round(time.Millisecond))
			}
			if st == http.StatusUnauthorized && time.Now().Before(expires.Add(-slack)) {
				t.Fatalf("node %s refused the key %s before its expiry", name, time.Until(expires).Round(time.Millisecond))
			}
			return st == http.StatusUnauthorized
		})
	}
}
