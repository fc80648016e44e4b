package storetest

import (
	"slices"
	"strings"
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
	// With what it had been failing since at its alert, and its last failure.
	rs, err := s.SubscriptionsRecovered(f.ctx)
	noErr(t, "SubscriptionsRecovered", err)
	same(t, "the recovered subscription", rs, []store.FailingSubscription{{ID: sub.ID, TenantID: a.ID, URL: sub.URL, Host: sub.Host,
		FailingSince: at(26 * time.Hour), LastFailureAt: at(26 * time.Hour)}})
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

// A subscription turned back on (to active, from disabled or paused)
// starts with its failure clock and alert state cleared in that same
// write, so days of failures before it was turned off neither list it for
// disabling nor as recovered; its next failure starts the clock again. A
// change that leaves it active keeps them.
func testFailingRestartsWhenTurnedOn(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	fail := func(sb core.Subscription, started time.Time) {
		t.Helper()
		d := f.deliver(sb, t0)
		noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, []store.AttemptResult{{SubscriptionID: sb.ID,
			State: core.DeliveryPending, Now: started, NextAttemptAt: started.Add(time.Hour),
			Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: started, StatusCode: 500}}}))
	}
	stats := func(sb core.Subscription) store.DeliveryStats {
		t.Helper()
		st, err := s.DeliveryStats(f.ctx, "", sb.ID)
		noErr(t, "DeliveryStats", err)
		return st
	}
	listed := func() (failing, recovered []string) {
		t.Helper()
		fs, err := s.SubscriptionsFailing(f.ctx, at(200*time.Hour), t0)
		noErr(t, "SubscriptionsFailing", err)
		rs, err := s.SubscriptionsRecovered(f.ctx)
		noErr(t, "SubscriptionsRecovered", err)
		id := func(x store.FailingSubscription) string { return x.ID }
		return ids(fs, id), ids(rs, id)
	}
	update := func(sb *core.Subscription, state core.SubscriptionState, now time.Time) {
		t.Helper()
		sb.State, sb.UpdatedAt = state, now
		noErr(t, "SubscriptionUpdate to "+string(state), s.SubscriptionUpdate(f.ctx, *sb))
	}

	for _, off := range []core.SubscriptionState{core.SubDisabled, core.SubPaused} {
		sub := f.sub(a.ID, "a.example:443")
		fail(sub, at(time.Hour))
		fail(sub, at(20*time.Hour))
		moved, err := s.SubscriptionAlert(f.ctx, sub.ID, true, at(20*time.Hour), time.Hour)
		noErr(t, "SubscriptionAlert", err)
		if !moved {
			t.Fatal("the failing alert did not move")
		}
		// Left active by a change of another field: all is kept.
		sub.MaxConcurrency = 3
		update(&sub, core.SubActive, at(20*time.Hour+5*time.Minute))
		same(t, "failing since, after a change that kept it active", stats(sub).FailingSince, at(time.Hour))

		update(&sub, off, at(20*time.Hour+10*time.Minute))
		same(t, "failing since, "+string(off), stats(sub).FailingSince, at(time.Hour))
		update(&sub, core.SubActive, at(20*time.Hour+20*time.Minute))
		st := stats(sub)
		if !st.FailingSince.IsZero() || !st.LastFailure.At.Equal(at(20*time.Hour)) {
			t.Fatalf("turned on from %s: failing since %v, last failure at %v; want cleared and kept", off, st.FailingSince, st.LastFailure.At)
		}
		failing, recovered := listed()
		same(t, "listed failing or recovered after being turned on from "+string(off), [][]string{failing, recovered}, [][]string{nil, nil})
		// Its next failure starts the clock, and a failing alert goes
		// again at once: the hourly bound counted from the alert before it
		// was turned off would keep its owner from hearing (a hostile pass:
		// disabled again with no failing alert first).
		fail(sub, at(20*time.Hour+30*time.Minute))
		same(t, "failing since, failing again", stats(sub).FailingSince, at(20*time.Hour+30*time.Minute))
		moved, err = s.SubscriptionAlert(f.ctx, sub.ID, true, at(20*time.Hour+30*time.Minute), time.Hour)
		noErr(t, "SubscriptionAlert", err)
		if !moved {
			t.Fatalf("turned on from %s and failing again: no failing alert", off)
		}
		update(&sub, core.SubDisabled, at(21*time.Hour)) // out of the next round's lists
	}
}

// A subscription keeps its last failed attempt (status, error, the first
// bytes of its answer), written with failing_since: the newest failure
// wins, an older one arriving late changes nothing, and a success keeps
// it. DeliveryStatsList answers for many subscriptions what DeliveryStats
// answers for each, within the tenant.
func testLastFailure(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub, calm, theirs := f.sub(a.ID, "a.example:443"), f.sub(a.ID, "c.example:443"), f.sub(b.ID, "b.example:443")
	gone := f.sub(a.ID, "g.example:443")
	noErr(t, "delete", s.SubscriptionDelete(f.ctx, "", gone.ID, t0))
	result := func(sb core.Subscription, state core.DeliveryState, started time.Time, status int, errText, resp string) store.AttemptResult {
		d := f.deliver(sb, t0)
		return store.AttemptResult{SubscriptionID: sb.ID, State: state, Now: started, NextAttemptAt: started.Add(time.Minute),
			Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: started, StatusCode: status, Error: errText, Response: resp}}
	}
	write := func(rs ...store.AttemptResult) {
		t.Helper()
		noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))
	}
	stats := func(sb core.Subscription) store.DeliveryStats {
		t.Helper()
		st, err := s.DeliveryStats(f.ctx, "", sb.ID)
		noErr(t, "DeliveryStats", err)
		return st
	}
	same(t, "a new subscription's last failure", stats(sub).LastFailure, store.Failure{})

	// The newest failure of a batch is kept, whatever the order given.
	write(result(sub, core.DeliveryPending, at(2*time.Second), 0, "connection refused", ""),
		result(sub, core.DeliveryPending, at(time.Second), 503, "", "busy"))
	same(t, "last failure", stats(sub).LastFailure, store.Failure{At: at(2 * time.Second), Error: "connection refused"})
	// An older failure written later changes nothing.
	write(result(sub, core.DeliveryFailed, at(1500*time.Millisecond), 400, "", "bad"))
	same(t, "last failure after an older one", stats(sub).LastFailure, store.Failure{At: at(2 * time.Second), Error: "connection refused"})
	// A newer one replaces it; its answer is cut to MaxFailureHead bytes on a rune boundary.
	long := strings.Repeat("x", store.MaxFailureHead-1) + "é and more"
	write(result(sub, core.DeliveryPending, at(3*time.Second), 500, "", long))
	got := stats(sub).LastFailure
	if want := strings.Repeat("x", store.MaxFailureHead-1); got.Response != want || got.Status != 500 || !got.At.Equal(at(3*time.Second)) {
		t.Fatalf("last failure after a long answer: %+v, want status 500 and the answer cut to %d bytes", got, len(want))
	}
	// A success clears failing_since but keeps what the last failure was.
	write(result(sub, core.DeliveryDelivered, at(4*time.Second), 200, "", "ok"))
	if st := stats(sub); !st.FailingSince.IsZero() || st.LastFailure.Status != 500 {
		t.Fatalf("after a success: failing since %v, last failure %+v; want cleared and kept", st.FailingSince, st.LastFailure)
	}

	// The next attempt is the earliest due of its pending deliveries.
	f.deliver(calm, at(time.Hour))
	f.deliver(calm, at(time.Minute))
	same(t, "next attempt", stats(calm).NextAttemptAt, at(time.Minute))

	// Many at once: the tenant's live ones, each as DeliveryStats has it.
	many, err := s.DeliveryStatsList(f.ctx, a.ID, []string{sub.ID, calm.ID, theirs.ID, gone.ID, "sub_none"})
	noErr(t, "DeliveryStatsList", err)
	same(t, "DeliveryStatsList", many, map[string]store.DeliveryStats{sub.ID: stats(sub), calm.ID: stats(calm)})
	many, err = s.DeliveryStatsList(f.ctx, "", []string{theirs.ID})
	noErr(t, "DeliveryStatsList, any tenant", err)
	same(t, "DeliveryStatsList, any tenant", many, map[string]store.DeliveryStats{theirs.ID: stats(theirs)})
	many, err = s.DeliveryStatsList(f.ctx, a.ID, nil)
	noErr(t, "DeliveryStatsList of none", err)
	same(t, "DeliveryStatsList of none", many, map[string]store.DeliveryStats{})
}

// SubscriptionList with Failing lists only those failing now, of one
// tenant or of all; TenantList pages every tenant.
func testFailingListAndTenants(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	failA, calm, failB := f.sub(a.ID, "a.example:443"), f.sub(a.ID, "c.example:443"), f.sub(b.ID, "b.example:443")
	recovered := f.sub(a.ID, "r.example:443")
	var rs []store.AttemptResult
	for i, x := range []struct {
		sub   core.Subscription
		state core.DeliveryState
	}{{failA, core.DeliveryFailed}, {calm, core.DeliveryDelivered}, {failB, core.DeliveryPending},
		{recovered, core.DeliveryPending}} {
		d := f.deliver(x.sub, t0)
		rs = append(rs, store.AttemptResult{SubscriptionID: x.sub.ID, State: x.state, Now: at(time.Second), NextAttemptAt: at(time.Minute),
			Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: at(time.Duration(i) * time.Millisecond), StatusCode: 500}})
	}
	noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))
	d := f.deliver(recovered, t0)
	noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, []store.AttemptResult{{SubscriptionID: recovered.ID,
		State: core.DeliveryDelivered, Now: at(time.Minute), Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: at(time.Minute), StatusCode: 200}}}))

	list := func(p store.SubscriptionListParams) []string {
		t.Helper()
		var out []string
		for {
			page, err := s.SubscriptionList(f.ctx, p)
			noErr(t, "SubscriptionList", err)
			out = append(out, ids(page.Data, subID)...)
			if page.NextCursor == "" {
				return out
			}
			p.Cursor = page.NextCursor
		}
	}
	same(t, "failing of every tenant", list(store.SubscriptionListParams{Failing: true, Limit: 1}), sortedIDs(failA.ID, failB.ID))
	same(t, "failing of one tenant", list(store.SubscriptionListParams{Failing: true, TenantID: a.ID}), []string{failA.ID})
	same(t, "every one of a tenant", list(store.SubscriptionListParams{TenantID: a.ID}), sortedIDs(failA.ID, calm.ID, recovered.ID))

	var tenants []string
	p := store.TenantListParams{Limit: 1}
	for {
		page, err := s.TenantList(f.ctx, p)
		noErr(t, "TenantList", err)
		tenants = append(tenants, ids(page.Data, func(t core.Tenant) string { return t.ID })...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	same(t, "tenants", tenants, sortedIDs(core.DefaultTenant, a.ID, b.ID))
}

func sortedIDs(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}
