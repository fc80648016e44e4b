package storetest

import (
	"testing"
	"time"

	"hookd/internal/store"
)

// A shedding is kept by the first to begin it and cleared by the first to
// end it; each call says what was kept before it.
func testShed(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub, other, gone := f.sub(a.ID, "a.example:443"), f.sub(a.ID, "b.example:443"), f.sub(a.ID, "c.example:443")
	set := func(id string, since time.Time) time.Time {
		t.Helper()
		was, err := s.SubscriptionShedSet(f.ctx, id, since)
		noErr(t, "SubscriptionShedSet", err)
		return was
	}
	list := func() map[string]time.Time {
		t.Helper()
		m, err := s.SubscriptionsShed(f.ctx)
		noErr(t, "SubscriptionsShed", err)
		return m
	}
	if was := set(sub.ID, at(0)); !was.IsZero() {
		t.Fatalf("the first begin found %s kept", was)
	}
	if was := set(sub.ID, at(20*time.Second)); !was.Equal(at(0)) {
		t.Fatalf("a second begin found %s kept, want the first's %s", was, at(0))
	}
	set(other.ID, at(time.Minute))
	set(gone.ID, at(time.Minute))
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, gone.ID, at(2*time.Minute)))
	same(t, "kept", list(), map[string]time.Time{sub.ID: at(0), other.ID: at(time.Minute)})
	if was := set(sub.ID, time.Time{}); !was.Equal(at(0)) {
		t.Fatalf("the first end found %s kept, want %s", was, at(0))
	}
	if was := set(sub.ID, time.Time{}); !was.IsZero() {
		t.Fatalf("a second end found %s kept, want none", was)
	}
	same(t, "kept after an end", list(), map[string]time.Time{other.ID: at(time.Minute)})
	if was := set("sub_nobody", at(0)); !was.IsZero() {
		t.Fatalf("an unknown subscription had %s kept", was)
	}
	if got, err := s.SubscriptionGet(f.ctx, "", other.ID); err != nil || !got.UpdatedAt.Equal(other.UpdatedAt) {
		t.Errorf("SubscriptionShedSet moved updated_at: %v (%v), was %s", got.UpdatedAt, err, other.UpdatedAt)
	}
}
