package storetest

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

func testIdempotentIngest(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	subA := f.sub(a.ID, "a.example:443")
	subB := f.sub(b.ID, "b.example:443")

	first := ev(a.ID, "payment.succeeded", key("k1"))
	r1 := f.insert(item(first, at(0), subA))
	if r1[0].Duplicate || r1[0].EventID != first.ID || len(r1[0].Deliveries) != 1 {
		t.Fatalf("first insert: %+v", r1[0])
	}

	// Same key in a later batch: nothing new, the first ID back.
	again := ev(a.ID, "payment.succeeded", key("k1"))
	r2 := f.insert(item(again, at(0), subA))
	if !r2[0].Duplicate || r2[0].EventID != first.ID || r2[0].Deliveries != nil {
		t.Fatalf("repeat across batches: %+v; want duplicate of %s", r2[0], first.ID)
	}
	_, _, err := s.EventGet(f.ctx, "", again.ID)
	wantErr(t, "EventGet(duplicate's own ID)", err, store.ErrNotFound)

	// Same key twice within one batch, between other events: the second is a
	// duplicate of the first.
	x, y := ev(a.ID, "payment.succeeded", key("k2")), ev(a.ID, "payment.succeeded", key("k2"))
	plain1, plain2 := ev(a.ID, "payment.succeeded"), ev(a.ID, "payment.succeeded") // no key: never duplicates
	r3 := f.insert(item(x, at(0), subA), item(plain1, at(0), subA), item(y, at(0), subA), item(plain2, at(0), subA))
	if r3[0].Duplicate || r3[0].EventID != x.ID {
		t.Fatalf("first of the batch: %+v", r3[0])
	}
	if !r3[2].Duplicate || r3[2].EventID != x.ID || r3[2].Deliveries != nil {
		t.Fatalf("repeat within a batch: %+v; want duplicate of %s", r3[2], x.ID)
	}
	if r3[1].Duplicate || r3[3].Duplicate || r3[1].EventID != plain1.ID || r3[3].EventID != plain2.ID {
		t.Fatalf("events without a key: %+v, %+v", r3[1], r3[3])
	}

	// Deliveries of subA: first, x, plain1, plain2. No extras.
	got := f.all(subA.ID)
	var evIDs []string
	for _, d := range got {
		evIDs = append(evIDs, d.EventID)
	}
	same(t, "events with deliveries (newest first)", evIDs, []string{plain2.ID, plain1.ID, x.ID, first.ID})

	// The same key in another tenant is another event.
	other := ev(b.ID, "payment.succeeded", key("k1"))
	r4 := f.insert(item(other, at(0), subB))
	if r4[0].Duplicate || r4[0].EventID != other.ID {
		t.Fatalf("same key, other tenant: %+v", r4[0])
	}
	_, ds, err := s.EventGet(f.ctx, b.ID, other.ID)
	noErr(t, "EventGet(other tenant's event)", err)
	if len(ds) != 1 {
		t.Fatalf("other tenant's event has %d deliveries", len(ds))
	}
}

// A batch is one transaction: if its last item fails, none of its events or
// deliveries exist, and its idempotency keys stay free.
func testOutboxAllOrNothing(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "a.example:443", ordered)
	ghost := core.Subscription{ID: "sub_doesnotexist", TenantID: a.ID, Host: "a.example:443"}

	e1 := ev(a.ID, "payment.succeeded", key("k1"), orderKey("o"))
	e2 := ev(a.ID, "payment.succeeded")
	e3 := ev(a.ID, "payment.succeeded")
	batch := []store.EventInsert{item(e1, at(0), sub), item(e2, at(0), sub), item(e3, at(0), sub, ghost)}
	res, err := s.EventInsertBatch(f.ctx, batch)
	if err == nil {
		t.Fatalf("a delivery to a missing subscription was accepted: %+v", res)
	}
	for _, in := range batch {
		_, _, err := s.EventGet(f.ctx, "", in.Event.ID)
		wantErr(t, "EventGet after a failed batch", err, store.ErrNotFound)
		for _, d := range in.Deliveries {
			_, _, err := s.DeliveryGet(f.ctx, "", d.ID)
			wantErr(t, "DeliveryGet after a failed batch", err, store.ErrNotFound)
		}
	}
	if got := f.all(sub.ID); len(got) != 0 {
		t.Fatalf("subscription has %d deliveries after a failed batch", len(got))
	}
	jobs, _, err := s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: sub.ID, Now: at(time.Hour), Limit: 10})
	noErr(t, "DeliveryDue", err)
	if len(jobs) != 0 {
		t.Fatalf("due jobs after a failed batch: %v", ids(jobs, jobID))
	}

	// The key was not consumed and the sequence was not advanced.
	retry := ev(a.ID, "payment.succeeded", key("k1"), orderKey("o"))
	r := f.insert(item(retry, at(0), sub))
	if r[0].Duplicate || r[0].EventID != retry.ID {
		t.Fatalf("retry after a failed batch: %+v", r[0])
	}
	if seq := r[0].Deliveries[0].Sequence; seq != 1 {
		t.Fatalf("sequence after a failed batch = %d, want 1", seq)
	}

	// A repeated event ID fails the batch as well (nothing of it written).
	e4 := ev(a.ID, "payment.succeeded")
	reused := ev(a.ID, "payment.succeeded", func(e *core.Event) { e.ID = retry.ID })
	_, err = s.EventInsertBatch(f.ctx, []store.EventInsert{item(e4, at(0), sub), item(reused, at(0), sub)})
	if err == nil {
		t.Fatal("a batch reusing an event ID was accepted")
	}
	_, _, err = s.EventGet(f.ctx, "", e4.ID)
	wantErr(t, "EventGet after a failed batch", err, store.ErrNotFound)
}

func testOrderedSequence(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	o1 := f.sub(a.ID, "a.example:443", ordered)
	o2 := f.sub(a.ID, "b.example:443", ordered)
	plain := f.sub(a.ID, "c.example:443")

	seqs := func(r store.EventInsertResult) []int64 {
		out := make([]int64, len(r.Deliveries))
		for i, d := range r.Deliveries {
			out[i] = d.Sequence
		}
		return out
	}
	subs := []core.Subscription{o1, plain, o2}
	batch := []store.EventInsert{
		item(ev(a.ID, "t", orderKey("a")), at(0), subs...),
		item(ev(a.ID, "t", orderKey("b")), at(0), subs...),
		item(ev(a.ID, "t", orderKey("a")), at(0), subs...),
		item(ev(a.ID, "t"), at(0), subs...), // no ordering key: no sequence
	}
	// o2 joins the key "a" line late: its own count starts at 1.
	batch = append(batch, item(ev(a.ID, "t", orderKey("a")), at(0), o1))
	res := f.insert(batch...)
	want := [][]int64{{1, 0, 1}, {1, 0, 1}, {2, 0, 2}, {0, 0, 0}, {3}}
	for i, r := range res {
		same(t, "sequences of item", seqs(r), want[i])
	}
	// The count carries on across batches, and duplicates take no number.
	dupKey := ev(a.ID, "t", orderKey("a"), key("once"))
	res = f.insert(item(dupKey, at(0), o1, o2), item(ev(a.ID, "t", orderKey("a"), key("once")), at(0), o1, o2))
	same(t, "next batch", seqs(res[0]), []int64{4, 3})
	res = f.insert(item(ev(a.ID, "t", orderKey("a")), at(0), o1, o2))
	same(t, "after a duplicate", seqs(res[0]), []int64{5, 4})

	// What the store holds matches what it answered.
	_, ds, err := s.EventGet(f.ctx, a.ID, res[0].EventID)
	noErr(t, "EventGet", err)
	same(t, "stored deliveries", ds, res[0].Deliveries)
}

// The caller matched against a view of the subscriptions that may be
// behind: the store writes skipped what it was given pending for a
// subscription disabled or deleted by the commit, and says so.
func testIngestDecidesAtCommit(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	active, paused := f.sub(a.ID, "a.example:443"), f.sub(a.ID, "p.example:443")
	disabled, deleted := f.sub(a.ID, "d.example:443", ordered), f.sub(a.ID, "x.example:443")
	p := paused
	p.State, p.UpdatedAt = core.SubPaused, at(time.Minute)
	noErr(t, "pause", s.SubscriptionUpdate(f.ctx, p))
	d := disabled
	d.State, d.DisabledReason, d.UpdatedAt = core.SubDisabled, "410 Gone", at(time.Minute)
	noErr(t, "disable", s.SubscriptionUpdate(f.ctx, d))
	noErr(t, "delete", s.SubscriptionDelete(f.ctx, a.ID, deleted.ID, at(time.Minute)))

	e := ev(a.ID, "payment.succeeded", orderKey("k"))
	in := item(e, at(0), active, paused, disabled, deleted)
	shed := dlv(e, f.sub(a.ID, "s.example:443"), at(0))
	shed.State, shed.LastError = core.DeliverySkipped, "shed"
	in.Deliveries = append(in.Deliveries, shed)
	res := f.insert(in, item(ev(a.ID, "payment.succeeded", orderKey("k")), at(0), disabled))

	want := append([]core.Delivery(nil), in.Deliveries...)
	want[2].State, want[2].LastError, want[2].Sequence = core.DeliverySkipped, store.SkipDisabled, 1
	want[3].State, want[3].LastError = core.DeliverySkipped, store.SkipDeleted
	same(t, "returned deliveries", res[0].Deliveries, want)
	_, stored, err := s.EventGet(f.ctx, a.ID, e.ID)
	noErr(t, "EventGet", err)
	same(t, "stored deliveries", stored, want)
	// A skipped delivery of an ordered subscription keeps its place in line.
	if got := res[1].Deliveries[0]; got.State != core.DeliverySkipped || got.Sequence != 2 {
		t.Fatalf("second delivery to the disabled ordered subscription: %s, sequence %d; want skipped, 2", got.State, got.Sequence)
	}
	// Replayable like any skipped delivery once the subscription is back.
	d.State, d.DisabledReason, d.UpdatedAt = core.SubActive, "", at(2*time.Minute)
	noErr(t, "resume", s.SubscriptionUpdate(f.ctx, d))
	r, err := s.DeliveryReplay(f.ctx, a.ID, want[2].ID, at(time.Hour))
	noErr(t, "DeliveryReplay", err)
	if r.State != core.DeliveryPending {
		t.Fatalf("replayed delivery is %s, want pending", r.State)
	}
}

func testEventGet(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	s1, s2 := f.sub(a.ID, "a.example:443"), f.sub(a.ID, "b.example:8080")
	e := ev(a.ID, "invoice.paid", key("idem"), orderKey("cust_1"), func(e *core.Event) {
		e.Payload = []byte("{\"b\": 2,  \"a\": [1, 2.50, \"\\u00e9\"]}\n") // kept byte for byte
		e.CreatedAt = at(time.Second)
	})
	in := item(e, at(5*time.Second), s1, s2)
	in.Deliveries[1].Shard = 17
	res := f.insert(in)
	same(t, "returned deliveries", res[0].Deliveries, in.Deliveries)

	got, ds, err := s.EventGet(f.ctx, a.ID, e.ID)
	noErr(t, "EventGet", err)
	same(t, "event", got, e)
	same(t, "deliveries, oldest first", ds, in.Deliveries)
	_, _, err = s.EventGet(f.ctx, "", e.ID)
	noErr(t, "EventGet(any tenant)", err)
	_, _, err = s.EventGet(f.ctx, b.ID, e.ID)
	wantErr(t, "EventGet(other tenant)", err, store.ErrNotFound)
	_, _, err = s.EventGet(f.ctx, a.ID, "evt_missing")
	wantErr(t, "EventGet(missing)", err, store.ErrNotFound)

	// An event no subscription matched is stored with no deliveries.
	lone := ev(a.ID, "nobody.cares")
	f.insert(store.EventInsert{Event: lone})
	_, ds, err = s.EventGet(f.ctx, a.ID, lone.ID)
	noErr(t, "EventGet(no deliveries)", err)
	if len(ds) != 0 {
		t.Fatalf("lone event has deliveries %v", ids(ds, dlvID))
	}
}

// Many writers at once: every batch lands, none is lost or doubled.
func testConcurrentIngest(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "a.example:443", ordered)
	const writers, batches, per = 4, 10, 5
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			for i := 0; i < batches; i++ {
				var batch []store.EventInsert
				for j := 0; j < per; j++ {
					batch = append(batch, item(ev(a.ID, "t", orderKey("k")), at(0), sub))
				}
				if _, err := s.EventInsertBatch(f.ctx, batch); err != nil {
					errs <- err
					return
				}
				// Readers run beside the writers.
				if _, _, err := s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: sub.ID, Now: at(0), Limit: 5}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		noErr(t, "concurrent writer", <-errs)
	}
	got := f.all(sub.ID)
	if len(got) != writers*batches*per {
		t.Fatalf("%d deliveries, want %d", len(got), writers*batches*per)
	}
	// Sequences on one key are 1..n with no gap or repeat.
	seen := map[int64]bool{}
	for _, d := range got {
		seen[d.Sequence] = true
	}
	for i := int64(1); i <= writers*batches*per; i++ {
		if !seen[i] {
			t.Fatalf("sequence %d missing", i)
		}
	}
}
