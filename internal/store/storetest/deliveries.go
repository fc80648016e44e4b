package storetest

import (
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

func testDeliveryDue(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	const host = "due.example:443"
	active := f.sub(a.ID, host)
	paused := f.sub(a.ID, host, func(s *core.Subscription) { s.State = core.SubPaused })
	elsewhere := f.sub(a.ID, "other.example:443")

	// Written out of due order; two share a due time (then ID decides).
	late := f.deliver(active, at(-1*time.Second))
	tieA := f.deliver(active, at(-2*time.Second))
	tieB := f.deliver(active, at(-2*time.Second))
	oldest := f.deliver(active, at(-3*time.Second))
	f.deliver(active, at(10*time.Second))
	f.deliver(active, at(5*time.Second))
	f.deliver(paused, at(-10*time.Second)) // due, but its subscription is paused
	f.deliver(paused, at(time.Second))     // earlier than any active one, still not the next due
	other := f.deliver(elsewhere, at(-10*time.Second))
	sent := f.deliver(active, at(-20*time.Second))
	f.record(sent, 1, 200, core.DeliveryDelivered, time.Time{})

	due := func(p store.DeliveryDueParams) ([]core.Job, time.Time) {
		t.Helper()
		jobs, next, err := s.DeliveryDue(f.ctx, p)
		noErr(t, "DeliveryDue", err)
		return jobs, next
	}
	jobs, next := due(store.DeliveryDueParams{SubscriptionID: active.ID, Now: at(0), Limit: 10})
	same(t, "due order", ids(jobs, jobID), []string{oldest.ID, tieA.ID, tieB.ID, late.ID})
	if !next.Equal(at(5 * time.Second)) {
		t.Fatalf("next due = %v, want %v", next, at(5*time.Second))
	}
	// Each job carries its delivery and its event as stored.
	d, _ := f.getDelivery(oldest.ID)
	e, _, err := s.EventGet(f.ctx, "", oldest.EventID)
	noErr(t, "EventGet", err)
	same(t, "job", jobs[0], core.Job{Delivery: d, Event: e})

	jobs, _ = due(store.DeliveryDueParams{SubscriptionID: active.ID, Now: at(0), Limit: 2})
	same(t, "limited", ids(jobs, jobID), []string{oldest.ID, tieA.ID})
	jobs, _ = due(store.DeliveryDueParams{SubscriptionID: active.ID, Now: at(0), Limit: 2, Exclude: []string{oldest.ID, tieB.ID}})
	same(t, "excluding", ids(jobs, jobID), []string{tieA.ID, late.ID})

	// Due means next_attempt_at <= Now.
	jobs, next = due(store.DeliveryDueParams{SubscriptionID: active.ID, Now: at(-2 * time.Second), Limit: 10})
	same(t, "due at the boundary", ids(jobs, jobID), []string{oldest.ID, tieA.ID, tieB.ID})
	if !next.Equal(at(-time.Second)) {
		t.Fatalf("next due = %v, want %v", next, at(-time.Second))
	}

	jobs, _ = due(store.DeliveryDueParams{SubscriptionID: elsewhere.ID, Now: at(0), Limit: 10})
	same(t, "other subscription", ids(jobs, jobID), []string{other.ID})
	// A paused subscription has nothing due and nothing next.
	jobs, next = due(store.DeliveryDueParams{SubscriptionID: paused.ID, Now: at(0), Limit: 10})
	if len(jobs) != 0 || !next.IsZero() {
		t.Fatalf("paused: %d jobs, next %v; want none", len(jobs), next)
	}

	// Nothing due yet: no jobs, and when to ask again.
	jobs, next = due(store.DeliveryDueParams{SubscriptionID: active.ID, Now: at(-time.Hour), Limit: 10})
	if len(jobs) != 0 || !next.Equal(at(-3*time.Second)) {
		t.Fatalf("early: %d jobs, next %v; want 0 and %v", len(jobs), next, at(-3*time.Second))
	}
	// Nothing pending later: zero time.
	jobs, next = due(store.DeliveryDueParams{SubscriptionID: active.ID, Now: at(time.Hour), Limit: 10})
	if len(jobs) != 6 || !next.IsZero() {
		t.Fatalf("late: %d jobs, next %v; want 6 and zero", len(jobs), next)
	}
	jobs, next = due(store.DeliveryDueParams{SubscriptionID: "sub_nobody", Now: at(0), Limit: 10})
	if len(jobs) != 0 || !next.IsZero() {
		t.Fatalf("unknown subscription: %d jobs, next %v", len(jobs), next)
	}
}

func testDeliveryPendingSubscriptions(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	h1 := f.sub(a.ID, "h1.example:443")
	h2 := f.sub(a.ID, "h2.example:443")
	h3paused := f.sub(a.ID, "h3.example:443", func(s *core.Subscription) { s.State = core.SubPaused })
	h4 := f.sub(a.ID, "h4.example:443")
	h1b := f.sub(a.ID, "h1.example:443")

	// Shards are whatever the caller wrote; pick distinct ones.
	put := func(sub core.Subscription, shard int, next time.Time) core.Delivery {
		e := ev(a.ID, "t")
		in := item(e, next, sub)
		in.Deliveries[0].Shard = shard
		return f.insert(in)[0].Deliveries[0]
	}
	put(h1, 1, at(30*time.Second))
	put(h1, 1, at(10*time.Second))
	put(h1b, 1, at(time.Second)) // same host, its own lane
	put(h2, 2, at(20*time.Second))
	put(h3paused, 3, at(0))   // not active: not listed
	done := put(h4, 4, at(0)) // delivered: not pending
	f.record(done, 1, 200, core.DeliveryDelivered, time.Time{})

	list := func(shards []int) []store.SubscriptionDue {
		t.Helper()
		ds, err := s.DeliveryPendingSubscriptions(f.ctx, shards)
		noErr(t, "DeliveryPendingSubscriptions", err)
		sort.Slice(ds, func(i, j int) bool { return ds[i].NextAttemptAt.Before(ds[j].NextAttemptAt) })
		return ds
	}
	same(t, "all shards", list(nil), []store.SubscriptionDue{
		{SubscriptionID: h1b.ID, Host: "h1.example:443", NextAttemptAt: at(time.Second)},
		{SubscriptionID: h1.ID, Host: "h1.example:443", NextAttemptAt: at(10 * time.Second)},
		{SubscriptionID: h2.ID, Host: "h2.example:443", NextAttemptAt: at(20 * time.Second)},
	})
	same(t, "shard 2", list([]int{2, 3, 4}), []store.SubscriptionDue{
		{SubscriptionID: h2.ID, Host: "h2.example:443", NextAttemptAt: at(20 * time.Second)},
	})
	if ds := list([]int{99}); len(ds) != 0 {
		t.Fatalf("empty shard lists %+v", ds)
	}
	// A recovery ramp kept with the subscription comes with it, for a node
	// taking its shard over; the subscription's own version does not move.
	noErr(t, "SubscriptionRampSet", s.SubscriptionRampSet(f.ctx, h2.ID, at(15*time.Second), 20.5))
	same(t, "shard 2 with a ramp", list([]int{2}), []store.SubscriptionDue{
		{SubscriptionID: h2.ID, Host: "h2.example:443", NextAttemptAt: at(20 * time.Second), RampAt: at(15 * time.Second), RampBase: 20.5},
	})
	same(t, "all shards with a ramp", list(nil)[2], store.SubscriptionDue{
		SubscriptionID: h2.ID, Host: "h2.example:443", NextAttemptAt: at(20 * time.Second), RampAt: at(15 * time.Second), RampBase: 20.5})
	got, err := s.SubscriptionGet(f.ctx, "", h2.ID)
	noErr(t, "SubscriptionGet", err)
	if !got.UpdatedAt.Equal(h2.UpdatedAt) {
		t.Errorf("SubscriptionRampSet moved updated_at: %s, was %s", got.UpdatedAt, h2.UpdatedAt)
	}

	// A 410 comes with the subscription (its disable runs after the result
	// is written: a node that died between them left it active) until an
	// attempt succeeds.
	result := func(d core.Delivery, status int, state core.DeliveryState, when time.Duration) {
		t.Helper()
		noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, []store.AttemptResult{{SubscriptionID: h2.ID,
			Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: at(when), Duration: time.Millisecond, StatusCode: status},
			State:   state, Now: at(when)}}))
	}
	result(put(h2, 2, at(0)), 410, core.DeliveryFailed, 16*time.Second)
	withRamp := store.SubscriptionDue{SubscriptionID: h2.ID, Host: "h2.example:443", NextAttemptAt: at(20 * time.Second),
		RampAt: at(15 * time.Second), RampBase: 20.5}
	gone := withRamp
	gone.GoneAt = at(16 * time.Second)
	same(t, "shard 2 after a 410", list([]int{2}), []store.SubscriptionDue{gone})
	same(t, "all shards after a 410", list(nil)[2], gone)
	result(put(h2, 2, at(0)), 200, core.DeliveryDelivered, 17*time.Second)
	same(t, "shard 2 after a success", list([]int{2}), []store.SubscriptionDue{withRamp})
	result(put(h2, 2, at(0)), 500, core.DeliveryFailed, 18*time.Second)
	same(t, "shard 2 after a 500", list([]int{2}), []store.SubscriptionDue{withRamp})
}

// testDeliveryRehost: deliveries written under a host the subscription has
// left (by a node whose registry lagged) move to its current host and shard;
// finished ones keep the host they were sent to.
func testDeliveryRehost(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "new.example:443")
	other := f.sub(a.ID, "old.example:443")
	stale := func() core.Delivery {
		t.Helper()
		in := item(ev(a.ID, "t"), at(0), sub)
		in.Deliveries[0].Host, in.Deliveries[0].Shard = "old.example:443", core.ShardOf("old.example:443")
		return f.insert(in)[0].Deliveries[0]
	}
	pending, sent := stale(), stale()
	f.record(sent, 1, 200, core.DeliveryDelivered, time.Time{})
	current := f.deliver(sub, at(0))
	untouched := f.deliver(other, at(0))

	n, err := s.DeliveryRehost(f.ctx, sub.ID)
	noErr(t, "DeliveryRehost", err)
	if n != 1 {
		t.Fatalf("DeliveryRehost moved %d, want 1", n)
	}
	for _, c := range []struct {
		d    core.Delivery
		host string
	}{{pending, "new.example:443"}, {sent, "old.example:443"}, {current, "new.example:443"}, {untouched, "old.example:443"}} {
		got, _ := f.getDelivery(c.d.ID)
		if got.Host != c.host || got.Shard != core.ShardOf(c.host) {
			t.Fatalf("delivery %s: host %s shard %d, want %s %d", c.d.ID, got.Host, got.Shard, c.host, core.ShardOf(c.host))
		}
	}
	ds, err := s.DeliveryPendingSubscriptions(f.ctx, []int{core.ShardOf("old.example:443")})
	noErr(t, "DeliveryPendingSubscriptions", err)
	same(t, "old shard after the move", ids(ds, func(d store.SubscriptionDue) string { return d.SubscriptionID }), []string{other.ID})

	n, err = s.DeliveryRehost(f.ctx, sub.ID)
	noErr(t, "DeliveryRehost again", err)
	if n != 0 {
		t.Fatalf("DeliveryRehost again moved %d, want 0", n)
	}
	n, err = s.DeliveryRehost(f.ctx, "sub_unknown")
	if err != nil || n != 0 {
		t.Fatalf("DeliveryRehost of an unknown subscription: %d, %v; want 0, nil", n, err)
	}
}

// testOrderedLines: an ordered subscription's delivery waits while an
// earlier one of its key is pending; other keys flow.
func testOrderedLines(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "ord.example:443", func(s *core.Subscription) { s.Ordered = true })
	put := func(key string) core.Delivery {
		e := ev(a.ID, "t")
		e.OrderingKey = key
		return f.insert(item(e, at(0), sub))[0].Deliveries[0]
	}
	p1, p2, q1, p3 := put("p"), put("p"), put("q"), put("p")
	if p1.OrderingKey != "p" || p1.Sequence != 1 || p2.Sequence != 2 || q1.Sequence != 1 || p3.Sequence != 3 {
		t.Fatalf("keys and sequences: %+v %+v %+v %+v", p1, p2, q1, p3)
	}
	due := func() []string {
		t.Helper()
		jobs, _, err := s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: sub.ID, Now: at(time.Hour), Limit: 10})
		noErr(t, "DeliveryDue", err)
		return ids(jobs, jobID)
	}
	same(t, "heads only", due(), []string{p1.ID, q1.ID})
	// p1 retries later: p2 still waits behind it, q's line is free.
	f.record(p1, 1, 500, core.DeliveryPending, at(2*time.Hour))
	same(t, "p1 retrying", due(), []string{q1.ID})
	// p1 fails for good: p2 becomes the head; p3 still waits.
	f.record(p1, 2, 400, core.DeliveryFailed, time.Time{})
	same(t, "p1 failed", due(), []string{p2.ID, q1.ID})
	got, _ := f.getDelivery(p2.ID)
	if got.OrderingKey != "p" {
		t.Fatalf("stored ordering key %q", got.OrderingKey)
	}
}

// testOrderedLongLines: behind a key whose head is retrying, more rows
// wait than a refill walks; the other keys' heads and the unkeyed rows past
// them are still due, in due order, and the waiting rows still count as
// pending for when to look again and for the stats.
func testOrderedLongLines(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "long.example:443", ordered)
	put := func(key string, next time.Time) core.Delivery {
		return f.insert(item(ev(a.ID, "t", orderKey(key)), next, sub))[0].Deliveries[0]
	}
	p := []core.Delivery{put("p", at(0))}
	for range 30 {
		p = append(p, put("p", at(0)))
	}
	q1, r1, r2, u1 := put("q", at(time.Second)), put("r", at(2*time.Second)), put("r", at(3*time.Second)), put("", at(4*time.Second))
	if u1.Sequence != 0 || r2.Sequence != 2 {
		t.Fatalf("sequences: unkeyed %d, r2 %d", u1.Sequence, r2.Sequence)
	}
	f.record(p[0], 1, 500, core.DeliveryPending, at(2*time.Hour))
	due := func(limit int, exclude ...string) ([]string, time.Time) {
		t.Helper()
		jobs, next, err := s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: sub.ID, Now: at(time.Hour), Limit: limit, Exclude: exclude})
		noErr(t, "DeliveryDue", err)
		return ids(jobs, jobID), next
	}
	got, next := due(4)
	same(t, "heads past the waiting line", got, []string{q1.ID, r1.ID, u1.ID})
	if !next.Equal(at(2 * time.Hour)) {
		t.Fatalf("next due = %v, want the retry at %v", next, at(2*time.Hour))
	}
	got, _ = due(1)
	same(t, "limited", got, []string{q1.ID})
	got, _ = due(4, q1.ID)
	same(t, "excluding", got, []string{r1.ID, u1.ID})

	pend, err := s.DeliveryPendingSubscriptions(f.ctx, nil)
	noErr(t, "DeliveryPendingSubscriptions", err)
	found := false
	for _, d := range pend {
		if d.SubscriptionID == sub.ID {
			found = true
			if !d.NextAttemptAt.Equal(at(0)) {
				t.Fatalf("pending subscription next %v, want %v", d.NextAttemptAt, at(0))
			}
		}
	}
	if !found {
		t.Fatalf("pending subscriptions %+v lack %s", pend, sub.ID)
	}
	st, err := s.DeliveryStats(f.ctx, a.ID, sub.ID)
	noErr(t, "DeliveryStats", err)
	if st.Pending != 35 || !st.NextAttemptAt.Equal(at(0)) {
		t.Fatalf("stats: %d pending, next %v; want 35 and %v", st.Pending, st.NextAttemptAt, at(0))
	}

	// The retrying head goes: the next of its line heads it.
	f.record(p[0], 2, 200, core.DeliveryDelivered, time.Time{})
	got, _ = due(10)
	same(t, "line moved on", got, []string{p[1].ID, q1.ID, r1.ID, u1.ID})
}

func testDeliveryExpire(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub, other := f.sub(a.ID, "x.example:443"), f.sub(a.ID, "x.example:443")
	old := f.deliver(sub, at(0))  // created at(0) by the fixture
	done := f.deliver(sub, at(0)) // delivered: untouched
	f.record(done, 1, 200, core.DeliveryDelivered, time.Time{})
	otherOld := f.deliver(other, at(0)) // another subscription: untouched
	n, err := s.DeliveryExpire(f.ctx, sub.ID, at(time.Second), at(time.Hour), "retry window spent")
	noErr(t, "DeliveryExpire", err)
	if n != 1 {
		t.Fatalf("expired %d, want 1", n)
	}
	d, attempts := f.getDelivery(old.ID)
	if d.State != core.DeliveryFailed || d.LastError != "retry window spent" || len(attempts) != 0 || !d.UpdatedAt.Equal(at(time.Hour)) {
		t.Fatalf("expired delivery %+v, %d attempts", d, len(attempts))
	}
	if f.state(done.ID) != core.DeliveryDelivered || f.state(otherOld.ID) != core.DeliveryPending {
		t.Fatal("expire touched a delivered delivery or another subscription's")
	}
	// A replay starts a new round: not expired by the same cutoff.
	_, err = s.DeliveryReplay(f.ctx, a.ID, old.ID, at(2*time.Second))
	noErr(t, "DeliveryReplay", err)
	n, err = s.DeliveryExpire(f.ctx, sub.ID, at(time.Second), at(time.Hour), "retry window spent")
	noErr(t, "DeliveryExpire", err)
	if n != 0 || f.state(old.ID) != core.DeliveryPending {
		t.Fatalf("replayed delivery expired (%d)", n)
	}
}

func testDeliveryStats(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub := f.sub(a.ID, "stats.example:443")
	d1 := f.deliver(sub, at(0))
	f.deliver(sub, at(0))
	d3 := f.deliver(sub, at(0))
	f.record(d1, 1, 400, core.DeliveryFailed, time.Time{})
	f.record(d3, 1, 200, core.DeliveryDelivered, time.Time{})
	st, err := s.DeliveryStats(f.ctx, a.ID, sub.ID)
	noErr(t, "DeliveryStats", err)
	if st.Pending != 1 || st.Failed != 1 || st.OldestPendingAt.IsZero() || !st.OldestFailedAt.Equal(d1.CreatedAt) {
		t.Fatalf("stats %+v", st)
	}
	if _, err := s.DeliveryStats(f.ctx, b.ID, sub.ID); err != store.ErrNotFound {
		t.Fatalf("other tenant: %v, want ErrNotFound", err)
	}
}

func testDeliveryPendingCounts(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	busy, quiet, done := f.sub(a.ID, "busy.example:443"), f.sub(a.ID, "quiet.example:443"), f.sub(a.ID, "done.example:443")
	for range 3 {
		f.deliver(busy, at(0))
	}
	f.deliver(quiet, at(0))
	f.record(f.deliver(done, at(0)), 1, 200, core.DeliveryDelivered, time.Time{})
	f.record(f.deliver(busy, at(0)), 1, 200, core.DeliveryDelivered, time.Time{})
	got, err := s.DeliveryPendingCounts(f.ctx, 1)
	noErr(t, "DeliveryPendingCounts", err)
	if len(got) != 2 || got[busy.ID] != 3 || got[quiet.ID] != 1 {
		t.Fatalf("counts from 1: %v, want %s: 3 and %s: 1 (delivered ones not counted)", got, busy.ID, quiet.ID)
	}
	got, err = s.DeliveryPendingCounts(f.ctx, 2)
	noErr(t, "DeliveryPendingCounts", err)
	if len(got) != 1 || got[busy.ID] != 3 {
		t.Fatalf("counts from 2: %v, want only %s: 3", got, busy.ID)
	}
}

func testDeliveryRecordResults(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "a.example:443")
	gone := f.sub(a.ID, "a.example:443")
	retry, ok, bad := f.deliver(sub, at(0)), f.deliver(sub, at(0)), f.deliver(sub, at(0))
	skipped := f.deliver(gone, at(0))
	// In flight when its subscription is disabled: the result must not revive it.
	g := gone
	g.State, g.UpdatedAt = core.SubDisabled, at(time.Second)
	noErr(t, "disable", s.SubscriptionUpdate(f.ctx, g))

	now := at(time.Minute)
	att := func(d core.Delivery, n, code int, errText, resp string) core.Attempt {
		a := core.Attempt{DeliveryID: d.ID, N: n, StartedAt: at(time.Duration(n) * time.Second),
			Duration: 1234567 * time.Microsecond, StatusCode: code, Error: errText, Response: resp}
		if code != 0 {
			a.ResponseHeaders = fmt.Sprintf("Content-Type: text/plain\nX-Status: %d\n", code)
		}
		return a
	}
	rs := []store.AttemptResult{
		{Attempt: att(retry, 1, 503, "", "busy, try later"), State: core.DeliveryPending, NextAttemptAt: at(5 * time.Minute), Now: now},
		{Attempt: att(ok, 1, 204, "", ""), State: core.DeliveryDelivered, Now: now},
		{Attempt: att(bad, 1, 0, "dial tcp: connection refused", ""), State: core.DeliveryFailed, Now: now},
		{Attempt: att(skipped, 1, 0, "context deadline exceeded", ""), State: core.DeliveryPending, NextAttemptAt: at(time.Hour), Now: now},
	}
	noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))

	check := func(d core.Delivery, state core.DeliveryState, next time.Time, status int, lastErr string, attempts ...core.Attempt) {
		t.Helper()
		got, as := f.getDelivery(d.ID)
		want := d
		want.State, want.AttemptCount, want.NextAttemptAt = state, len(attempts), next
		want.LastStatus, want.LastError, want.UpdatedAt = status, lastErr, now
		same(t, "delivery "+d.ID, got, want)
		same(t, "attempts of "+d.ID, as, attempts)
	}
	check(retry, core.DeliveryPending, at(5*time.Minute), 503, "", rs[0].Attempt)
	check(ok, core.DeliveryDelivered, time.Time{}, 204, "", rs[1].Attempt)
	check(bad, core.DeliveryFailed, time.Time{}, 0, "dial tcp: connection refused", rs[2].Attempt)
	// Its attempt was a send all the same: recorded and counted, the state left alone.
	got, as := f.getDelivery(skipped.ID)
	if got.State != core.DeliverySkipped || got.AttemptCount != 1 || !got.UpdatedAt.Equal(at(time.Second)) {
		t.Fatalf("skipped delivery: %+v, want still skipped (updated at +1s) with its attempt counted", got)
	}
	same(t, "attempt of a skipped delivery", as, []core.Attempt{rs[3].Attempt})

	// The next try, then the last: attempts come back by N.
	now = at(10 * time.Minute)
	r2 := att(retry, 2, 500, "", "oops")
	noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, []store.AttemptResult{
		{Attempt: r2, State: core.DeliveryPending, NextAttemptAt: at(20 * time.Minute), Now: now}}))
	check(retry, core.DeliveryPending, at(20*time.Minute), 500, "", rs[0].Attempt, r2)
	now = at(30 * time.Minute)
	r3 := att(retry, 3, 200, "", "thanks")
	noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, []store.AttemptResult{
		{Attempt: r3, State: core.DeliveryDelivered, Now: now}}))
	check(retry, core.DeliveryDelivered, time.Time{}, 200, "", rs[0].Attempt, r2, r3)

	// A result for a delivery that is gone (retention removed it while
	// its attempt ran) is dropped; the rest of the batch is written.
	p := f.deliver(sub, at(0))
	err := s.DeliveryRecordResults(f.ctx, []store.AttemptResult{
		{Attempt: core.Attempt{DeliveryID: "dlv_missing", N: 1, StartedAt: now}, State: core.DeliveryFailed, Now: now},
		{Attempt: att(p, 1, 500, "", ""), State: core.DeliveryPending, NextAttemptAt: at(time.Hour), Now: now},
	})
	noErr(t, "DeliveryRecordResults with a missing delivery", err)
	got, as = f.getDelivery(p.ID)
	if got.State != core.DeliveryPending || got.AttemptCount != 1 || len(as) != 1 {
		t.Fatalf("the batch's other result was not written: %+v with %d attempts", got, len(as))
	}
	if _, _, err := s.DeliveryGet(f.ctx, "", "dlv_missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the missing delivery's result made it exist: %v", err)
	}
}

// Two nodes sent one delivery: the first's lease lapsed while its attempt
// ran, and the new owner sent it again. The result written second cannot
// move the delivery on, but it was a send: its attempt is kept under the
// next number and attempt_count counts both, the state staying what the
// first result made it. A repeated call adds nothing.
func testDeliveryRecordResultsOvertaken(t *testing.T, s store.Store) {
	f := newFx(t, s)
	sub := f.sub(f.tenant().ID, "a.example:443")
	record := func(rs ...store.AttemptResult) {
		t.Helper()
		noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))
	}
	result := func(d core.Delivery, n int, start time.Duration, status int, state core.DeliveryState, next time.Time) store.AttemptResult {
		a := core.Attempt{DeliveryID: d.ID, N: n, StartedAt: at(start), Duration: 250 * time.Millisecond, StatusCode: status,
			Response: fmt.Sprintf("answer %d", status), ResponseHeaders: fmt.Sprintf("X-Answer: %d\n", status)}
		if status == 0 {
			a.Duration, a.Error = 10*time.Second, "timeout after 10s"
		}
		return store.AttemptResult{Attempt: a, State: state, NextAttemptAt: next, Now: at(start + a.Duration)}
	}
	renumbered := func(r store.AttemptResult, n int) core.Attempt {
		a := r.Attempt
		a.N = n
		return a
	}

	// The new owner delivers it; then the stale node's result (a timeout)
	// arrives: both attempts kept, delivered, attempt_count 2.
	d := f.deliver(sub, at(0))
	owner := result(d, 1, 20*time.Second, 200, core.DeliveryDelivered, time.Time{})
	stale := result(d, 1, time.Second, 0, core.DeliveryPending, at(time.Minute))
	record(owner)
	record(stale)
	want := d
	want.State, want.AttemptCount, want.LastStatus, want.NextAttemptAt = core.DeliveryDelivered, 2, 200, time.Time{}
	want.UpdatedAt = owner.Now
	check := func(what string, d, want core.Delivery, attempts ...core.Attempt) {
		t.Helper()
		got, as := f.getDelivery(d.ID)
		same(t, what+": delivery", got, want)
		same(t, what+": attempts", as, attempts)
	}
	check("stale result after the owner's", d, want, owner.Attempt, renumbered(stale, 2))
	record(stale, owner) // a retried call whose commit had landed
	check("the same results again", d, want, owner.Attempt, renumbered(stale, 2))

	// The owner's try kept it pending; the stale node's (delivered) result
	// comes next and is counted without deciding anything: the owner's
	// next try, numbered from the new count, decides.
	p := f.deliver(sub, at(0))
	retry := result(p, 1, 20*time.Second, 503, core.DeliveryPending, at(5*time.Minute))
	late := result(p, 1, time.Second, 200, core.DeliveryDelivered, time.Time{})
	record(retry)
	record(late)
	wantP := p
	wantP.AttemptCount, wantP.LastStatus, wantP.NextAttemptAt, wantP.UpdatedAt = 2, 503, at(5*time.Minute), retry.Now
	check("delivered by the stale node after the owner's retry", p, wantP, retry.Attempt, renumbered(late, 2))
	next := result(p, 3, 6*time.Minute, 200, core.DeliveryDelivered, time.Time{})
	record(next)
	wantP.State, wantP.AttemptCount, wantP.LastStatus, wantP.NextAttemptAt, wantP.UpdatedAt = core.DeliveryDelivered, 3, 200, time.Time{}, next.Now
	check("the owner's next try", p, wantP, retry.Attempt, renumbered(late, 2), next.Attempt)

	// Both results in one call, the owner's first.
	q := f.deliver(sub, at(0))
	ownerQ := result(q, 1, 20*time.Second, 200, core.DeliveryDelivered, time.Time{})
	staleQ := result(q, 1, time.Second, 0, core.DeliveryPending, at(time.Minute))
	record(ownerQ, staleQ)
	wantQ := q
	wantQ.State, wantQ.AttemptCount, wantQ.LastStatus, wantQ.NextAttemptAt, wantQ.UpdatedAt = core.DeliveryDelivered, 2, 200, time.Time{}, ownerQ.Now
	check("both in one call", q, wantQ, ownerQ.Attempt, renumbered(staleQ, 2))

	// Several nodes' results for one delivery at once: each attempt gets a
	// number of its own, and the count is all of them.
	const nodes = 6
	cs := []core.Delivery{f.deliver(sub, at(0)), f.deliver(sub, at(0)), f.deliver(sub, at(0))}
	errc := make(chan error, nodes*len(cs))
	for _, c := range cs {
		for i := range nodes {
			go func() {
				r := result(c, 1, time.Duration(i+1)*time.Second, 500+i, core.DeliveryPending, at(time.Hour))
				errc <- s.DeliveryRecordResults(f.ctx, []store.AttemptResult{r})
			}()
		}
	}
	for range nodes * len(cs) {
		noErr(t, "concurrent DeliveryRecordResults", <-errc)
	}
	for _, c := range cs {
		got, as := f.getDelivery(c.ID)
		if got.AttemptCount != nodes || len(as) != nodes || got.State != core.DeliveryPending {
			t.Fatalf("concurrent results: attempt_count %d, %d attempts, %s; want %d, %d, pending", got.AttemptCount, len(as), got.State, nodes, nodes)
		}
		starts := map[time.Time]bool{}
		for i, a := range as {
			if a.N != i+1 {
				t.Fatalf("concurrent results numbered %+v, want 1 to %d", as, nodes)
			}
			starts[a.StartedAt] = true
		}
		if len(starts) != nodes {
			t.Fatalf("concurrent results: %d distinct attempts recorded, want %d", len(starts), nodes)
		}
	}

	// Written skipped while its attempt ran (its subscription disabled
	// meanwhile): an attempt that delivered makes it delivered, since its
	// endpoint has it; one that failed leaves it skipped (replayable). Both
	// attempts are kept.
	off := f.sub(f.tenant().ID, "disabled-in-flight.example:443")
	got1, got2 := f.deliver(off, at(0)), f.deliver(off, at(0))
	off.State = core.SubDisabled
	noErr(t, "disable", s.SubscriptionUpdate(f.ctx, off))
	if f.state(got1.ID) != core.DeliverySkipped {
		t.Fatalf("a pending delivery of a disabled subscription is %s, want skipped", f.state(got1.ID))
	}
	ok1 := result(got1, 1, time.Second, 200, core.DeliveryDelivered, time.Time{})
	bad2 := result(got2, 1, time.Second, 503, core.DeliveryPending, at(time.Minute))
	record(ok1, bad2)
	if d, as := f.getDelivery(got1.ID); d.State != core.DeliveryDelivered || d.LastStatus != 200 || d.AttemptCount != 1 || len(as) != 1 {
		t.Fatalf("skipped in flight, then delivered: %s, last_status %d, attempt_count %d, %d attempts; want delivered, 200, 1, 1",
			d.State, d.LastStatus, d.AttemptCount, len(as))
	}
	if d, as := f.getDelivery(got2.ID); d.State != core.DeliverySkipped || d.AttemptCount != 1 || len(as) != 1 {
		t.Fatalf("skipped in flight, then failed: %s, attempt_count %d, %d attempts; want skipped, 1, 1", d.State, d.AttemptCount, len(as))
	}

	// A result for a delivery retention removed is still dropped, whatever its number.
	noErr(t, "a result for a missing delivery", s.DeliveryRecordResults(f.ctx, []store.AttemptResult{
		{Attempt: core.Attempt{DeliveryID: "dlv_missing", N: 3, StartedAt: at(0)}, State: core.DeliveryDelivered, Now: at(0)}}))
	if _, _, err := s.DeliveryGet(f.ctx, "", "dlv_missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the missing delivery's result made it exist: %v", err)
	}
}

func testDeliveryReplay(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub := f.sub(a.ID, "a.example:443")
	failed, delivered, pending := f.deliver(sub, at(0)), f.deliver(sub, at(0)), f.deliver(sub, at(0))
	f.record(failed, 1, 500, core.DeliveryPending, at(time.Minute))
	f.record(failed, 2, 404, core.DeliveryFailed, time.Time{})
	f.record(delivered, 1, 200, core.DeliveryDelivered, time.Time{})

	now := at(time.Hour)
	if r, _, err := s.DeliveryGet(f.ctx, "", failed.ID); err != nil || !r.RoundStartedAt.Equal(failed.CreatedAt) {
		t.Fatalf("a delivery never replayed: round started at %v (%v), want its creation %v", r.RoundStartedAt, err, failed.CreatedAt)
	}
	for _, d := range []core.Delivery{failed, delivered} {
		before, _ := f.getDelivery(d.ID)
		got, err := s.DeliveryReplay(f.ctx, a.ID, d.ID, now)
		noErr(t, "DeliveryReplay", err)
		want := before
		want.State, want.RoundStart, want.NextAttemptAt, want.UpdatedAt = core.DeliveryPending, before.AttemptCount, now, now
		same(t, "replayed delivery", got, want)
		stored, _ := f.getDelivery(d.ID)
		same(t, "stored replayed delivery", stored, want)
		if r, _, err := s.DeliveryGet(f.ctx, "", d.ID); err != nil || !r.RoundStartedAt.Equal(now) {
			t.Fatalf("replayed delivery's round started at %v (%v), want the replay's time %v", r.RoundStartedAt, err, now)
		}
	}
	if d, _ := f.getDelivery(failed.ID); d.RoundStart != 2 || d.AttemptCount != 2 {
		t.Fatalf("replayed failed delivery: round start %d, attempts %d; want 2, 2", d.RoundStart, d.AttemptCount)
	}
	jobs, _, err := s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: sub.ID, Now: now, Limit: 10})
	noErr(t, "DeliveryDue", err)
	same(t, "due after replay", ids(jobs, jobID), []string{pending.ID, failed.ID, delivered.ID})

	_, err = s.DeliveryReplay(f.ctx, a.ID, pending.ID, now)
	wantErr(t, "DeliveryReplay(pending)", err, store.ErrConflict)
	_, err = s.DeliveryReplay(f.ctx, b.ID, failed.ID, now)
	wantErr(t, "DeliveryReplay(other tenant)", err, store.ErrNotFound)
	_, err = s.DeliveryReplay(f.ctx, "", "dlv_missing", now)
	wantErr(t, "DeliveryReplay(missing)", err, store.ErrNotFound)

	// Skipped by a disable: replayable (it waits until the subscription is active).
	dis := f.sub(a.ID, "b.example:443")
	sk := f.deliver(dis, at(0))
	d2 := dis
	d2.State = core.SubDisabled
	noErr(t, "disable", s.SubscriptionUpdate(f.ctx, d2))
	// Not while disabled: it would wait there, unsent, with nothing saying so.
	_, err = s.DeliveryReplay(f.ctx, "", sk.ID, now)
	wantErr(t, "DeliveryReplay(disabled subscription)", err, store.ErrDisabled)
	if st := f.state(sk.ID); st != core.DeliverySkipped {
		t.Fatalf("refused replay changed state to %s", st)
	}
	d2.State = core.SubActive
	noErr(t, "enable", s.SubscriptionUpdate(f.ctx, d2))
	got, err := s.DeliveryReplay(f.ctx, "", sk.ID, now)
	noErr(t, "DeliveryReplay(skipped)", err)
	if got.State != core.DeliveryPending || !got.NextAttemptAt.Equal(now) {
		t.Fatalf("replayed skipped delivery: %+v", got)
	}

	// Skipped by a delete: the subscription is gone, nothing to replay to.
	del := f.sub(a.ID, "c.example:443")
	dd := f.deliver(del, at(0))
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, del.ID, now))
	_, err = s.DeliveryReplay(f.ctx, a.ID, dd.ID, now)
	wantErr(t, "DeliveryReplay(deleted subscription)", err, store.ErrConflict)
	if st := f.state(dd.ID); st != core.DeliverySkipped {
		t.Fatalf("refused replay changed state to %s", st)
	}
}

func testDeliveryList(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub := f.sub(a.ID, "a.example:443")
	noise := f.sub(a.ID, "a.example:443")
	// Ten deliveries a minute apart, alternating types; the odd ones delivered.
	var all []core.Delivery
	for i := 0; i < 10; i++ {
		typ := "payment.succeeded"
		if i%2 == 1 {
			typ = "invoice.paid"
		}
		e := ev(a.ID, typ, func(e *core.Event) { e.CreatedAt = at(time.Duration(i) * time.Minute) })
		d := f.insert(item(e, at(0), sub, noise))[0].Deliveries[0]
		if i%2 == 1 {
			f.record(d, 1, 200, core.DeliveryDelivered, time.Time{})
		}
		all = append(all, d)
	}
	newest := func(idx ...int) []string {
		var out []string
		for i := len(idx) - 1; i >= 0; i-- {
			out = append(out, all[idx[i]].ID)
		}
		return out
	}
	list := func(p store.DeliveryListParams) []string {
		t.Helper()
		p.SubscriptionID = sub.ID
		page, err := s.DeliveryList(f.ctx, p)
		noErr(t, "DeliveryList", err)
		if page.NextCursor != "" {
			t.Fatalf("unexpected second page")
		}
		return ids(page.Data, dlvID)
	}
	same(t, "everything", list(store.DeliveryListParams{}), newest(0, 1, 2, 3, 4, 5, 6, 7, 8, 9))
	same(t, "delivered", list(store.DeliveryListParams{State: core.DeliveryDelivered}), newest(1, 3, 5, 7, 9))
	same(t, "pending payments", list(store.DeliveryListParams{State: core.DeliveryPending, EventType: "payment.succeeded"}), newest(0, 2, 4, 6, 8))
	same(t, "invoices", list(store.DeliveryListParams{EventType: "invoice.paid"}), newest(1, 3, 5, 7, 9))
	same(t, "since <= t < until", list(store.DeliveryListParams{Since: at(2 * time.Minute), Until: at(5 * time.Minute)}), newest(2, 3, 4))
	same(t, "since", list(store.DeliveryListParams{Since: at(8 * time.Minute)}), newest(8, 9))
	same(t, "until", list(store.DeliveryListParams{Until: at(time.Minute)}), newest(0))
	same(t, "own tenant", list(store.DeliveryListParams{TenantID: a.ID, State: core.DeliveryFailed}), []string(nil))
	if got := list(store.DeliveryListParams{TenantID: b.ID}); len(got) != 0 {
		t.Fatalf("other tenant lists %v", got)
	}

	// Newest first across pages, with filters held.
	var got []string
	var sizes []int
	p := store.DeliveryListParams{SubscriptionID: sub.ID, TenantID: a.ID, State: core.DeliveryPending, Limit: 2}
	for {
		page, err := s.DeliveryList(f.ctx, p)
		noErr(t, "DeliveryList", err)
		got = append(got, ids(page.Data, dlvID)...)
		sizes = append(sizes, len(page.Data))
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	same(t, "paged pending", got, newest(0, 2, 4, 6, 8))
	same(t, "page sizes", sizes, []int{2, 2, 1})

	// The full record comes back, not just the ID.
	page, err := s.DeliveryList(f.ctx, store.DeliveryListParams{SubscriptionID: sub.ID, Limit: 1, Cursor: all[1].ID})
	noErr(t, "DeliveryList", err)
	same(t, "listed delivery", page.Data, []core.Delivery{all[0]})
}
