package subs

import (
	"slices"
	"testing"

	"hookd/internal/core"
)

// A reload brings in other nodes' creates, changes and deletes, but never
// undoes a change made here after the snapshot was taken.
func TestReplaceAllTakesSnapshotButKeepsNewerLocalChanges(t *testing.T) {
	sub := func(id, tenant string, types ...string) core.Subscription {
		return core.Subscription{ID: id, TenantID: tenant, EventTypes: types, State: core.SubActive}
	}
	r := New([]core.Subscription{sub("s1", "t", "order.*"), sub("s2", "t", "*"), sub("s3", "u", "*")})
	since := r.Version()
	// Made here while the snapshot was being read: the store has them, the
	// snapshot may not.
	r.Put(sub("s4", "t", "*"))
	r.Remove("s2")

	// Elsewhere: s1 now matches payment.*, s3 was deleted, s5 created; the
	// snapshot still has s2 and lacks s4.
	s1 := sub("s1", "t", "payment.*")
	r.ReplaceAll([]core.Subscription{s1, sub("s2", "t", "*"), sub("s5", "u", "*")}, since)
	if got := ids(r.Match("t", "payment.x")); !slices.Equal(got, []string{"s1", "s4"}) {
		t.Errorf("tenant t matches %v, want s1 (changed elsewhere) and s4 (created here)", got)
	}
	if got := ids(r.Match("t", "order.x")); !slices.Equal(got, []string{"s4"}) {
		t.Errorf("old pattern of s1 still matches: %v", got)
	}
	if got := ids(r.Match("u", "a.b")); !slices.Equal(got, []string{"s5"}) {
		t.Errorf("tenant u matches %v, want s5 only (s3 deleted elsewhere)", got)
	}
	if _, ok := r.Get("s2"); ok {
		t.Error("s2, removed here after the snapshot's version, came back")
	}
	kept, _ := r.Get("s1")

	// The next snapshot is newer than every local change: it wins wholly.
	since = r.Version()
	r.ReplaceAll([]core.Subscription{s1}, since)
	if got := ids(r.Match("t", "payment.x")); !slices.Equal(got, []string{"s1"}) {
		t.Errorf("after a newer snapshot tenant t matches %v, want s1", got)
	}
	for _, id := range []string{"s4", "s5"} {
		if _, ok := r.Get(id); ok {
			t.Errorf("%s survived a snapshot without it", id)
		}
	}
	if again, _ := r.Get("s1"); again != kept {
		t.Error("an unchanged subscription was replaced")
	}

	// A paused or rotated subscription is what Get returns after a reload.
	p := s1
	p.State, p.Secret = core.SubPaused, "whsec_new"
	r.ReplaceAll([]core.Subscription{p}, r.Version())
	if got, _ := r.Get("s1"); got.State != core.SubPaused || got.Secret != "whsec_new" {
		t.Errorf("after reload s1 is %+v", got)
	}
}
