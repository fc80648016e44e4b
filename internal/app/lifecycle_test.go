package app

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"hookd/internal/testenv"
	"hookd/webhook"
)

// An operational event about subscription A (disabled after its endpoint
// answered 410) reaches the tenant's hookd.* subscription B, signed; it
// never reaches A itself, though A subscribes to hookd.* too, nor C, a
// bare "*". A test event reaches its one subscription, even a bare "*"
// one; and a tenant cannot post hookd's types.
func TestOperationalEventsReachOnlyWhoNamesThem(t *testing.T) {
	t.Parallel()
	e := start(t, true)
	a, b, c := testenv.NewReceiver(t), testenv.NewReceiver(t), testenv.NewReceiver(t)
	a.Respond = testenv.Statuses(http.StatusGone)
	subA, _ := e.subscribe(e.admin, a.URL, []string{"order.*", "hookd.*"}, nil)
	_, secretB := e.subscribe(e.admin, b.URL, []string{"hookd.*"}, nil)
	subC, _ := e.subscribe(e.admin, c.URL, []string{"*"}, nil)
	e.post(e.admin, "order.created", map[string]any{"n": 1})

	type opEvent struct {
		Type string `json:"type"`
		Data struct {
			SubscriptionID string `json:"subscription_id"`
			URL            string `json:"url"`
			Reason         string `json:"reason"`
		} `json:"data"`
	}
	byType := func() map[string]opEvent {
		out := map[string]opEvent{}
		for _, r := range b.Requests() {
			var ev opEvent
			if err := json.Unmarshal(r.Body, &ev); err != nil {
				t.Fatal(err)
			}
			if err := webhook.Verify(secretB, r.Header, r.Body, time.Now(), 0); err != nil {
				t.Errorf("%s: signature: %v", ev.Type, err)
			}
			out[ev.Type] = ev
		}
		return out
	}
	// Its delivery failed (failing), and it was disabled (disabled).
	testenv.Eventually(t, 10*time.Second, "B gets hookd.subscription.failing and .disabled", func() bool { return b.Count() >= 2 })
	for typ, reason := range map[string]string{"hookd.subscription.failing": "delivery_failed", "hookd.subscription.disabled": "endpoint answered 410 Gone"} {
		got, ok := byType()[typ]
		if !ok || got.Data.SubscriptionID != subA || got.Data.URL != a.URL || got.Data.Reason != reason {
			t.Errorf("B's %s: %+v (present %v), want it about A, reason %q", typ, got, ok, reason)
		}
	}
	if h := e.admin.Must(200, "GET", "/v1/subscriptions/"+subA, nil); h["state"] != "disabled" {
		t.Errorf("A is %v after its 410", h["state"])
	}
	// Let anything else due go out, then count.
	testenv.Eventually(t, 5*time.Second, "nothing in flight", func() bool { return e.app.dispatch.Stats().Inflight == 0 })
	if n := a.Count(); n != 1 {
		t.Errorf("A got %d requests, want only its own order.created (never an event about itself)", n)
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
	if n := b.Count(); n != 2 {
		t.Errorf("B (hookd.*) got %d requests, want its 2: the test event went beyond its one subscription", n)
	}
	if st, body := e.admin.Do("POST", "/v1/events", map[string]any{"type": "hookd.subscription.disabled", "payload": map[string]any{}}); st != 422 {
		t.Errorf("a tenant posting a hookd type: %d %v, want 422", st, body)
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
