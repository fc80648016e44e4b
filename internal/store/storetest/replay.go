package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

// job returns an unsaved running job of sub since an hour before t0, with
// the default states and the top rate.
func job(sub core.Subscription) core.ReplayJob {
	return core.ReplayJob{ID: core.NewID("rpl"), TenantID: sub.TenantID, SubscriptionID: sub.ID, Since: at(-time.Hour),
		EventTypes: []string{}, States: core.ReplayStatesDefault, Rate: core.ReplayRateMax, State: core.ReplayRunning,
		CreatedAt: at(0), UpdatedAt: at(0)}
}

// failedN writes n events of sub, each with one delivery failed after one
// attempt, in two transactions.
func (f *fx) failedN(sub core.Subscription, n int) []core.Delivery {
	f.t.Helper()
	batch := make([]store.EventInsert, n)
	for i := range batch {
		batch[i] = item(ev(sub.TenantID, "payment.succeeded"), at(0), sub)
	}
	var ds []core.Delivery
	var rs []store.AttemptResult
	for _, r := range f.insert(batch...) {
		d := r.Deliveries[0]
		ds = append(ds, d)
		rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: at(time.Second),
			StatusCode: 400}, State: core.DeliveryFailed, Now: at(time.Second)})
	}
	noErr(f.t, "DeliveryRecordResults", f.s.DeliveryRecordResults(f.ctx, rs))
	return ds
}

// countState counts a subscription's deliveries in one state.
func (f *fx) countState(subID string, state core.DeliveryState) int {
	f.t.Helper()
	n := 0
	for _, d := range f.all(subID) {
		if d.State == state {
			n++
		}
	}
	return n
}

func testReplayJobs(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub := f.sub(a.ID, "replay.example:443")
	var failed []core.Delivery
	for i := range 5 {
		d := f.deliver(sub, at(0))
		if i == 2 {
			f.record(d, 1, 200, core.DeliveryDelivered, time.Time{}) // delivered: not replayed by default
			continue
		}
		f.record(d, 1, 400, core.DeliveryFailed, time.Time{})
		failed = append(failed, d)
	}
	other := f.deliver(sub, at(0)) // another type, failed: filtered out below
	f.record(other, 1, 400, core.DeliveryFailed, time.Time{})

	j := job(sub)
	j.EventTypes = []string{"payment.succeeded"}
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j))
	if _, err := s.ReplayJobGet(f.ctx, b.ID, j.ID); err != store.ErrNotFound {
		t.Fatalf("other tenant: %v, want ErrNotFound", err)
	}
	running, err := s.ReplayJobsRunning(f.ctx)
	noErr(t, "ReplayJobsRunning", err)
	same(t, "running jobs", running, []core.ReplayJob{j})
	// Two at a time: 2, 2, then the last one (and done).
	got, put, err := s.ReplayJobStep(f.ctx, j.ID, 2, at(time.Hour))
	noErr(t, "ReplayJobStep", err)
	if got.Replayed != 2 || got.State != core.ReplayRunning || got.Cursor != failed[1].ID {
		t.Fatalf("after one step: %+v", got)
	}
	same(t, "IDs put back", put, []string{failed[0].ID, failed[1].ID})
	if d, _ := f.getDelivery(failed[0].ID); d.State != core.DeliveryPending || d.RoundStart != 1 || !d.NextAttemptAt.Equal(at(time.Hour)) {
		t.Fatalf("replayed delivery %+v", d)
	}
	for range 2 {
		got, _, err = s.ReplayJobStep(f.ctx, j.ID, 2, at(time.Hour))
		noErr(t, "ReplayJobStep", err)
	}
	// "other" has the same type from the fixture, so it is replayed too:
	// 4 failed + other = 5, and the delivered one stays delivered.
	if got.State != core.ReplayDone || got.Replayed != 5 {
		t.Fatalf("final: %+v", got)
	}
	if d, _ := f.getDelivery(other.ID); d.State != core.DeliveryPending {
		t.Fatalf("matching failed delivery not replayed: %s", d.State)
	}
	// A finished job takes no more steps and writes nothing.
	after, _, err := s.ReplayJobStep(f.ctx, j.ID, 2, at(2*time.Hour))
	wantErr(t, "ReplayJobStep(done)", err, store.ErrConflict)
	if after.State != core.ReplayDone || after.Replayed != 5 {
		t.Fatalf("a step of a done job answers %+v, want it as it stands", after)
	}
	if got, _ := s.ReplayJobGet(f.ctx, "", j.ID); !got.UpdatedAt.Equal(at(time.Hour)) {
		t.Fatalf("a step of a done job wrote: %+v", got)
	}
	running, err = s.ReplayJobsRunning(f.ctx)
	noErr(t, "ReplayJobsRunning", err)
	if len(running) != 0 {
		t.Fatalf("running after done: %+v", running)
	}
	// Disabled while it runs: the next step ends it and puts nothing back.
	dis := f.sub(a.ID, "replay-disabled.example:443")
	lost := f.deliver(dis, at(0))
	f.record(lost, 1, 400, core.DeliveryFailed, time.Time{})
	jd := job(dis)
	noErr(t, "ReplayJobCreate(to disable)", s.ReplayJobCreate(f.ctx, jd))
	dis.State = core.SubDisabled
	noErr(t, "disable", s.SubscriptionUpdate(f.ctx, dis))
	got, put, err = s.ReplayJobStep(f.ctx, jd.ID, 10, at(time.Hour))
	noErr(t, "ReplayJobStep(disabled)", err)
	if got.State != core.ReplayDone || got.Replayed != 0 || len(put) != 0 || f.state(lost.ID) != core.DeliveryFailed {
		t.Fatalf("a step after the disable: %+v, put back %v, the delivery %s; want done, nothing put back, failed",
			got, put, f.state(lost.ID))
	}
	// A type filter that matches nothing replays nothing.
	j2 := job(sub)
	j2.EventTypes = []string{"invoice.paid"}
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j2))
	got, _, err = s.ReplayJobStep(f.ctx, j2.ID, 10, at(time.Hour))
	noErr(t, "ReplayJobStep", err)
	if got.State != core.ReplayDone || got.Replayed != 0 {
		t.Fatalf("filtered job: %+v", got)
	}
	// Every field reads back as written.
	j3 := job(sub)
	j3.Until, j3.EventTypes = at(time.Minute), []string{"a.b", "c.d"}
	j3.States, j3.Rate = []core.DeliveryState{core.DeliveryDelivered, core.DeliveryFailed}, 2.5
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j3))
	got, err = s.ReplayJobGet(f.ctx, a.ID, j3.ID)
	noErr(t, "ReplayJobGet", err)
	same(t, "job read back", got, j3)
	wantErr(t, "ReplayJobStep(unknown)", func() error { _, _, err := s.ReplayJobStep(f.ctx, "rpl_nope", 1, at(0)); return err }(),
		store.ErrNotFound)
}

// A job puts back only the states it names: delivered ones too when asked
// (a new round, attempts kept), pending ones never.
func testReplayJobStates(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "states.example:443")
	delivered, failed := f.deliver(sub, at(0)), f.deliver(sub, at(0))
	f.record(delivered, 1, 200, core.DeliveryDelivered, time.Time{})
	f.record(failed, 1, 400, core.DeliveryFailed, time.Time{})
	e := ev(a.ID, "payment.succeeded")
	sk := dlv(e, sub, time.Time{})
	sk.State, sk.LastError = core.DeliverySkipped, "subscription disabled"
	skipped := f.insert(store.EventInsert{Event: e, Deliveries: []core.Delivery{sk}})[0].Deliveries[0]
	pending := f.deliver(sub, at(5*time.Hour))

	j := job(sub)
	j.States = []core.DeliveryState{core.DeliveryDelivered}
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j))
	got, _, err := s.ReplayJobStep(f.ctx, j.ID, 10, at(time.Hour))
	noErr(t, "ReplayJobStep", err)
	if got.Replayed != 1 || got.State != core.ReplayDone {
		t.Fatalf("delivered-only job: %+v, want 1 replayed and done", got)
	}
	d, attempts := f.getDelivery(delivered.ID)
	if d.State != core.DeliveryPending || d.AttemptCount != 1 || d.RoundStart != 1 || !d.NextAttemptAt.Equal(at(time.Hour)) || len(attempts) != 1 {
		t.Fatalf("replayed delivered delivery %+v with %d attempts; want pending in a new round, its attempt kept", d, len(attempts))
	}
	if st1, st2 := f.state(failed.ID), f.state(skipped.ID); st1 != core.DeliveryFailed || st2 != core.DeliverySkipped {
		t.Fatalf("a delivered-only job moved failed/skipped: %s, %s", st1, st2)
	}

	j2 := job(sub) // failed and skipped
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j2))
	got, _, err = s.ReplayJobStep(f.ctx, j2.ID, 10, at(2*time.Hour))
	noErr(t, "ReplayJobStep", err)
	if got.Replayed != 2 {
		t.Fatalf("default job replayed %d, want the failed and the skipped one", got.Replayed)
	}
	for _, id := range []string{failed.ID, skipped.ID} {
		if st := f.state(id); st != core.DeliveryPending {
			t.Fatalf("%s is %s after the default job, want pending", id, st)
		}
	}
	// Neither job touched what was pending, nor what it had put back.
	if d, _ := f.getDelivery(pending.ID); !d.NextAttemptAt.Equal(at(5 * time.Hour)) {
		t.Fatalf("a pending delivery was moved: due %s", d.NextAttemptAt)
	}
	if d, _ := f.getDelivery(delivered.ID); !d.NextAttemptAt.Equal(at(time.Hour)) {
		t.Fatalf("the default job moved the delivery put back before: due %s", d.NextAttemptAt)
	}
}

func testReplayJobCancel(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub := f.sub(a.ID, "cancel.example:443")
	f.failedN(sub, 5)
	j := job(sub)
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j))
	_, _, err := s.ReplayJobStep(f.ctx, j.ID, 2, at(time.Hour))
	noErr(t, "ReplayJobStep", err)

	_, err = s.ReplayJobCancel(f.ctx, b.ID, j.ID, at(2*time.Hour))
	wantErr(t, "ReplayJobCancel(other tenant)", err, store.ErrNotFound)
	_, err = s.ReplayJobCancel(f.ctx, "", "rpl_nope", at(2*time.Hour))
	wantErr(t, "ReplayJobCancel(unknown)", err, store.ErrNotFound)
	got, err := s.ReplayJobCancel(f.ctx, a.ID, j.ID, at(2*time.Hour))
	noErr(t, "ReplayJobCancel", err)
	if got.State != core.ReplayCancelled || got.Replayed != 2 || !got.CancelledAt.Equal(at(2*time.Hour)) || !got.UpdatedAt.Equal(at(2*time.Hour)) {
		t.Fatalf("cancelled job %+v, want cancelled at +2h with its 2 replayed", got)
	}
	read, err := s.ReplayJobGet(f.ctx, "", j.ID)
	noErr(t, "ReplayJobGet", err)
	same(t, "cancelled job read back", read, got)
	running, err := s.ReplayJobsRunning(f.ctx)
	noErr(t, "ReplayJobsRunning", err)
	if len(running) != 0 {
		t.Fatalf("a cancelled job is listed running: %+v", running)
	}
	// No step after the cancel; what it put back stays pending.
	_, _, err = s.ReplayJobStep(f.ctx, j.ID, 2, at(3*time.Hour))
	wantErr(t, "ReplayJobStep(cancelled)", err, store.ErrConflict)
	if p, fl := f.countState(sub.ID, core.DeliveryPending), f.countState(sub.ID, core.DeliveryFailed); p != 2 || fl != 3 {
		t.Fatalf("after the cancel: %d pending, %d failed; want 2 and 3", p, fl)
	}
	if read, _ := s.ReplayJobGet(f.ctx, "", j.ID); read.Replayed != 2 || read.State != core.ReplayCancelled {
		t.Fatalf("a step after the cancel changed the job: %+v", read)
	}
	again, err := s.ReplayJobCancel(f.ctx, "", j.ID, at(4*time.Hour))
	wantErr(t, "ReplayJobCancel(again)", err, store.ErrConflict)
	if again.State != core.ReplayCancelled || !again.CancelledAt.Equal(at(2*time.Hour)) {
		t.Fatalf("cancelling again answers %+v, want the job as it stands", again)
	}

	// A finished job cannot be cancelled: it says so and stays done.
	done := job(f.sub(a.ID, "done.example:443"))
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, done))
	_, _, err = s.ReplayJobStep(f.ctx, done.ID, 10, at(time.Hour))
	noErr(t, "ReplayJobStep", err)
	got, err = s.ReplayJobCancel(f.ctx, "", done.ID, at(2*time.Hour))
	wantErr(t, "ReplayJobCancel(done)", err, store.ErrConflict)
	if got.State != core.ReplayDone || !got.CancelledAt.IsZero() {
		t.Fatalf("cancelling a done job answers %+v", got)
	}

	// A deleted subscription's job is gone to the API.
	gone := f.sub(a.ID, "gone.example:443")
	gj := job(gone)
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, gj))
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, "", gone.ID, at(time.Minute)))
	_, err = s.ReplayJobCancel(f.ctx, "", gj.ID, at(2*time.Hour))
	wantErr(t, "ReplayJobCancel(deleted subscription)", err, store.ErrNotFound)
}

// Steps racing a cancel: none commits after it. The count the cancel
// answered is the job's for good and is what was put back.
func testReplayJobCancelRacesSteps(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "race.example:443")
	const n = 600
	f.failedN(sub, n)
	j := job(sub)
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j))
	put := 0 // deliveries the steps said they put back
	for range 10 {
		_, ids, err := s.ReplayJobStep(f.ctx, j.ID, 2, at(time.Hour))
		noErr(t, "ReplayJobStep", err)
		put += len(ids)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n { // bounded: at most every delivery, one at a time
				after, ids, err := s.ReplayJobStep(f.ctx, j.ID, 2, at(time.Hour))
				mu.Lock()
				put += len(ids)
				mu.Unlock()
				switch {
				case errors.Is(err, store.ErrConflict):
					return
				case err != nil:
					t.Errorf("ReplayJobStep: %v", err)
					return
				case after.State == core.ReplayDone:
					t.Errorf("the job finished before the cancel: make it longer")
					return
				}
			}
			t.Errorf("a stepper never saw the cancel")
		}()
	}
	c, err := s.ReplayJobCancel(f.ctx, "", j.ID, at(2*time.Hour))
	wg.Wait()
	noErr(t, "ReplayJobCancel", err)
	got, err := s.ReplayJobGet(f.ctx, "", j.ID)
	noErr(t, "ReplayJobGet", err)
	pending := f.countState(sub.ID, core.DeliveryPending)
	if got.State != core.ReplayCancelled || got.Replayed != c.Replayed || pending != c.Replayed || put != c.Replayed {
		t.Fatalf("cancel answered %d replayed; the job now says %s with %d, %d deliveries are pending, the steps said %d",
			c.Replayed, got.State, got.Replayed, pending, put)
	}
}

// DeliveryUntried names the deliveries put back and not yet tried in
// their round: an attempt's result, or leaving pending, takes one out.
func testDeliveryUntried(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "untried.example:443")
	ds := f.failedN(sub, 4)
	j := job(sub)
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j))
	_, put, err := s.ReplayJobStep(f.ctx, j.ID, 10, at(time.Hour))
	noErr(t, "ReplayJobStep", err)
	if len(put) != 4 {
		t.Fatalf("put back %v, want the 4", put)
	}
	untried := func() []string {
		t.Helper()
		got, err := s.DeliveryUntried(f.ctx, append(slices.Clone(put), "dlv_nope"))
		noErr(t, "DeliveryUntried", err)
		slices.Sort(got)
		return got
	}
	same(t, "untried after the step", untried(), put)
	// Tried and to be retried (still pending), tried and delivered: out.
	noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, []store.AttemptResult{
		{Attempt: core.Attempt{DeliveryID: ds[0].ID, N: 2, StartedAt: at(time.Hour), StatusCode: 503},
			State: core.DeliveryPending, NextAttemptAt: at(2 * time.Hour), Now: at(time.Hour)},
		{Attempt: core.Attempt{DeliveryID: ds[1].ID, N: 2, StartedAt: at(time.Hour), StatusCode: 200},
			State: core.DeliveryDelivered, Now: at(time.Hour)},
	}))
	same(t, "untried after two results", untried(), []string{ds[2].ID, ds[3].ID})
	// Skipped without a try (the subscription disabled): out too.
	sub.State, sub.UpdatedAt = core.SubDisabled, at(time.Hour)
	noErr(t, "SubscriptionUpdate", s.SubscriptionUpdate(f.ctx, sub))
	if got := untried(); len(got) != 0 {
		t.Fatalf("untried after the disable: %v", got)
	}
}

func testReplayJobList(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub, other := f.sub(a.ID, "list.example:443"), f.sub(a.ID, "other.example:443")
	// One at a time (one runs per subscription), each cancelled before
	// the next: listed as they stand.
	var jobs []core.ReplayJob
	for range 5 {
		j := job(sub)
		noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j))
		c, err := s.ReplayJobCancel(f.ctx, "", j.ID, at(time.Minute))
		noErr(t, "ReplayJobCancel", err)
		jobs = append(jobs, c)
	}
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, job(other)))

	var got []core.ReplayJob
	var sizes []int
	p := store.ReplayJobListParams{TenantID: a.ID, SubscriptionID: sub.ID, Limit: 2}
	for range 10 {
		page, err := s.ReplayJobList(f.ctx, p)
		noErr(t, "ReplayJobList", err)
		got = append(got, page.Data...)
		sizes = append(sizes, len(page.Data))
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	want := []core.ReplayJob{jobs[4], jobs[3], jobs[2], jobs[1], jobs[0]}
	same(t, "listed jobs, newest first", got, want)
	same(t, "page sizes", sizes, []int{2, 2, 1})
	page, err := s.ReplayJobList(f.ctx, store.ReplayJobListParams{TenantID: b.ID, SubscriptionID: sub.ID})
	noErr(t, "ReplayJobList(other tenant)", err)
	if len(page.Data) != 0 {
		t.Fatalf("another tenant lists %d jobs", len(page.Data))
	}
}

// One job runs per subscription: a create while one runs is ErrConflict
// and writes nothing (nor its audit entry); once it is done or cancelled,
// or for another subscription, a create goes. Creates racing for one
// subscription (on a shared store: from several nodes) start one job.
func testReplayJobOneRunning(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub, other := f.sub(a.ID, "one.example:443"), f.sub(a.ID, "two.example:443")
	first := job(sub)
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, first))
	second := job(sub)
	ctx := audit.Record(f.ctx, audit.ReplaySubscription, sub.ID, nil)
	wantErr(t, "ReplayJobCreate while one runs", s.ReplayJobCreate(ctx, second), store.ErrConflict)
	_, err := s.ReplayJobGet(f.ctx, "", second.ID)
	wantErr(t, "the refused job", err, store.ErrNotFound)
	if got := f.audit(store.AuditListParams{TenantID: a.ID, Action: audit.ReplaySubscription}); len(got) != 0 {
		t.Fatalf("the refused job's audit entry was written: %+v", got)
	}
	noErr(t, "ReplayJobCreate of another subscription", s.ReplayJobCreate(f.ctx, job(other)))
	_, _, err = s.ReplayJobStep(f.ctx, first.ID, 10, at(time.Hour))
	noErr(t, "ReplayJobStep", err) // nothing to replay: done
	noErr(t, "ReplayJobCreate once it is done", s.ReplayJobCreate(f.ctx, second))
	_, err = s.ReplayJobCancel(f.ctx, "", second.ID, at(time.Hour))
	noErr(t, "ReplayJobCancel", err)

	const racers = 8
	errs := make(chan error, racers)
	var wg sync.WaitGroup
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.ReplayJobCreate(f.ctx, job(sub))
		}()
	}
	wg.Wait()
	close(errs)
	started := 0
	for err := range errs {
		switch {
		case err == nil:
			started++
		case !errors.Is(err, store.ErrConflict):
			t.Fatalf("a racing create: %v", err)
		}
	}
	running, err := s.ReplayJobsRunning(f.ctx)
	noErr(t, "ReplayJobsRunning", err)
	n := 0
	for _, j := range running {
		if j.SubscriptionID == sub.ID {
			n++
		}
	}
	if started != 1 || n != 1 {
		t.Fatalf("%d creates racing: %d started, %d running; want 1 and 1", racers, started, n)
	}
}
