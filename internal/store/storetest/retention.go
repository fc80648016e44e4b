package storetest

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// testPurge: finished events older than the cutoff go, with their
// deliveries and attempts, and are counted per subscription and day; an
// event with a pending delivery stays whole however old; newer ones stay.
func testPurge(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	s1 := f.sub(a.ID, "h1.example:443")
	s2 := f.sub(a.ID, "h2.example:443")
	day := time.Date(t0.Year(), t0.Month(), t0.Day(), 0, 0, 0, 0, time.UTC)
	old := func(created time.Time, subs ...core.Subscription) store.EventInsertResult {
		t.Helper()
		if subs == nil {
			subs = []core.Subscription{s1, s2}
		}
		e := ev(a.ID, "t")
		e.CreatedAt = created
		in := item(e, created, subs...)
		for i := range in.Deliveries {
			in.Deliveries[i].CreatedAt, in.Deliveries[i].UpdatedAt = created, created
		}
		return f.insert(in)[0]
	}
	// Two events on t0's day and one the day before, all finished: one
	// delivered after two attempts, one failed, one skipped by hand below.
	done := old(t0)
	f.record(done.Deliveries[0], 1, 500, core.DeliveryPending, at(time.Minute))
	f.record(done.Deliveries[0], 2, 200, core.DeliveryDelivered, time.Time{})
	f.record(done.Deliveries[1], 1, 400, core.DeliveryFailed, time.Time{})
	earlier := old(t0.Add(-24 * time.Hour))
	f.record(earlier.Deliveries[0], 1, 200, core.DeliveryDelivered, time.Time{})
	f.record(earlier.Deliveries[1], 1, 200, core.DeliveryDelivered, time.Time{})
	skippedEv := old(t0.Add(time.Second))
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, s2.ID, t0)) // skips s2's pending
	f.record(skippedEv.Deliveries[0], 1, 200, core.DeliveryDelivered, time.Time{})
	// Old but one delivery still pending: kept whole.
	waiting := old(t0.Add(2 * time.Second))
	f.record(waiting.Deliveries[1], 1, 200, core.DeliveryDelivered, time.Time{})
	// After the cutoff: kept.
	recent := old(t0.Add(time.Hour))
	f.record(recent.Deliveries[0], 1, 200, core.DeliveryDelivered, time.Time{})

	cutoff := t0.Add(time.Minute)
	purge := func(after store.PurgeCursor, limit int, want store.PurgeResult) store.PurgeResult {
		t.Helper()
		got, err := s.Purge(f.ctx, cutoff, after, limit)
		noErr(t, "Purge", err)
		same(t, "Purge", got, want)
		return got
	}
	// Oldest first, limit events looked at per call, then on from the cursor.
	r := purge(store.PurgeCursor{}, 2, store.PurgeResult{Removed: 2, Looked: 2,
		Next: store.PurgeCursor{CreatedAt: t0, EventID: done.EventID}})
	purge(r.Next, 10, store.PurgeResult{Removed: 1, Looked: 2, // the pending one's event stays
		Next: store.PurgeCursor{CreatedAt: t0.Add(2 * time.Second), EventID: waiting.EventID}})
	// A new pass looks at what stayed and removes nothing.
	purge(store.PurgeCursor{}, 10, store.PurgeResult{Looked: 1,
		Next: store.PurgeCursor{CreatedAt: t0.Add(2 * time.Second), EventID: waiting.EventID}})

	for _, gone := range []store.EventInsertResult{done, earlier, skippedEv} {
		_, _, err := s.EventGet(f.ctx, "", gone.EventID)
		wantErr(t, "EventGet of a purged event", err, store.ErrNotFound)
		for _, d := range gone.Deliveries {
			_, _, err := s.DeliveryGet(f.ctx, "", d.ID)
			wantErr(t, "DeliveryGet of a purged delivery", err, store.ErrNotFound)
		}
	}
	for _, kept := range []store.EventInsertResult{waiting, recent} {
		_, ds, err := s.EventGet(f.ctx, "", kept.EventID)
		if err != nil || len(ds) != 2 {
			t.Fatalf("EventGet of a kept event: %d deliveries, %v", len(ds), err)
		}
	}
	if _, as := f.getDelivery(waiting.Deliveries[1].ID); len(as) != 1 {
		t.Fatalf("a kept delivery has %d attempts, want 1", len(as))
	}
	// The skipped delivery's attempt may still have been in flight: its
	// result comes after the purge and must not fail.
	noErr(t, "a result for a purged delivery", s.DeliveryRecordResults(f.ctx, []store.AttemptResult{{
		Attempt: core.Attempt{DeliveryID: skippedEv.Deliveries[1].ID, N: 1, StartedAt: t0, StatusCode: 200},
		State:   core.DeliveryDelivered, Now: t0}}))

	counts := func(sub core.Subscription) []core.DailyCount {
		t.Helper()
		c, err := s.DailyCounts(f.ctx, sub.ID)
		noErr(t, "DailyCounts", err)
		return c
	}
	same(t, "s1's counts", counts(s1), []core.DailyCount{
		{SubscriptionID: s1.ID, Day: day.Add(-24 * time.Hour), Delivered: 1, Attempts: 1},
		{SubscriptionID: s1.ID, Day: day, Delivered: 2, Attempts: 3},
	})
	same(t, "s2's counts", counts(s2), []core.DailyCount{
		{SubscriptionID: s2.ID, Day: day.Add(-24 * time.Hour), Delivered: 1, Attempts: 1},
		{SubscriptionID: s2.ID, Day: day, Failed: 1, Skipped: 1, Attempts: 1},
	})
	// Counts add up across purges of the same day.
	more := old(t0.Add(3*time.Second), s1)
	f.record(more.Deliveries[0], 1, 200, core.DeliveryDelivered, time.Time{})
	if r, err := s.Purge(f.ctx, cutoff, store.PurgeCursor{}, 10); err != nil || r.Removed != 1 {
		t.Fatalf("Purge of one more: %+v, %v; want 1 removed", r, err)
	}
	if c := counts(s1); len(c) != 2 || c[1].Delivered != 3 || c[1].Attempts != 4 {
		t.Fatalf("s1's counts after another purge of the same day: %+v", c)
	}
	if _, err := s.DailyCounts(f.ctx, "sub_unknown"); err != nil {
		t.Fatal(err)
	}
	if c := counts(core.Subscription{ID: "sub_unknown"}); len(c) != 0 {
		t.Fatalf("an unknown subscription has counts %+v", c)
	}
}

// testPurgeConcurrent: callers purging at once (nodes sharing a database)
// remove each event once and count each delivery once.
func testPurgeConcurrent(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "h1.example:443")
	const events = 120
	var rs []store.AttemptResult
	for range events / 30 {
		batch := make([]store.EventInsert, 30)
		for i := range batch {
			batch[i] = item(ev(a.ID, "t"), t0, sub)
		}
		for _, r := range f.insert(batch...) {
			rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: r.Deliveries[0].ID, N: 1,
				StartedAt: t0, StatusCode: 200}, State: core.DeliveryDelivered, Now: t0})
		}
	}
	noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))

	removed := make(chan int, 4)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			total := 0
			var at store.PurgeCursor
			for {
				r, err := s.Purge(f.ctx, t0.Add(time.Second), at, 7)
				if err != nil {
					errs <- err
					return
				}
				total += r.Removed
				if r.Looked < 7 {
					removed <- total
					return
				}
				at = r.Next
			}
		}()
	}
	total := 0
	for range 4 {
		select {
		case n := <-removed:
			total += n
		case err := <-errs:
			t.Fatalf("Purge: %v", err)
		}
	}
	if total != events {
		t.Fatalf("purgers removed %d events together, want %d", total, events)
	}
	c, err := s.DailyCounts(f.ctx, sub.ID)
	noErr(t, "DailyCounts", err)
	if len(c) != 1 || c[0].Delivered != events || c[0].Attempts != events {
		t.Fatalf("counts %+v, want one day with %d delivered in %d attempts", c, events, events)
	}
	// The hourly counts too: t0's hour holds each delivery once.
	hour := t0.Truncate(time.Hour)
	b, err := s.DeliveryBuckets(f.ctx, store.DeliveryBucketsParams{SubscriptionID: sub.ID,
		Since: hour.Add(-time.Hour), Until: hour.Add(2 * time.Hour), Width: store.BucketHour})
	noErr(t, "DeliveryBuckets", err)
	same(t, "hour buckets after purgers at once", b, []store.DeliveryBucket{{Start: hour.Add(-time.Hour)},
		{Start: hour, Delivered: events, Attempts: events}, {Start: hour.Add(time.Hour)}})
}
