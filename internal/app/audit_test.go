package app

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"hookd/internal/audit"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// auditRows reads the whole audit log through the API as c sees it.
func auditRows(t *testing.T, c *testenv.Client, query string) []map[string]any {
	t.Helper()
	var out []map[string]any
	path := "/v1/audit?limit=7" + query
	for range 100 {
		page := c.Must(http.StatusOK, "GET", path, nil)
		for _, r := range page["data"].([]any) {
			out = append(out, r.(map[string]any))
		}
		next, _ := page["next_cursor"].(string)
		if next == "" {
			return out
		}
		path = "/v1/audit?limit=7" + query + "&cursor=" + next
	}
	t.Fatal("more than 100 pages")
	return nil
}

// Every audited action lands in the log with its actor, address and
// target, never with a secret or a key; a tenant reads its own entries only.
func TestAuditLogRecordsEveryAction(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	ok, gone := testenv.NewReceiver(t), testenv.NewReceiver(t)
	gone.Respond = testenv.Statuses(http.StatusGone)

	created := e.admin.Must(http.StatusCreated, "POST", "/v1/tenants", map[string]any{"id": "acme"})
	keyA := created["api_key"].(string)
	a := &testenv.Client{T: t, Base: e.base, Token: keyA}
	var keyAID string
	for id := range e.keys(a, "acme") {
		keyAID = id
	}
	b := e.tenantKey("globex")
	secrets := []string{keyA}

	ci := a.Must(http.StatusCreated, "POST", "/v1/tenants/acme/keys", map[string]any{"name": "ci"})
	secrets = append(secrets, ci["api_key"].(string))
	sub, secret := e.subscribe(a, ok.URL, []string{"order.*"}, nil)
	secrets = append(secrets, secret)
	a.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"event_types": []string{"order.*", "refund.*"}})
	for _, st := range []string{"paused", "active", "disabled", "active"} {
		a.Must(http.StatusOK, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"state": st})
	}
	rotated := a.Must(http.StatusOK, "POST", "/v1/subscriptions/"+sub+"/rotate-secret", nil)
	secrets = append(secrets, rotated["secret"].(string))
	dlv := e.onlyDelivery(e.post(a, "order.created", map[string]any{"n": 1}))
	e.waitDelivery(dlv, "delivered", 10*time.Second)
	a.Must(http.StatusAccepted, "POST", "/v1/deliveries/"+dlv+"/replay", nil)
	a.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+sub+"/replay", map[string]any{"since": "2020-01-01T00:00:00Z"})
	a.Must(http.StatusNoContent, "DELETE", "/v1/tenants/acme/keys/"+ci["id"].(string), nil)
	goneSub, goneSecret := e.subscribe(a, gone.URL, []string{"gone.*"}, nil)
	secrets = append(secrets, goneSecret)
	e.post(a, "gone.now", map[string]any{})
	testenv.Eventually(t, 10*time.Second, "the 410 to disable its subscription", func() bool {
		return a.Must(http.StatusOK, "GET", "/v1/subscriptions/"+goneSub, nil)["state"] == "disabled"
	})
	a.Must(http.StatusNoContent, "DELETE", "/v1/subscriptions/"+sub, nil)

	type entry struct{ action, actor, target string }
	want := []entry{
		{audit.TenantCreate, audit.ActorAdmin, "acme"},
		{audit.KeyCreate, keyAID, ci["id"].(string)},
		{audit.SubscriptionCreate, keyAID, sub},
		{audit.SubscriptionUpdate, keyAID, sub},
		{audit.SubscriptionPause, keyAID, sub},
		{audit.SubscriptionResume, keyAID, sub},
		{audit.SubscriptionDisable, keyAID, sub},
		{audit.SubscriptionResume, keyAID, sub},
		{audit.SubscriptionRotateSecret, keyAID, sub},
		{audit.ReplayDelivery, keyAID, dlv},
		{audit.ReplaySubscription, keyAID, sub},
		{audit.KeyRevoke, keyAID, ci["id"].(string)},
		{audit.SubscriptionCreate, keyAID, goneSub},
		{audit.SubscriptionDisable, audit.ActorHookd, goneSub},
		{audit.SubscriptionDelete, keyAID, sub},
	}
	rows := auditRows(t, a, "")
	var got []entry
	for _, r := range rows {
		got = append(got, entry{r["action"].(string), r["actor"].(string), r["target_id"].(string)})
		addr, _ := r["remote_addr"].(string)
		switch r["actor"] {
		case keyAID:
			if !strings.HasPrefix(addr, "127.0.0.1:") {
				t.Errorf("%v: remote_addr %q, want the client's 127.0.0.1:port", r["action"], addr)
			}
		default: // the admin's and hookd's addresses are not shown to a tenant
			if addr != "" {
				t.Errorf("%v by %v: a tenant is shown remote_addr %q", r["action"], r["actor"], addr)
			}
		}
		if r["tenant_id"] != "acme" {
			t.Errorf("acme reads an entry of %v", r["tenant_id"])
		}
	}
	slices.Reverse(want) // newest first
	if !slices.Equal(got, want) {
		t.Fatalf("audit log as acme reads it:\n got  %v\n want %v", got, want)
	}
	detail := func(r map[string]any) string { b, _ := json.Marshal(r["detail"]); return string(b) }
	if d := detail(rows[len(rows)-4]); d != `{"changed":["event_types"]}` {
		t.Errorf("update detail %s", d)
	}
	if d := detail(rows[len(rows)-5]); d != `{"changed":["state"],"state":{"from":"active","to":"paused"}}` {
		t.Errorf("pause detail %s", d)
	}
	if d := detail(rows[1]); !strings.Contains(d, "410 Gone") {
		t.Errorf("the disable after a 410 does not say why: %s", d)
	}

	// Nothing secret anywhere in the log, as answered or as stored.
	all, err := e.app.store.AuditList(t.Context(), store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	stored, _ := json.Marshal(all.Data)
	answered, _ := json.Marshal(auditRows(t, e.admin, ""))
	for _, s := range secrets {
		for where, text := range map[string][]byte{"stored": stored, "answered": answered} {
			if strings.Contains(string(text), s) || strings.Contains(string(text), strings.TrimPrefix(s, "whsec_")) {
				t.Errorf("the audit log (%s) holds a secret or key %.12s…", where, s)
			}
		}
	}

	// The admin sees every tenant, with addresses, or one tenant's; a tenant
	// only its own; filters apply.
	admin := auditRows(t, e.admin, "&tenant_id=acme")
	if len(admin) != len(want) || admin[len(admin)-1]["remote_addr"] == "" {
		t.Errorf("admin reading acme: %d entries (want %d), first from %q", len(admin), len(want), admin[len(admin)-1]["remote_addr"])
	}
	if n := len(auditRows(t, e.admin, "")); n != len(want)+1 { // globex's creation too
		t.Errorf("admin reads %d entries in all, want %d", n, len(want)+1)
	}
	if rs := auditRows(t, b, ""); len(rs) != 1 || rs[0]["action"] != audit.TenantCreate || rs[0]["target_id"] != "globex" {
		t.Errorf("globex reads %v, want only its own creation", rs)
	}
	if st, _ := b.Do("GET", "/v1/audit?tenant_id=acme", nil); st != http.StatusNotFound {
		t.Errorf("globex asking for acme's log: %d, want 404", st)
	}
	if rs := auditRows(t, a, "&action=subscription.resume"); len(rs) != 2 {
		t.Errorf("%d resumes, want 2", len(rs))
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if rs := auditRows(t, a, "&since="+future); len(rs) != 0 {
		t.Errorf("%d entries since an hour ahead", len(rs))
	}
	if rs := auditRows(t, a, "&until="+future); len(rs) != len(want) {
		t.Errorf("%d entries until an hour ahead, want %d", len(rs), len(want))
	}
	for q, field := range map[string]string{"action=subscription.explode": "action", "since=yesterday": "since", "limit=0": "limit"} {
		if st, out := a.Do("GET", "/v1/audit?"+q, nil); st != http.StatusBadRequest || errField(out) != field {
			t.Errorf("GET /v1/audit?%s: %d %v, want 400 naming %s", q, st, out, field)
		}
	}
}
