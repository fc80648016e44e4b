package storetest

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// A subscription learns from its results whether it fails: failing since
// its first failed attempt after the last success, cleared by a success,
// started again when failures resume over a day after the last one; and
// its alert state moves once per change, a failing alert at most once an
// interval.
func testFailing(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "a.example:443")
	other := f.sub(a.ID, "b.example:443")
	n := 0
	result := func(sb core.Subscription, state core.DeliveryState, started time.Time) store.AttemptResult {
		n++
		d := f.deliver(sb, t0)
		return store.AttemptResult{SubscriptionID: sb.ID, State: state, Now: started,
			Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: started, StatusCode: 500}}
	}
	write := func(rs ...store.AttemptResult) {
		t.Helper()
		noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))
	}
	since := func(sb core.Subscription) time.Time {
		t.Helper()
		st, err := s.DeliveryStats(f.ctx, "", sb.ID)
		noErr(t, "DeliveryStats", err)
		return st.FailingSince
	}
	failing := func(before, lastAfter time.Time) []string {
		t.Helper()
		fs, err := s.SubscriptionsFailing(f.ctx, before, lastAfter)
		noErr(t, "SubscriptionsFailing", err)
		return ids(fs, func(x store.FailingSubscription) string { return x.ID })
	}

	if got := since(sub); !got.IsZero() {
		t.Fatalf("a new subscription fails since %v", got)
	}
	// A success, then failures after it, in one batch: failing from the first of those.
	write(result(sub, core.DeliveryFailed, at(time.Second)), result(sub, core.DeliveryDelivered, at(2*time.Second)),
		result(sub, core.DeliveryPending, at(3*time.Second)), result(sub, core.DeliveryFailed, at(4*time.Second)),
		result(other, core.DeliveryDelivered, at(time.Second)))
	same(t, "failing since, after a success then failures", since(sub), at(3*time.Second))
	if got := since(other); !got.IsZero() {
		t.Fatalf("a subscription whose attempts succeed fails since %v", got)
	}
	// More failures keep the start; the last failure moves.
	write(result(sub, core.DeliveryPending, at(time.Hour)))
	same(t, "failing since, after more failures", since(sub), at(3*time.Second))
	same(t, "failing before +2h, last failure after +30m", failing(at(2*time.Hour), at(30*time.Minute)), []string{sub.ID})
	same(t, "failing before +2s", failing(at(2*time.Second), t0), []string(nil))
	same(t, "failing with the last failure after +2h", failing(at(2*time.Hour), at(2*time.Hour)), []string(nil))

	// A day and more without an attempt: failing starts again.
	write(result(sub, core.DeliveryPending, at(26*time.Hour)))
	same(t, "failing since, after a gap of over a day", since(sub), at(26*time.Hour))

	// The alert: failing once, not again within the interval; ok once.
	alert := func(failing bool, now time.Time) bool {
		t.Helper()
		moved, err := s.SubscriptionAlert(f.ctx, sub.ID, failing, now, time.Hour)
		noErr(t, "SubscriptionAlert", err)
		return moved
	}
	if !alert(true, at(27*time.Hour)) || alert(true, at(27*time.Hour)) {
		t.Fatal("failing alert: want it moved once")
	}
	recovered := func() []string {
		t.Helper()
		fs, err := s.SubscriptionsRecovered(f.ctx)
		noErr(t, "SubscriptionsRecovered", err)
		return ids(fs, func(x store.FailingSubscription) string { return x.ID })
	}
	same(t, "recovered while still failing", recovered(), []string(nil))
	// A success clears it, and the alerted subscription is recovered.
	write(result(sub, core.DeliveryDelivered, at(27*time.Hour+time.Minute)))
	if got := since(sub); !got.IsZero() {
		t.Fatalf("after a success: failing since %v", got)
	}
	same(t, "recovered", recovered(), []string{sub.ID})
	if !alert(false, at(27*time.Hour+2*time.Minute)) || alert(false, at(27*time.Hour+2*time.Minute)) {
		t.Fatal("recovered alert: want it moved once")
	}
	same(t, "recovered after its alert", recovered(), []string(nil))
	// Failing again within the hour of the last failing alert: no alert.
	if alert(true, at(27*time.Hour+30*time.Minute)) {
		t.Fatal("a second failing alert within the hour")
	}
	if !alert(true, at(28*time.Hour+time.Minute)) {
		t.Fatal("no failing alert an hour after the last")
	}
	// Not listed once it is not active.
	d := sub
	d.State, d.UpdatedAt = core.SubPaused, at(29*time.Hour)
	noErr(t, "pause", s.SubscriptionUpdate(f.ctx, d))
	write(result(sub, core.DeliveryPending, at(29*time.Hour)))
	same(t, "failing while paused", failing(at(30*time.Hour), t0), []string(nil))
}
