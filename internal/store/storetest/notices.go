package storetest

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// A disable hookd made (SubscriptionDisable) and a job its step finished
// owe their tenant an event, listed by Notices until NoticeSent; nothing
// else does: a disable asked for (SubscriptionUpdate), a failed disable,
// a job still running or cancelled, anything of a deleted subscription. A
// disable's notice marked sent with another payload (a later disable
// replaced it) stays.
func testNotices(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	notices := func() []store.Notice {
		t.Helper()
		ns, err := s.Notices(f.ctx)
		noErr(t, "Notices", err)
		return ns
	}
	sent := func(n store.Notice) {
		t.Helper()
		noErr(t, "NoticeSent", s.NoticeSent(f.ctx, n))
	}
	if ns := notices(); len(ns) != 0 {
		t.Fatalf("notices of a new store: %+v", ns)
	}
	disabled := func(sub core.Subscription, reason string, now time.Time) core.Subscription {
		sub.State, sub.DisabledReason, sub.UpdatedAt = core.SubDisabled, reason, now
		return sub
	}

	auto, asked := f.sub(a.ID, "a.example:443"), f.sub(a.ID, "b.example:443")
	off := disabled(auto, "every attempt failed for 5 days", at(time.Hour))
	noErr(t, "SubscriptionDisable", s.SubscriptionDisable(f.ctx, off, []byte(`{"n":1}`)))
	got, err := s.SubscriptionGet(f.ctx, "", auto.ID)
	noErr(t, "SubscriptionGet", err)
	same(t, "a subscription SubscriptionDisable wrote", got, off)
	noErr(t, "SubscriptionUpdate(disabled)", s.SubscriptionUpdate(f.ctx, disabled(asked, "disabled by request", at(time.Hour))))
	wantErr(t, "SubscriptionDisable(absent)",
		s.SubscriptionDisable(f.ctx, disabled(core.Subscription{ID: "sub_none", TenantID: a.ID}, "x", at(0)), []byte(`{}`)), store.ErrNotFound)
	if err := s.SubscriptionDisable(f.ctx, f.sub(a.ID, "c.example:443"), []byte(`{}`)); err == nil {
		t.Fatal("SubscriptionDisable of an active subscription: no error")
	}
	first := store.Notice{SubscriptionID: auto.ID, TenantID: a.ID, Host: auto.Host, URL: auto.URL, Disabled: []byte(`{"n":1}`)}
	same(t, "notices after one disable by hookd", notices(), []store.Notice{first})

	// Jobs: finished (it owes), running, cancelled, of a subscription
	// deleted before or after its last step.
	replayed, busy, stopped := f.sub(a.ID, "r.example:443"), f.sub(a.ID, "busy.example:443"), f.sub(a.ID, "s.example:443")
	goneBefore, goneAfter := f.sub(a.ID, "g.example:443"), f.sub(a.ID, "h.example:443")
	f.failedN(busy, 3)
	jobs := map[string]core.ReplayJob{}
	for _, sb := range []core.Subscription{replayed, busy, stopped, goneBefore, goneAfter} {
		j := job(sb)
		noErr(t, "ReplayJobCreate", s.ReplayJobCreate(f.ctx, j))
		jobs[sb.ID] = j
	}
	step := func(sb core.Subscription, limit int) core.ReplayJob {
		t.Helper()
		j, _, err := s.ReplayJobStep(f.ctx, jobs[sb.ID].ID, limit, at(2*time.Hour))
		noErr(t, "ReplayJobStep", err)
		return j
	}
	_, err = s.ReplayJobCancel(f.ctx, "", jobs[stopped.ID].ID, at(2*time.Hour))
	noErr(t, "ReplayJobCancel", err)
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, "", goneBefore.ID, at(2*time.Hour)))
	for _, sb := range []core.Subscription{goneBefore, goneAfter} {
		if j := step(sb, 10); j.State != core.ReplayDone {
			t.Fatalf("a job with nothing to replay: %s after a step", j.State)
		}
	}
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, "", goneAfter.ID, at(3*time.Hour)))
	if j := step(busy, 1); j.State != core.ReplayRunning {
		t.Fatalf("a job with more to replay: %s after a step", j.State)
	}
	finished := step(replayed, 10)
	done := store.Notice{SubscriptionID: replayed.ID, TenantID: a.ID, Host: replayed.Host, URL: replayed.URL, Job: finished}
	same(t, "notices after the jobs", notices(), []store.Notice{first, done})

	// Turned on and disabled again: the new notice replaces the first,
	// which, marked sent late, leaves it.
	on := off
	on.State, on.DisabledReason, on.UpdatedAt = core.SubActive, "", at(4*time.Hour)
	noErr(t, "SubscriptionUpdate(active)", s.SubscriptionUpdate(f.ctx, on))
	noErr(t, "SubscriptionDisable", s.SubscriptionDisable(f.ctx, disabled(on, "endpoint answered 410 Gone", at(5*time.Hour)), []byte(`{"n":2}`)))
	second := first
	second.Disabled = []byte(`{"n":2}`)
	sent(first)
	same(t, "notices after the first disable's was marked sent", notices(), []store.Notice{second, done})
	sent(second)
	sent(done)
	sent(store.Notice{SubscriptionID: "sub_none", Disabled: []byte(`{}`)})
	sent(store.Notice{Job: core.ReplayJob{ID: "rpl_none"}})
	if ns := notices(); len(ns) != 0 {
		t.Fatalf("notices after all were marked sent: %+v", ns)
	}
}
