package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

func testTenants(t *testing.T, s store.Store) {
	f := newFx(t, s)
	def, err := s.TenantGet(f.ctx, core.DefaultTenant)
	noErr(t, "the default tenant exists after migration", err)
	if def.ID != core.DefaultTenant {
		t.Fatalf("default tenant ID = %q", def.ID)
	}

	tn := f.tenant()
	got, err := s.TenantGet(f.ctx, tn.ID)
	noErr(t, "TenantGet", err)
	same(t, "tenant", got, tn)

	k, err := s.APIKeyByHash(f.ctx, hashKey(tn.ID))
	noErr(t, "APIKeyByHash", err)
	if k.TenantID != tn.ID || k.Hash != hashKey(tn.ID) || !k.CreatedAt.Equal(t0) || k.ID == "" {
		t.Fatalf("api key = %+v", k)
	}

	_, err = s.TenantGet(f.ctx, "ten_missing")
	wantErr(t, "TenantGet(missing)", err, store.ErrNotFound)
	_, err = s.APIKeyByHash(f.ctx, hashKey("nobody"))
	wantErr(t, "APIKeyByHash(missing)", err, store.ErrNotFound)

	// A second tenant with the same ID conflicts, and its key is not written:
	// tenant and key go in one transaction.
	dupKey := core.APIKey{ID: core.NewID("key"), TenantID: tn.ID, Hash: hashKey("second"), CreatedAt: t0}
	err = s.TenantCreate(f.ctx, core.Tenant{ID: tn.ID, Name: "again", CreatedAt: t0}, dupKey)
	wantErr(t, "TenantCreate(duplicate ID)", err, store.ErrConflict)
	_, err = s.APIKeyByHash(f.ctx, dupKey.Hash)
	wantErr(t, "key of the refused tenant", err, store.ErrNotFound)

	// A reused key hash conflicts too, and then the tenant is not written.
	other := core.Tenant{ID: core.NewID("ten"), Name: "other", CreatedAt: t0}
	err = s.TenantCreate(f.ctx, other, core.APIKey{ID: core.NewID("key"), TenantID: other.ID, Hash: hashKey(tn.ID), CreatedAt: t0})
	wantErr(t, "TenantCreate(duplicate key hash)", err, store.ErrConflict)
	_, err = s.TenantGet(f.ctx, other.ID)
	wantErr(t, "tenant whose key was refused", err, store.ErrNotFound)
}

func testSubscriptionCRUD(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub := f.sub(a.ID, "a.example:443")

	got, err := s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	noErr(t, "SubscriptionGet", err)
	same(t, "created subscription", got, sub)
	got, err = s.SubscriptionGet(f.ctx, "", sub.ID)
	noErr(t, "SubscriptionGet(any tenant)", err)
	same(t, "subscription via admin", got, sub)

	err = s.SubscriptionCreate(f.ctx, sub)
	wantErr(t, "SubscriptionCreate(same ID)", err, store.ErrConflict)

	// Another tenant sees nothing, and cannot change or delete it.
	_, err = s.SubscriptionGet(f.ctx, b.ID, sub.ID)
	wantErr(t, "SubscriptionGet(other tenant)", err, store.ErrNotFound)
	foreign := sub
	foreign.TenantID, foreign.URL = b.ID, "https://evil.example/"
	wantErr(t, "SubscriptionUpdate(other tenant)", s.SubscriptionUpdate(f.ctx, foreign), store.ErrNotFound)
	wantErr(t, "SubscriptionDelete(other tenant)", s.SubscriptionDelete(f.ctx, b.ID, sub.ID, at(time.Minute)), store.ErrNotFound)
	got, _ = s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	same(t, "subscription after foreign attempts", got, sub)

	// Update overwrites the mutable fields but never ID, tenant or CreatedAt.
	upd := sub
	upd.URL, upd.Host = "https://b.example:8443/new", "b.example:8443"
	upd.EventTypes = []string{"invoice.*", "payment.failed"}
	upd.State, upd.DisabledReason = core.SubPaused, "maintenance"
	upd.RateLimit, upd.MaxConcurrency = 2.5, 3
	upd.CreatedAt = at(time.Hour) // ignored
	upd.UpdatedAt = at(time.Minute)
	noErr(t, "SubscriptionUpdate", s.SubscriptionUpdate(f.ctx, upd))
	got, _ = s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	want := upd
	want.CreatedAt = sub.CreatedAt
	same(t, "updated subscription", got, want)

	_, err = s.SubscriptionGet(f.ctx, a.ID, "sub_missing")
	wantErr(t, "SubscriptionGet(missing)", err, store.ErrNotFound)
	missing := sub
	missing.ID = "sub_missing"
	wantErr(t, "SubscriptionUpdate(missing)", s.SubscriptionUpdate(f.ctx, missing), store.ErrNotFound)

	keep := f.sub(a.ID, "a.example:443")
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, sub.ID, at(2*time.Minute)))
	_, err = s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	wantErr(t, "SubscriptionGet(deleted)", err, store.ErrNotFound)
	wantErr(t, "SubscriptionDelete(again)", s.SubscriptionDelete(f.ctx, a.ID, sub.ID, at(3*time.Minute)), store.ErrNotFound)
	wantErr(t, "SubscriptionUpdate(deleted)", s.SubscriptionUpdate(f.ctx, upd), store.ErrNotFound)
	err = s.SubscriptionCreate(f.ctx, sub)
	wantErr(t, "SubscriptionCreate(ID of a deleted one)", err, store.ErrConflict)

	all, err := s.SubscriptionListAll(f.ctx)
	noErr(t, "SubscriptionListAll", err)
	same(t, "live subscriptions", ids(all, subID), []string{keep.ID})
	page, err := s.SubscriptionList(f.ctx, store.SubscriptionListParams{TenantID: a.ID})
	noErr(t, "SubscriptionList", err)
	same(t, "listed subscriptions", ids(page.Data, subID), []string{keep.ID})
}

// Every field of a subscription survives the store, including the difference
// between a nil retry schedule (the default) and an empty one (no retries).
func testSubscriptionRoundTrip(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	full := f.sub(a.ID, "full.example:443", func(s *core.Subscription) {
		s.EventTypes = []string{"payment.succeeded", "invoice.*", "*"}
		s.PrevSecret, s.PrevSecretExpiresAt = "whsec_b2xk", at(24*time.Hour)
		s.Ordered = true
		s.RetrySchedule = []time.Duration{5 * time.Second, 90 * time.Second, 2 * time.Hour}
		s.Timeout = 25 * time.Second
		s.MaxConcurrency, s.RateLimit = 7, 12.25
		s.RetryStatusCodes = []int{404, 409}
		s.State, s.DisabledReason = core.SubDisabled, "endpoint answered 410"
		s.UpdatedAt = at(time.Second)
		s.Headers = map[string]string{"Authorization": "Bearer x", "X-Api-Key": "k\t\u00e9"}
	})
	none := f.sub(a.ID, "none.example:443", func(s *core.Subscription) { s.RetrySchedule = []time.Duration{} })
	def := f.sub(a.ID, "default.example:443")
	for _, want := range []core.Subscription{full, none, def} {
		got, err := s.SubscriptionGet(f.ctx, a.ID, want.ID)
		noErr(t, "SubscriptionGet", err)
		same(t, "subscription "+want.Host, got, want)
	}
	got, _ := s.SubscriptionGet(f.ctx, a.ID, none.ID)
	if got.RetrySchedule == nil {
		t.Fatal("an empty retry schedule came back nil (the default)")
	}
	got, _ = s.SubscriptionGet(f.ctx, a.ID, def.ID)
	if got.RetrySchedule != nil {
		t.Fatalf("a nil retry schedule came back as %v", got.RetrySchedule)
	}
}

func testSubscriptionListPaging(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	var want []string
	for i := 0; i < 7; i++ {
		want = append(want, f.sub(a.ID, fmt.Sprintf("h%d.example:443", i)).ID)
		f.sub(b.ID, "b.example:443")
	}

	var got []string
	p := store.SubscriptionListParams{TenantID: a.ID, Limit: 3}
	var sizes []int
	for {
		page, err := s.SubscriptionList(f.ctx, p)
		noErr(t, "SubscriptionList", err)
		for _, sub := range page.Data {
			if sub.TenantID != a.ID {
				t.Fatalf("listed %s of tenant %s", sub.ID, sub.TenantID)
			}
		}
		got = append(got, ids(page.Data, subID)...)
		sizes = append(sizes, len(page.Data))
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	same(t, "paged IDs (ascending)", got, want)
	same(t, "page sizes", sizes, []int{3, 3, 1})

	// An exactly full last page still ends the listing.
	p = store.SubscriptionListParams{TenantID: a.ID, Limit: 7}
	page, err := s.SubscriptionList(f.ctx, p)
	noErr(t, "SubscriptionList", err)
	if len(page.Data) != 7 || page.NextCursor != "" {
		t.Fatalf("limit 7 of 7: %d items, cursor %q", len(page.Data), page.NextCursor)
	}

	// Limit <= 0 means 50; more than 100 means 100.
	for i := 7; i < 105; i++ {
		f.sub(a.ID, fmt.Sprintf("h%d.example:443", i))
	}
	for _, c := range []struct{ limit, want int }{{0, 50}, {-1, 50}, {1000, 100}} {
		page, err := s.SubscriptionList(f.ctx, store.SubscriptionListParams{TenantID: a.ID, Limit: c.limit})
		noErr(t, "SubscriptionList", err)
		if len(page.Data) != c.want || page.NextCursor == "" {
			t.Fatalf("limit %d: %d items, cursor %q; want %d and a cursor", c.limit, len(page.Data), page.NextCursor, c.want)
		}
	}
}

func testSubscriptionDeleteSkipsPending(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	doomed := f.sub(a.ID, "a.example:443")
	other := f.sub(a.ID, "a.example:443")
	e := ev(a.ID, "payment.succeeded")
	res := f.insert(item(e, at(0), doomed, other))
	pending, otherPending := res[0].Deliveries[0], res[0].Deliveries[1]
	done := f.deliver(doomed, at(0))
	f.record(done, 1, 200, core.DeliveryDelivered, time.Time{})

	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, doomed.ID, at(time.Hour)))

	d, _ := f.getDelivery(pending.ID)
	if d.State != core.DeliverySkipped || !d.UpdatedAt.Equal(at(time.Hour)) {
		t.Fatalf("pending delivery of a deleted subscription: state %s updated %v; want skipped at %v", d.State, d.UpdatedAt, at(time.Hour))
	}
	if st := f.state(done.ID); st != core.DeliveryDelivered {
		t.Fatalf("delivered delivery became %s", st)
	}
	if st := f.state(otherPending.ID); st != core.DeliveryPending {
		t.Fatalf("another subscription's delivery became %s", st)
	}
	jobs, _, err := s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: doomed.ID, Now: at(time.Hour), Limit: 10})
	noErr(t, "DeliveryDue", err)
	if len(jobs) != 0 {
		t.Fatalf("due after delete: %v", ids(jobs, jobID))
	}
	jobs, _, err = s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: other.ID, Now: at(time.Hour), Limit: 10})
	noErr(t, "DeliveryDue", err)
	same(t, "the other subscription's", ids(jobs, jobID), []string{otherPending.ID})
}

func testSubscriptionDisableSkipsPending(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "a.example:443")
	d1 := f.deliver(sub, at(0))
	failed := f.deliver(sub, at(0))
	f.record(failed, 1, 400, core.DeliveryFailed, time.Time{})

	// Pausing keeps deliveries pending (just not due).
	paused := sub
	paused.State, paused.UpdatedAt = core.SubPaused, at(time.Minute)
	noErr(t, "pause", s.SubscriptionUpdate(f.ctx, paused))
	if st := f.state(d1.ID); st != core.DeliveryPending {
		t.Fatalf("pausing moved a pending delivery to %s", st)
	}
	jobs, _, err := s.DeliveryDue(f.ctx, store.DeliveryDueParams{SubscriptionID: sub.ID, Now: at(time.Hour), Limit: 10})
	noErr(t, "DeliveryDue", err)
	if len(jobs) != 0 {
		t.Fatalf("paused subscription has due jobs %v", ids(jobs, jobID))
	}

	disabled := sub
	disabled.State, disabled.DisabledReason, disabled.UpdatedAt = core.SubDisabled, "410 Gone", at(2*time.Minute)
	noErr(t, "disable", s.SubscriptionUpdate(f.ctx, disabled))
	d, _ := f.getDelivery(d1.ID)
	if d.State != core.DeliverySkipped || !d.UpdatedAt.Equal(at(2*time.Minute)) {
		t.Fatalf("pending delivery of a disabled subscription: state %s updated %v", d.State, d.UpdatedAt)
	}
	if st := f.state(failed.ID); st != core.DeliveryFailed {
		t.Fatalf("failed delivery became %s", st)
	}
	got, _ := s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	same(t, "disabled subscription", got, disabled)
}

// When an endpoint moves to another host, its pending deliveries move with it
// (host and shard), so they are admitted under the host they will hit.
// Finished deliveries keep the host they were sent to until replayed.
func testSubscriptionHostChangeMovesPending(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "old.example:443")
	pending := f.deliver(sub, at(0))
	done := f.deliver(sub, at(0))
	f.record(done, 1, 200, core.DeliveryDelivered, time.Time{})

	moved := sub
	moved.URL, moved.Host, moved.UpdatedAt = "https://new.example/hook", "new.example:443", at(time.Minute)
	noErr(t, "SubscriptionUpdate", s.SubscriptionUpdate(f.ctx, moved))

	d, _ := f.getDelivery(pending.ID)
	if d.Host != moved.Host || d.Shard != core.ShardOf(moved.Host) || d.State != core.DeliveryPending {
		t.Fatalf("pending delivery after the move: host %s shard %d state %s", d.Host, d.Shard, d.State)
	}
	if d, _ := f.getDelivery(done.ID); d.Host != sub.Host || d.Shard != core.ShardOf(sub.Host) {
		t.Fatalf("delivered delivery moved to %s/%d", d.Host, d.Shard)
	}
	hs, err := s.DeliveryPendingSubscriptions(f.ctx, nil)
	noErr(t, "DeliveryPendingSubscriptions", err)
	same(t, "pending subscriptions", hs, []store.SubscriptionDue{{SubscriptionID: sub.ID, Host: moved.Host, NextAttemptAt: at(0)}})

	// A replay also lines up under the current host.
	r, err := s.DeliveryReplay(f.ctx, a.ID, done.ID, at(time.Hour))
	noErr(t, "DeliveryReplay", err)
	if r.Host != moved.Host || r.Shard != core.ShardOf(moved.Host) {
		t.Fatalf("replayed delivery on %s/%d, want %s", r.Host, r.Shard, moved.Host)
	}
}

// SubscriptionCreateWithin counts the tenant's live subscriptions (paused
// and disabled ones too, deleted ones not, another tenant's not) in the
// create: at max it is ErrLimit and writes nothing (nor its audit entry).
// Creates racing (on a shared store: from several nodes) stop at max.
func testSubscriptionCreateWithin(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	within := func(tenant string, max int) (core.Subscription, error) {
		sub := core.Subscription{ID: core.NewID("sub"), TenantID: tenant, URL: "https://w.example/hook", Host: "w.example:443",
			EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive, CreatedAt: t0, UpdatedAt: t0}
		return sub, s.SubscriptionCreateWithin(audit.Record(f.ctx, audit.SubscriptionCreate, sub.ID, nil), sub, max)
	}
	paused := f.sub(a.ID, "p.example:443", func(s *core.Subscription) { s.State = core.SubPaused })
	f.sub(a.ID, "d.example:443", func(s *core.Subscription) { s.State = core.SubDisabled })
	gone := f.sub(a.ID, "g.example:443")
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, "", gone.ID, t0))
	f.sub(b.ID, "b.example:443")

	if _, err := within(a.ID, 3); err != nil {
		t.Fatalf("a third subscription of a tenant with a paused, a disabled and a deleted one, limit 3: %v", err)
	}
	refused, err := within(a.ID, 3)
	wantErr(t, "SubscriptionCreateWithin at the limit", err, store.ErrLimit)
	_, err = s.SubscriptionGet(f.ctx, "", refused.ID)
	wantErr(t, "the refused subscription", err, store.ErrNotFound)
	for _, e := range f.audit(store.AuditListParams{TenantID: a.ID}) {
		if e.TargetID == refused.ID {
			t.Fatalf("the refused create's audit entry was written: %+v", e)
		}
	}
	if _, err := within(a.ID, 0); err != nil {
		t.Fatalf("no limit: %v", err)
	}
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, "", paused.ID, t0))
	if _, err := within(b.ID, 2); err != nil {
		t.Fatalf("another tenant's second, limit 2: %v", err)
	}

	const racers, max = 10, 4
	errs := make(chan error, racers)
	var wg sync.WaitGroup
	for range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := within(b.ID, max)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, store.ErrLimit) {
			t.Fatalf("a racing create: %v", err)
		}
	}
	page, err := s.SubscriptionList(f.ctx, store.SubscriptionListParams{TenantID: b.ID, Limit: 100})
	noErr(t, "SubscriptionList", err)
	if len(page.Data) != max {
		t.Fatalf("%d creates racing for a tenant with 2, limit %d: it has %d", racers, max, len(page.Data))
	}
}
