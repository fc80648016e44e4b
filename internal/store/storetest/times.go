package storetest

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// The API takes times from 1970 to 9999. Every backend compares them in
// order, whatever it can hold: int64 nanoseconds wrapped 9999-12-31 round
// to 1816, so a list "since 9999" showed everything and a bulk replay
// from then resent deliveries outside its window.
var (
	farPast   = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	farFuture = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

func testFarTimes(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "far.example:443")
	d := f.deliver(sub, at(0))
	f.record(d, 1, 400, core.DeliveryFailed, time.Time{})

	list := func(since, until time.Time) int {
		t.Helper()
		page, err := s.DeliveryList(f.ctx, store.DeliveryListParams{SubscriptionID: sub.ID, Since: since, Until: until})
		noErr(t, "DeliveryList", err)
		return len(page.Data)
	}
	if n := list(farFuture, time.Time{}); n != 0 {
		t.Errorf("since 9999: %d deliveries, want 0", n)
	}
	if n := list(farPast, farFuture); n != 1 {
		t.Errorf("since 1970 until 9999: %d deliveries, want 1", n)
	}
	if n := list(time.Time{}, farPast); n != 0 {
		t.Errorf("until 1970: %d deliveries, want 0", n)
	}

	j := core.ReplayJob{ID: core.NewID("rpl"), TenantID: a.ID, SubscriptionID: sub.ID, Since: farFuture,
		EventTypes: []string{}, States: core.ReplayStatesDefault, Rate: 500, CreatedAt: at(0), UpdatedAt: at(0)}
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j))
	got, _, err := s.ReplayJobStep(f.ctx, j.ID, 10, at(time.Hour))
	noErr(t, "ReplayJobStep", err)
	if got.Replayed != 0 || got.State != core.ReplayDone {
		t.Errorf("replay since 9999: %+v, want done with nothing replayed", got)
	}
	if got.Since.Year() < 2262 {
		t.Errorf("replay job's since reads back as %s, want 9999 (or the latest time the store holds)", got.Since)
	}
	if st := f.state(d.ID); st != core.DeliveryFailed {
		t.Errorf("delivery outside the replay's window is %s, want failed", st)
	}
}
