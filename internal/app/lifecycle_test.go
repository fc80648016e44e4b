package app

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"hookd/internal/testenv"
	"hookd/webhook"
)

// An operational event about subscription A reaches the tenant's hookd.*
// subscription B, signed; it never reaches A itself, though A subscribes
// to hookd.* too and stays active (its endpoint answers 500, so it is
// failing, not disabled: routing alone would send it there), nor C, a
// bare "*". A test event reaches its one subscription, even a bare "*"
// one; and a tenant cannot post hookd's types.
func TestOperationalEventsReachOnlyWhoNamesThem(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	a, b, c := testenv.NewReceiver(t), testenv.NewReceiver(t), testenv.NewReceiver(t)
	a.Respond = testenv.Statuses(http.StatusInternalServerError)
	// No retries: its first delivery fails at once, and A is failing.
	subA, _ := e.subscribe(e.admin, a.URL, []string{"order.*", "hookd.*"}, map[string]any{"retry_schedule": []string{}})
	subB, secretB := e.subscribe(e.admin, b.URL, []string{"hookd.*"}, nil)
	subC, _ := e.subscribe(e.admin, c.URL, []string{"*"}, nil)
	e.post(e.admin, "order.created", map[string]any{"n": 1})

	testenv.Eventually(t, 10*time.Second, "B gets hookd.subscription.failing", func() bool { return b.Count() >= 1 })
	var failing struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Data struct {
			SubscriptionID string `json:"subscription_id"`
			URL            string `json:"url"`
			Reason         string `json:"reason"`
		} `json:"data"`
	}
	r := b.Requests()[0]
	if err := json.Unmarshal(r.Body, &failing); err != nil {
		t.Fatal(err)
	}
	if err := webhook.Verify(secretB, r.Header, r.Body, time.Now(), 0); err != nil {
		t.Errorf("B's %s: signature: %v", failing.Type, err)
	}
	if failing.Type != "hookd.subscription.failing" || failing.Data.SubscriptionID != subA || failing.Data.URL != a.URL ||
		failing.Data.Reason != "delivery_failed" {
		t.Errorf("B got %s, want hookd.subscription.failing about A, reason delivery_failed", r.Body)
	}
	if h := e.admin.Must(200, "GET", "/v1/subscriptions/"+subA, nil); h["state"] != "active" {
		t.Fatalf("A is %v after its 500, want active (so only the exclusion keeps the event from it)", h["state"])
	}
	// The event was written for B alone: A, though it asks for hookd.*
	// and is active, got no delivery of it, nor C.
	var to []any
	for _, d := range e.admin.Must(200, "GET", "/v1/events/"+failing.ID, nil)["deliveries"].([]any) {
		to = append(to, d.(map[string]any)["subscription_id"])
	}
	if len(to) != 1 || to[0] != subB {
		t.Errorf("the failing event about A went to %v, want only B (%s); A is %s, C %s", to, subB, subA, subC)
	}
	// Let anything else due go out, then look at what each endpoint got.
	testenv.Eventually(t, 5*time.Second, "nothing in flight", func() bool { return e.app.dispatch.Stats().Inflight == 0 })
	for name, rc := range map[string]*testenv.Receiver{"A": a, "C (a bare *)": c} {
		for _, r := range rc.Requests() {
			var got struct {
				Type string `json:"type"`
			}
			json.Unmarshal(r.Body, &got)
			if strings.HasPrefix(got.Type, "hookd.") {
				t.Errorf("%s was sent %s", name, r.Body)
			}
		}
	}
	if n := a.Count(); n != 1 {
		t.Errorf("A got %d requests, want only its own order.created", n)
	}
	if n := c.Count(); n != 1 {
		t.Errorf("C (a bare *) got %d requests, want only order.created", n)
	}

	// A test event goes to its one subscription, whatever it asks for.
	out := e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+subC+"/test", map[string]any{"payload": map[string]any{"hello": "world"}})
	if out["delivery_id"] == nil || out["state"] != "pending" {
		t.Errorf("test event answer %v", out)
	}
	testenv.Eventually(t, 10*time.Second, "C gets the test event", func() bool { return c.Count() == 2 })
	var test struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	json.Unmarshal(c.Requests()[1].Body, &test)
	if test.Type != "hookd.test" || test.Data["hello"] != "world" {
		t.Errorf("C's test event: %s", c.Requests()[1].Body)
	}
	if n := b.Count(); n != 1 {
		t.Errorf("B (hookd.*) got %d requests, want its 1: the test event went beyond its one subscription", n)
	}
	if st, body := e.admin.Do("POST", "/v1/events", map[string]any{"type": "hookd.subscription.disabled", "payload": map[string]any{}}); st != 422 {
		t.Errorf("a tenant posting a hookd type: %d %v, want 422", st, body)
	}
	// Nor under the key an operational event is made once by, which would
	// keep hookd's own event from being written.
	key := "hookd.subscription.disabled:" + subA + ":2026-01-01T00:00:00Z"
	if st, body := e.admin.Do("POST", "/v1/events", map[string]any{"type": "order.created", "payload": map[string]any{}, "idempotency_key": key}); st != 422 ||
		!strings.Contains(body["error"].(map[string]any)["message"].(string), "idempotency_key") {
		t.Errorf("a tenant posting under a hookd key: %d %v, want 422 naming idempotency_key", st, body)
	}
}

// A bulk replay that finishes tells the tenant's hookd.* endpoint, not the
// replayed subscription.
func TestReplayCompletedIsAnOperationalEvent(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	a, ops := testenv.NewReceiver(t), testenv.NewReceiver(t)
	a.Respond = testenv.Statuses(http.StatusBadRequest, http.StatusOK)
	subA, _ := e.subscribe(e.admin, a.URL, []string{"order.*", "hookd.*"}, nil)
	e.subscribe(e.admin, ops.URL, []string{"hookd.replay.completed"}, nil)
	since := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	dlv := e.onlyDelivery(e.post(e.admin, "order.created", map[string]any{}))
	e.waitDelivery(dlv, "failed", 10*time.Second)
	job := e.admin.Must(http.StatusAccepted, "POST", "/v1/subscriptions/"+subA+"/replay", map[string]any{"since": since})["job_id"].(string)
	e.waitDelivery(dlv, "delivered", 15*time.Second)
	testenv.Eventually(t, 15*time.Second, "ops gets hookd.replay.completed", func() bool { return ops.Count() >= 1 })
	var got struct {
		Type string `json:"type"`
		Data struct {
			JobID          string `json:"job_id"`
			SubscriptionID string `json:"subscription_id"`
			Replayed       int    `json:"replayed"`
		} `json:"data"`
	}
	json.Unmarshal(ops.Requests()[0].Body, &got)
	if got.Type != "hookd.replay.completed" || got.Data.JobID != job || got.Data.SubscriptionID != subA || got.Data.Replayed != 1 {
		t.Errorf("ops got %s", ops.Requests()[0].Body)
	}
	if n := a.Count(); n != 2 {
		t.Errorf("A got %d requests, want its delivery twice and nothing about itself", n)
	}
}
