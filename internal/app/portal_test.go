package app

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"hookd/internal/api"
	"hookd/internal/core"
	"hookd/internal/testenv"
)

// portalToken is the token in a portal link's fragment.
func portalToken(t *testing.T, url string) string {
	t.Helper()
	_, token, ok := strings.Cut(url, "/ui/#/portal/")
	if !ok || !strings.HasPrefix(token, "pt_") {
		t.Fatalf("portal link %q does not carry a token in its fragment", url)
	}
	return token
}

// exchange posts a portal token to /portal/session.
func (e *env) exchange(token string) (int, map[string]any) {
	anon := &testenv.Client{T: e.t, Base: e.base}
	return anon.Do("POST", "/portal/session", map[string]any{"token": token})
}

// storeLink writes a portal link expiring at expires straight into the
// store (the API refuses lifetimes under a minute) and returns its token.
func (e *env) storeLink(tenant string, expires time.Time) string {
	e.t.Helper()
	token := api.NewToken("pt_")
	l := core.PortalLink{ID: core.NewID("ptl"), TenantID: tenant, Hash: api.HashKey(token), CreatedAt: time.Now().UTC(), ExpiresAt: expires}
	if err := e.app.store.PortalLinkCreate(e.t.Context(), l); err != nil {
		e.t.Fatal(err)
	}
	return token
}

// A portal link: made by the admin or the tenant's key, for that tenant
// only; exchanged once for a session of that tenant alone, which cannot
// post events, hold keys, hand out links or read the audit log (nor, on
// the Svix API, post messages, read a stored secret, or change its
// application or event types), and ends when the link expires. A second use, an expired link, an unknown one
// fail.
func TestPortalLinkAPI(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	acme, globex := e.tenantKey("acme"), e.tenantKey("globex")
	rc := testenv.NewReceiver(t)
	mine, _ := e.subscribe(acme, rc.URL, []string{"*"}, nil)
	theirs, _ := e.subscribe(globex, rc.URL, []string{"*"}, nil)

	before := time.Now()
	link := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants/acme/portal-link", nil)
	exp, _ := time.Parse(time.RFC3339Nano, link["expires_at"].(string))
	if !strings.HasPrefix(link["url"].(string), e.base+"/ui/#/portal/pt_") || exp.Sub(before) < 59*time.Minute || exp.Sub(before) > 61*time.Minute {
		t.Errorf("link %v: want %s/ui/#/portal/pt_… expiring in an hour", link, e.base)
	}
	own := acme.Must(http.StatusCreated, "POST", "/v1/tenants/acme/portal-link", map[string]any{"expires_in": 600})
	for _, c := range []struct {
		client *testenv.Client
		path   string
		body   any
		status int
		field  string
	}{
		{globex, "/v1/tenants/acme/portal-link", nil, 404, ""},
		{e.admin, "/v1/tenants/nobody/portal-link", nil, 404, ""},
		{e.admin, "/v1/tenants/acme/portal-link", map[string]any{"expires_in": 30}, 422, "expires_in"},
		{e.admin, "/v1/tenants/acme/portal-link", map[string]any{"expires_in": 86401}, 422, "expires_in"},
		{e.admin, "/v1/tenants/acme/portal-link", map[string]any{"expires_in": 36028797018967568}, 422, "expires_in"}, // 3600 s once multiplied to ns and wrapped
		{e.admin, "/v1/tenants/acme/portal-link", `{"expires_in":"1h"}`, 400, "expires_in"},
		{e.admin, "/v1/tenants/acme/portal-link", `{"expires":60}`, 400, "expires"},
		{&testenv.Client{T: t, Base: e.base}, "/v1/tenants/acme/portal-link", nil, 401, ""},
	} {
		if st, out := c.client.Do("POST", c.path, c.body); st != c.status || errField(out) != c.field {
			t.Errorf("POST %s %v: %d %v, want %d naming %q", c.path, c.body, st, out, c.status, c.field)
		}
	}

	st, session := e.exchange(portalToken(t, own["url"].(string)))
	if st != http.StatusCreated || session["tenant_id"] != "acme" || session["expires_at"] != own["expires_at"] {
		t.Fatalf("exchange: %d %v, want acme's session expiring with its link (%v)", st, session, own["expires_at"])
	}
	portal := &testenv.Client{T: t, Base: e.base, Token: session["api_key"].(string)}
	// Its tenant only.
	if list := portal.Must(http.StatusOK, "GET", "/v1/subscriptions?include=health", nil)["data"].([]any); len(list) != 1 || list[0].(map[string]any)["id"] != mine {
		t.Errorf("the portal lists %v, want acme's one subscription", list)
	}
	for _, path := range []string{"/v1/subscriptions/" + theirs, "/v1/subscriptions?tenant_id=globex", "/v1/events?tenant_id=globex"} {
		if st, _ := portal.Do("GET", path, nil); st != http.StatusNotFound {
			t.Errorf("portal GET %s: %d, want 404", path, st)
		}
	}
	portal.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+mine, map[string]any{"state": "paused"})
	// Nothing the platform keeps to itself.
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/events", map[string]any{"type": "a.b", "payload": map[string]any{}}},
		{"POST", "/v1/tenants/acme/keys", map[string]any{}},
		{"GET", "/v1/tenants/acme/keys", nil},
		{"POST", "/v1/tenants/acme/portal-link", nil},
		{"GET", "/v1/audit", nil},
		{"GET", "/v1/tenants", nil},
	} {
		if st, out := portal.Do(c.method, c.path, c.body); st != http.StatusForbidden || errCode(out) != "forbidden" {
			t.Errorf("portal %s %s: %d %v, want 403", c.method, c.path, st, out)
		}
	}
	if n := rc.Count(); n != 0 {
		t.Errorf("the receiver got %d requests: a portal session posted an event", n)
	}

	// The same rule on the Svix API: its endpoints and deliveries, yes...
	e.admin.Must(http.StatusCreated, "POST", "/api/v1/event-type", map[string]any{"name": "acme.kept", "description": "d"})
	app := e.admin.Must(http.StatusOK, "GET", "/api/v1/app/acme", nil)
	eps := portal.Must(http.StatusOK, "GET", "/api/v1/app/acme/endpoint", nil)["data"].([]any)
	if len(eps) != 1 || eps[0].(map[string]any)["id"] != "ep_"+strings.TrimPrefix(mine, "sub_") {
		t.Errorf("the portal lists Svix endpoints %v, want acme's one", eps)
	}
	portal.Must(http.StatusOK, "PATCH", "/api/v1/app/acme/endpoint/"+mine, map[string]any{"description": "by the customer"})
	portal.Must(http.StatusNoContent, "POST", "/api/v1/app/acme/endpoint/"+mine+"/secret/rotate", map[string]any{})
	portal.Must(http.StatusOK, "GET", "/api/v1/app/acme/attempt/endpoint/"+mine, nil)
	if st, out := portal.Do("GET", "/api/v1/app/globex/endpoint", nil); st != http.StatusNotFound || svixCode(out) != "not_found" {
		t.Errorf("portal GET globex's Svix endpoints: %d %v, want 404", st, out)
	}
	// ...messages, stored secrets, applications and event types, no.
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/api/v1/app/acme/msg", map[string]any{"eventType": "a.b", "payload": map[string]any{}}},
		{"GET", "/api/v1/app/acme/endpoint/" + mine + "/secret", nil},
		{"POST", "/api/v1/app", map[string]any{"name": "New", "uid": "portal-made"}},
		{"PUT", "/api/v1/app/acme", map[string]any{"name": "Renamed"}},
		{"PATCH", "/api/v1/app/acme", map[string]any{"name": "Renamed"}},
		{"DELETE", "/api/v1/app/acme", nil},
		{"POST", "/api/v1/event-type", map[string]any{"name": "acme.new", "description": "d"}},
		{"PUT", "/api/v1/event-type/acme.kept", map[string]any{"description": "changed"}},
		{"PATCH", "/api/v1/event-type/acme.kept", map[string]any{"description": "changed"}},
		{"DELETE", "/api/v1/event-type/acme.kept", nil},
	} {
		if st, out := portal.Do(c.method, c.path, c.body); st != http.StatusForbidden || svixCode(out) != "insufficient access" || out["key"] != nil {
			t.Errorf("portal %s %s: %d %v, want Svix's 403", c.method, c.path, st, out)
		}
	}
	if msgs := e.admin.Must(http.StatusOK, "GET", "/api/v1/app/acme/msg", nil)["data"].([]any); len(msgs) != 0 {
		t.Errorf("acme holds messages %v: a portal session posted one", msgs)
	}
	if got := e.admin.Must(http.StatusOK, "GET", "/api/v1/app/acme", nil); got["name"] != app["name"] || got["updatedAt"] != app["updatedAt"] {
		t.Errorf("acme's application is %v, was %v", got, app)
	}
	if st, _ := e.admin.Do("GET", "/api/v1/app/portal-made", nil); st != http.StatusNotFound {
		t.Errorf("the portal's application exists: %d", st)
	}
	if et := e.admin.Must(http.StatusOK, "GET", "/api/v1/event-type/acme.kept", nil); et["description"] != "d" || et["archived"] != false {
		t.Errorf("event type acme.kept is %v, want unchanged", et)
	}
	if st, _ := e.admin.Do("GET", "/api/v1/event-type/acme.new", nil); st != http.StatusNotFound {
		t.Errorf("the portal's event type exists: %d", st)
	}
	// A test of a Svix-format endpoint sends the payload as the body, signed:
	// a session may send hookd's test payload, not choose one (it would be
	// a forged message nothing marks as a test).
	svixRC := testenv.NewReceiver(t)
	ep := e.admin.Must(http.StatusCreated, "POST", "/api/v1/app/acme/endpoint", map[string]any{"url": svixRC.URL})
	svixSub := "sub_" + strings.TrimPrefix(ep["id"].(string), "ep_")
	forged := map[string]any{"payload": map[string]any{"type": "invoice.paid", "data": map[string]any{"amount": 1000000}}}
	if st, out := portal.Do("POST", "/v1/subscriptions/"+svixSub+"/test", forged); st != http.StatusForbidden || errField(out) != "payload" {
		t.Errorf("portal test of a Svix endpoint with a payload: %d %v, want 403 naming payload", st, out)
	}
	portal.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+svixSub+"/test", nil)
	testenv.Eventually(t, 10*time.Second, "the test delivery", func() bool { return svixRC.Count() >= 1 })
	if got := svixRC.Requests(); len(got) != 1 || !strings.Contains(string(got[0].Body), `"test":true`) {
		t.Errorf("the Svix endpoint got %d requests, the first %q; want hookd's one test payload", len(got), got[0].Body)
	}

	// Once only; unknown and expired links fail alike.
	for name, token := range map[string]string{
		"second use": portalToken(t, own["url"].(string)),
		"unknown":    "pt_nothing",
		"expired":    e.storeLink("acme", time.Now().Add(-time.Second)),
	} {
		if st, out := e.exchange(token); st != http.StatusUnauthorized || errCode(out) != "unauthorized" {
			t.Errorf("%s: %d %v, want 401", name, st, out)
		}
	}
	anon := &testenv.Client{T: t, Base: e.base}
	if st, out := anon.Do("POST", "/portal/session", map[string]any{}); st != 422 || errField(out) != "token" {
		t.Errorf("no token: %d %v, want 422 naming token", st, out)
	}
	if st, out := anon.Do("POST", "/portal/session", `{"token":`); st != 400 {
		t.Errorf("broken body: %d %v, want 400", st, out)
	}

	// The session ends with its link.
	short := e.storeLink("acme", time.Now().Add(1500*time.Millisecond))
	st, session = e.exchange(short)
	if st != http.StatusCreated {
		t.Fatalf("exchanging a short link: %d %v", st, session)
	}
	brief := &testenv.Client{T: t, Base: e.base, Token: session["api_key"].(string)}
	brief.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)
	testenv.Eventually(t, 10*time.Second, "the session to end with its link", func() bool {
		st, _ := brief.Do("GET", "/v1/subscriptions", nil)
		return st == http.StatusUnauthorized
	})

	// The sessions are keys of the tenant's, named and scoped portal, and audited.
	portals := 0
	for _, k := range e.keys(acme, "acme") {
		if k["scope"] == "portal" {
			portals++
			if k["name"] != "portal" || k["expires_at"] == nil {
				t.Errorf("portal key %v, want named portal and expiring", k)
			}
		} else if k["scope"] != "tenant" {
			t.Errorf("key %v: scope %v", k["id"], k["scope"])
		}
	}
	if portals != 2 {
		t.Errorf("acme has %d portal keys, want 2 (one per exchange)", portals)
	}
	if n := len(auditRows(t, acme, "&action=portal.link")); n != 2 {
		t.Errorf("%d portal.link entries of acme, want 2", n)
	}
	sessions := auditRows(t, e.admin, "&action=portal.session")
	if len(sessions) != 2 || sessions[0]["actor"] != "portal" || sessions[0]["tenant_id"] != "acme" {
		t.Errorf("portal.session entries %v, want 2 of acme by the portal", sessions)
	}
}

// A portal session signs out on the server (the dashboard's Sign out, and
// Svix's auth/logout): its key is refused at once. No other token may.
func TestPortalSessionSignsOut(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	acme := e.tenantKey("acme")
	for _, path := range []string{"/portal/session", "/api/v1/auth/logout"} {
		method := http.MethodDelete
		if strings.HasPrefix(path, "/api/") {
			method = http.MethodPost
		}
		for _, c := range []*testenv.Client{e.admin, acme} {
			if st, _ := c.Do(method, path, nil); st != http.StatusForbidden {
				t.Errorf("%s %s with a key that is no portal session: %d, want 403", method, path, st)
			}
		}
		link := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants/acme/portal-link", nil)["url"].(string)
		_, out := e.exchange(link[strings.Index(link, "pt_"):])
		session := &testenv.Client{T: t, Base: e.base, Token: out["api_key"].(string)}
		session.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)
		if st, _ := session.Do(method, path, nil); st != http.StatusNoContent {
			t.Fatalf("%s %s: %d, want 204", method, path, st)
		}
		if st, _ := session.Do("GET", "/v1/subscriptions", nil); st != http.StatusUnauthorized {
			t.Errorf("after %s %s the session's key answers %d, want 401", method, path, st)
		}
	}
	// Both tokens that signed in and out still work: only the session ended.
	acme.Must(http.StatusOK, "GET", "/v1/subscriptions", nil)
}

// Svix's app-portal-access answers a portal link: its url the dashboard
// opens, its token the one-time token the session is exchanged for.
func TestSvixAppPortalAccessIsAPortalLink(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	e.admin.Must(http.StatusCreated, "POST", "/api/v1/app", map[string]any{"name": "Acme", "uid": "acme"})
	out := e.admin.Must(http.StatusOK, "POST", "/api/v1/auth/app-portal-access/acme", map[string]any{"expiry": 600, "featureFlags": []string{}})
	token, _ := out["token"].(string)
	if url, _ := out["url"].(string); !strings.HasPrefix(token, "pt_") || url != e.base+"/ui/#/portal/"+token {
		t.Fatalf("app-portal-access: %v, want a portal link and its token", out)
	}
	st, sess := e.exchange(token)
	if st != http.StatusCreated || sess["tenant_id"] != "acme" {
		t.Fatalf("exchanging its token: %d %v", st, sess)
	}
	if exp, _ := time.Parse(time.RFC3339Nano, sess["expires_at"].(string)); time.Until(exp) > 11*time.Minute || time.Until(exp) < 9*time.Minute {
		t.Errorf("the session ends at %v, want in 10 minutes (expiry 600)", exp)
	}
	session := &testenv.Client{T: t, Base: e.base, Token: sess["api_key"].(string)}
	globex := e.tenantKey("globex")
	for _, c := range []struct {
		client *testenv.Client
		app    string
		body   any
		status int
	}{
		{e.admin, "acme", map[string]any{"expiry": 30}, 422},
		{e.admin, "acme", map[string]any{"readOnly": true}, 501},
		{e.admin, "nobody", nil, 404},
		{globex, "acme", nil, 404},
		{session, "acme", nil, 403}, // a session makes no links: access that would outlive it
	} {
		if st, out := c.client.Do("POST", "/api/v1/auth/app-portal-access/"+c.app, c.body); st != c.status {
			t.Errorf("app-portal-access/%s %v: %d %v, want %d", c.app, c.body, st, out, c.status)
		}
	}
	if st, out := globex.Do("POST", "/api/v1/auth/app-portal-access/globex", nil); st != http.StatusOK {
		t.Errorf("an application's own key: %d %v, want a link", st, out)
	}
}
