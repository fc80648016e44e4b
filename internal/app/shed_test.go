package app

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"hookd/internal/shed"
	"hookd/internal/testenv"
)

// shedding starts a SQLite node that sheds a backlog over 5 pending that
// has not shrunk for window.
func shedding(t *testing.T, window time.Duration) *env {
	return serve(t, Config{
		DB: filepath.Join(t.TempDir(), "hookd.db"), AdminToken: adminToken, Version: "test",
		AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Log:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		Shed:          shed.Config{Threshold: 5, Window: window, Every: window / 5},
	})
}

// A paused subscription's backlog is held by choice and never shed.
func TestPausedBacklogIsNotShed(t *testing.T) {
	t.Parallel()
	e := shedding(t, 100*time.Millisecond)
	rc := testenv.NewReceiver(t)
	sub, _ := e.subscribe(e.admin, rc.URL, []string{"*"}, nil)
	e.admin.Must(200, "PATCH", "/v1/subscriptions/"+sub, map[string]any{"state": "paused"})
	for i := range 8 {
		e.post(e.admin, "a.b", map[string]any{"i": i})
	}
	// Many readings later (the window is 100 ms), it is still not shed.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if h := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub+"/health", nil); h["shedding"] != false || h["pending"] != 8.0 {
			t.Fatalf("paused subscription's health: %v, want 8 pending and not shed", h)
		}
		time.Sleep(50 * time.Millisecond) // pacing readings over the window, not waiting for an outcome
	}
	if n := value(t, e.scrape(), "hookd_subscriptions_shed"); n != 0 {
		t.Errorf("hookd_subscriptions_shed = %v with only a paused backlog", n)
	}
}

// R4's escape valve, end to end: a subscription whose backlog is over the
// threshold and not shrinking has its new deliveries written skipped (and
// says so on /health), while the event still reaches everyone else; once
// the backlog drains it is sent to again, and what was shed replays.
func TestBacklogThatDoesNotShrinkIsShedAtIngest(t *testing.T) {
	t.Parallel()
	e := shedding(t, 300*time.Millisecond)
	// The endpoint holds every request until released: its backlog (in
	// flight or waiting) grows with each event and does not shrink.
	slow, other := testenv.NewReceiver(t), testenv.NewReceiver(t)
	release := make(chan struct{})
	slow.Respond = func(n int, w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusOK)
	}
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	sub, _ := e.subscribe(e.admin, slow.URL, []string{"*"}, nil)
	e.subscribe(e.admin, other.URL, []string{"*"}, nil)
	// Its owner is told when shedding begins and when it ends.
	ops := testenv.NewReceiver(t)
	e.subscribe(e.admin, ops.URL, []string{"hookd.subscription.shedding", "hookd.subscription.shedding_ended"}, nil)
	told := func(typ string) map[string]any {
		t.Helper()
		var got map[string]any
		testenv.Eventually(t, 10*time.Second, typ+" sent", func() bool {
			for _, r := range ops.Requests() {
				var ev struct {
					Type string         `json:"type"`
					Data map[string]any `json:"data"`
				}
				if json.Unmarshal(r.Body, &ev) == nil && ev.Type == typ {
					got = ev.Data
					return true
				}
			}
			return false
		})
		return got
	}
	deliveryOf := func(eventID, subID string) map[string]any {
		for _, d := range e.admin.Must(200, "GET", "/v1/events/"+eventID, nil)["deliveries"].([]any) {
			if d := d.(map[string]any); d["subscription_id"] == subID {
				return e.admin.Must(200, "GET", "/v1/deliveries/"+d["id"].(string), nil)
			}
		}
		t.Fatalf("event %s has no delivery for %s", eventID, subID)
		return nil
	}

	for i := range 8 {
		e.post(e.admin, "a.b", map[string]any{"i": i})
	}
	testenv.Eventually(t, 10*time.Second, "the subscription to be shed", func() bool {
		return e.admin.Must(200, "GET", "/v1/subscriptions/"+sub+"/health", nil)["shedding"] == true
	})
	if h := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub+"/health", nil); h["shedding_since"] == nil || h["pending"] != 8.0 {
		t.Errorf("health while shed: %v, want shedding_since set and 8 pending", h)
	}
	if n := value(t, e.scrape(), "hookd_subscriptions_shed"); n != 1 {
		t.Errorf("hookd_subscriptions_shed = %v while one subscription is shed", n)
	}
	began := told("hookd.subscription.shedding")
	if began["subscription_id"] != sub || began["url"] != slow.URL || began["pending"] != 8.0 || began["threshold"] != 5.0 ||
		began["shedding_since"] == nil {
		t.Errorf("shedding event: %v, want the subscription, its URL, 8 pending over a threshold of 5, and since when", began)
	}

	shedEvt := e.post(e.admin, "a.b", map[string]any{"i": "shed"})
	d := deliveryOf(shedEvt, sub)
	if d["state"] != "skipped" || !strings.Contains(d["last_error"].(string), "shed at ingest") {
		t.Fatalf("delivery of an event posted while shed: %v %q, want skipped, saying it was shed", d["state"], d["last_error"])
	}
	testenv.Eventually(t, 10*time.Second, "the other subscription to get every event", func() bool { return other.Count() == 9 })

	// The endpoint recovers: the backlog drains and shedding ends; new
	// events go out.
	close(release)
	testenv.Eventually(t, 10*time.Second, "the backlog to drain and shedding to end", func() bool {
		h := e.admin.Must(200, "GET", "/v1/subscriptions/"+sub+"/health", nil)
		return h["pending"] == 0.0 && h["shedding"] == false
	})
	if n := value(t, e.scrape(), "hookd_subscriptions_shed"); n != 0 {
		t.Errorf("hookd_subscriptions_shed = %v after shedding ended", n)
	}
	ended := told("hookd.subscription.shedding_ended")
	if ended["subscription_id"] != sub || ended["url"] != slow.URL || ended["shedding_since"] != began["shedding_since"] ||
		ended["shedding_ended_at"] == nil {
		t.Errorf("shedding_ended event: %v, want the subscription, its URL, the same shedding_since and when it ended", ended)
	}
	for _, r := range ops.Requests() {
		if !strings.Contains(string(r.Body), sub) {
			t.Errorf("an operational event not about the shed subscription: %s", r.Body)
		}
	}
	if n := len(ops.Requests()); n != 2 {
		t.Errorf("%d operational events, want the 2 about shedding", n)
	}
	after := e.post(e.admin, "a.b", map[string]any{"i": "after"})
	e.waitDelivery(deliveryOf(after, sub)["id"].(string), "delivered", 10*time.Second)

	// What was shed is replayable, with the same webhook-id.
	e.admin.Must(202, "POST", "/v1/deliveries/"+d["id"].(string)+"/replay", nil)
	e.waitDelivery(d["id"].(string), "delivered", 10*time.Second)
	got := map[string]int{}
	for _, r := range slow.Requests() {
		got[r.Header.Get("webhook-id")]++
	}
	if len(got) != 10 || got[shedEvt] != 1 || got[after] != 1 {
		t.Errorf("the shed subscription's endpoint got %d distinct events (%v), want the 8 of the backlog, the one after and the replayed one, each once", len(got), got)
	}
}
