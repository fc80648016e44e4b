package audit

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"hookd/internal/core"
)

func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"URL": "url", "TenantID": "tenant_id", "EventTypes": "event_types",
		"PrevSecretExpiresAt": "prev_secret_expires_at", "HTTPHeaders": "http_headers", "State": "state",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every field of a subscription, changed alone, is named; UpdatedAt is
// left out when asked. Reflection keeps a field added later from being
// missed, and this test would show a type it cannot compare.
func TestChangedNamesEachField(t *testing.T) {
	base := core.Subscription{ID: "sub_1", URL: "https://a.example/", EventTypes: []string{"a.b"}, State: core.SubActive}
	cases := map[string]func(*core.Subscription){
		"url":                    func(s *core.Subscription) { s.URL = "https://b.example/" },
		"event_types":            func(s *core.Subscription) { s.EventTypes = []string{"a.c"} },
		"secret":                 func(s *core.Subscription) { s.Secret = "whsec_new" },
		"prev_secret_expires_at": func(s *core.Subscription) { s.PrevSecretExpiresAt = time.Unix(1, 0) },
		"retry_schedule":         func(s *core.Subscription) { s.RetrySchedule = []time.Duration{time.Second} },
		"state":                  func(s *core.Subscription) { s.State = core.SubPaused },
	}
	for want, change := range cases {
		next := base
		change(&next)
		next.UpdatedAt = time.Now()
		if got := Changed(base, next, "UpdatedAt"); !slices.Equal(got, []string{want}) {
			t.Errorf("changing %s: Changed = %v", want, got)
		}
	}
	if got := Changed(base, base); len(got) != 0 {
		t.Errorf("no change: Changed = %v", got)
	}
}

func TestRecordCarriesTheActor(t *testing.T) {
	ctx := context.Background()
	if _, ok := Entry(ctx); ok {
		t.Fatal("a bare context carries an entry")
	}
	e, _ := Entry(Record(ctx, SubscriptionDisable, "sub_1", nil))
	if e.Actor != ActorHookd || e.RemoteAddr != "" || string(e.Detail) != "{}" || e.ID == "" || e.At.IsZero() {
		t.Errorf("without an actor: %+v", e)
	}
	ctx = WithActor(ctx, Actor{ID: "key_1", Addr: "192.0.2.1:5555"})
	e, _ = Entry(Record(ctx, KeyRevoke, "key_2", map[string]any{"name": "ci"}))
	var d map[string]any
	if err := json.Unmarshal(e.Detail, &d); err != nil || d["name"] != "ci" {
		t.Errorf("detail %s: %v", e.Detail, err)
	}
	if e.Actor != "key_1" || e.RemoteAddr != "192.0.2.1:5555" || e.Action != KeyRevoke || e.TargetID != "key_2" {
		t.Errorf("with an actor: %+v", e)
	}
	for _, a := range Actions {
		if !Known(a) {
			t.Errorf("%s not known", a)
		}
	}
	if Known("subscription.explode") {
		t.Error("an unknown action is known")
	}
}
