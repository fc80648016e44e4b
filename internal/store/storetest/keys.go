package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"hookd/internal/audit"
	"hookd/internal/core"
	"hookd/internal/store"
)

func testAPIKeys(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	k := core.APIKey{ID: core.NewID("key"), TenantID: a.ID, Hash: hashKey("ci key"), Name: "ci", Prefix: "hk_abcd",
		CreatedAt: at(time.Minute), ExpiresAt: at(time.Hour)}
	noErr(t, "APIKeyCreate", s.APIKeyCreate(f.ctx, k))
	got, err := s.APIKeyByHash(f.ctx, k.Hash)
	noErr(t, "APIKeyByHash", err)
	same(t, "created key", got, k)

	wantErr(t, "APIKeyCreate(missing tenant)", s.APIKeyCreate(f.ctx,
		core.APIKey{ID: core.NewID("key"), TenantID: "ten_missing", Hash: hashKey("x"), CreatedAt: t0}), store.ErrNotFound)
	wantErr(t, "APIKeyCreate(same hash)", s.APIKeyCreate(f.ctx,
		core.APIKey{ID: core.NewID("key"), TenantID: b.ID, Hash: k.Hash, CreatedAt: t0}), store.ErrConflict)

	// Paging: a's first key (from the fixture), k, and two more; b's own is not listed.
	more := []core.APIKey{}
	for i := range 2 {
		m := core.APIKey{ID: core.NewID("key"), TenantID: a.ID, Hash: hashKey(a.ID + string(rune('0'+i))), CreatedAt: t0}
		noErr(t, "APIKeyCreate", s.APIKeyCreate(f.ctx, m))
		more = append(more, m)
	}
	var listed []string
	p := store.APIKeyListParams{TenantID: a.ID, Limit: 3}
	for range 10 {
		page, err := s.APIKeyList(f.ctx, p)
		noErr(t, "APIKeyList", err)
		listed = append(listed, ids(page.Data, func(k core.APIKey) string { return k.ID })...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	first, err := s.APIKeyByHash(f.ctx, hashKey(a.ID))
	noErr(t, "APIKeyByHash(fixture)", err)
	want := []string{first.ID, k.ID, more[0].ID, more[1].ID}
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("a's keys listed %v, want %v", listed, want)
	}

	// Revocation: scoped to the tenant, once.
	_, err = s.APIKeyRevoke(f.ctx, b.ID, k.ID, at(2*time.Minute))
	wantErr(t, "APIKeyRevoke(another tenant's)", err, store.ErrNotFound)
	_, err = s.APIKeyRevoke(f.ctx, "", "key_missing", at(2*time.Minute))
	wantErr(t, "APIKeyRevoke(missing)", err, store.ErrNotFound)
	rk, err := s.APIKeyRevoke(f.ctx, a.ID, k.ID, at(2*time.Minute))
	noErr(t, "APIKeyRevoke", err)
	k.RevokedAt = at(2 * time.Minute)
	same(t, "revoked key as answered", rk, k)
	got, err = s.APIKeyByHash(f.ctx, k.Hash)
	noErr(t, "APIKeyByHash(revoked)", err)
	same(t, "revoked key as read", got, k)
	if got.Live(at(3 * time.Minute)) {
		t.Fatal("a revoked key is live")
	}
	_, err = s.APIKeyRevoke(f.ctx, "", k.ID, at(3*time.Minute))
	wantErr(t, "APIKeyRevoke(again)", err, store.ErrConflict)
	if got, _ := s.APIKeyByHash(f.ctx, k.Hash); !got.RevokedAt.Equal(at(2 * time.Minute)) {
		t.Fatalf("a second revoke moved revoked_at to %v", got.RevokedAt)
	}

	// Last use: the later time wins; unknown IDs are ignored.
	noErr(t, "APIKeysTouch", s.APIKeysTouch(f.ctx, map[string]time.Time{more[0].ID: at(10 * time.Minute), "key_missing": at(0)}))
	noErr(t, "APIKeysTouch(earlier)", s.APIKeysTouch(f.ctx, map[string]time.Time{more[0].ID: at(5 * time.Minute)}))
	noErr(t, "APIKeysTouch(none)", s.APIKeysTouch(f.ctx, nil))
	got, _ = s.APIKeyByHash(f.ctx, more[0].Hash)
	if !got.LastUsedAt.Equal(at(10 * time.Minute)) {
		t.Fatalf("last_used_at = %v, want %v", got.LastUsedAt, at(10*time.Minute))
	}
	if got, _ := s.APIKeyByHash(f.ctx, more[1].Hash); !got.LastUsedAt.IsZero() {
		t.Fatalf("an untouched key has last_used_at %v", got.LastUsedAt)
	}
}

// Each audited write stores the entry its context carries, in its own
// transaction, under the tenant of the row it changed (even when the
// caller acted for any tenant); a write that fails stores none, and a
// write without an entry stores none.
func testAuditInTransaction(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	sub := f.sub(a.ID, "a.example:443")
	d := f.deliver(sub, t0)
	f.record(d, 1, 200, core.DeliveryDelivered, time.Time{})
	if rows := f.audit(store.AuditListParams{}); len(rows) != 0 {
		t.Fatalf("writes without an entry logged %d rows", len(rows))
	}
	actor := audit.WithActor(f.ctx, audit.Actor{ID: "key_actor", Addr: "192.0.2.7:4000"})
	rec := func(action, target string) context.Context {
		return audit.Record(actor, action, target, map[string]any{"changed": []string{"state"}})
	}
	type row struct{ action, tenant, target string }
	var want []row

	tn := core.Tenant{ID: core.NewID("ten"), Name: "new", CreatedAt: t0}
	noErr(t, "TenantCreate", s.TenantCreate(rec(audit.TenantCreate, tn.ID), tn,
		core.APIKey{ID: core.NewID("key"), TenantID: tn.ID, Hash: hashKey(tn.ID), CreatedAt: t0}))
	want = append(want, row{audit.TenantCreate, tn.ID, tn.ID})
	wantErr(t, "TenantCreate(again)", s.TenantCreate(rec(audit.TenantCreate, tn.ID), tn,
		core.APIKey{ID: core.NewID("key"), TenantID: tn.ID, Hash: hashKey("other"), CreatedAt: t0}), store.ErrConflict)

	k := core.APIKey{ID: core.NewID("key"), TenantID: a.ID, Hash: hashKey("k"), CreatedAt: t0}
	noErr(t, "APIKeyCreate", s.APIKeyCreate(rec(audit.KeyCreate, k.ID), k))
	want = append(want, row{audit.KeyCreate, a.ID, k.ID})
	_, err := s.APIKeyRevoke(rec(audit.KeyRevoke, k.ID), "", k.ID, at(time.Minute))
	noErr(t, "APIKeyRevoke", err)
	want = append(want, row{audit.KeyRevoke, a.ID, k.ID})
	_, err = s.APIKeyRevoke(rec(audit.KeyRevoke, k.ID), "", k.ID, at(time.Minute))
	wantErr(t, "APIKeyRevoke(again)", err, store.ErrConflict)

	s2 := core.Subscription{ID: core.NewID("sub"), TenantID: a.ID, URL: "https://b.example/", Host: "b.example:443",
		EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive, CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "SubscriptionCreate", s.SubscriptionCreate(rec(audit.SubscriptionCreate, s2.ID), s2))
	want = append(want, row{audit.SubscriptionCreate, a.ID, s2.ID})
	wantErr(t, "SubscriptionCreate(again)", s.SubscriptionCreate(rec(audit.SubscriptionCreate, s2.ID), s2), store.ErrConflict)
	s2.State, s2.UpdatedAt = core.SubPaused, at(time.Minute)
	s2.TenantID = "" // acting for any tenant: the row's tenant is logged
	noErr(t, "SubscriptionUpdate", s.SubscriptionUpdate(rec(audit.SubscriptionPause, s2.ID), s2))
	want = append(want, row{audit.SubscriptionPause, a.ID, s2.ID})
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(rec(audit.SubscriptionDelete, s2.ID), "", s2.ID, at(2*time.Minute)))
	want = append(want, row{audit.SubscriptionDelete, a.ID, s2.ID})
	wantErr(t, "SubscriptionDelete(again)", s.SubscriptionDelete(rec(audit.SubscriptionDelete, s2.ID), "", s2.ID, at(3*time.Minute)), store.ErrNotFound)
	wantErr(t, "SubscriptionUpdate(deleted)", s.SubscriptionUpdate(rec(audit.SubscriptionUpdate, s2.ID), s2), store.ErrNotFound)

	_, err = s.DeliveryReplay(rec(audit.ReplayDelivery, d.ID), "", d.ID, at(time.Minute))
	noErr(t, "DeliveryReplay", err)
	want = append(want, row{audit.ReplayDelivery, a.ID, d.ID})
	_, err = s.DeliveryReplay(rec(audit.ReplayDelivery, d.ID), "", d.ID, at(time.Minute))
	wantErr(t, "DeliveryReplay(pending)", err, store.ErrConflict)

	j := core.ReplayJob{ID: core.NewID("rpl"), TenantID: a.ID, SubscriptionID: sub.ID, Since: t0, EventTypes: []string{},
		States: core.ReplayStatesDefault, Rate: 500, CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "ReplayJobCreate", s.ReplayJobCreate(rec(audit.ReplaySubscription, sub.ID), j))
	want = append(want, row{audit.ReplaySubscription, a.ID, sub.ID})
	_, err = s.ReplayJobCancel(rec(audit.ReplayCancel, sub.ID), "", j.ID, at(time.Minute))
	noErr(t, "ReplayJobCancel", err)
	want = append(want, row{audit.ReplayCancel, a.ID, sub.ID})
	_, err = s.ReplayJobCancel(rec(audit.ReplayCancel, sub.ID), "", j.ID, at(time.Minute))
	wantErr(t, "ReplayJobCancel(again)", err, store.ErrConflict)

	rows := f.audit(store.AuditListParams{})
	var got []row
	for _, r := range rows {
		got = append(got, row{r.Action, r.TenantID, r.TargetID})
		var detail map[string]any
		if r.Actor != "key_actor" || r.RemoteAddr != "192.0.2.7:4000" || json.Unmarshal(r.Detail, &detail) != nil ||
			detail["changed"] == nil || r.At.IsZero() || r.ID == "" {
			t.Errorf("row %+v (detail %s): actor, address, detail or time lost", r, r.Detail)
		}
	}
	slices.Reverse(want) // newest first
	if !slices.Equal(got, want) {
		t.Fatalf("audit rows (newest first):\n got  %v\n want %v", got, want)
	}
}

func testAuditList(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	for i := range 7 {
		tn, action := a, audit.SubscriptionCreate
		if i%3 == 2 {
			tn, action = b, audit.SubscriptionDelete
		}
		sub := core.Subscription{ID: core.NewID("sub"), TenantID: tn.ID, URL: "https://a.example/", Host: "a.example:443",
			EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive, CreatedAt: t0, UpdatedAt: t0}
		noErr(t, "SubscriptionCreate", s.SubscriptionCreate(audit.Record(f.ctx, action, sub.ID, nil), sub))
	}
	all := f.audit(store.AuditListParams{Limit: 2})
	if len(all) != 7 || !slices.IsSortedFunc(all, func(x, y core.AuditEntry) int { return cmp.Compare(y.ID, x.ID) }) {
		t.Fatalf("paged newest first by 2: %d rows %v", len(all), ids(all, auditID))
	}
	filter := func(keep func(core.AuditEntry) bool) []string {
		var out []string
		for _, e := range all {
			if keep(e) {
				out = append(out, e.ID)
			}
		}
		return out
	}
	mid := all[3].At
	for name, c := range map[string]struct {
		p    store.AuditListParams
		keep func(core.AuditEntry) bool
	}{
		"tenant": {store.AuditListParams{TenantID: b.ID}, func(e core.AuditEntry) bool { return e.TenantID == b.ID }},
		"action": {store.AuditListParams{Action: audit.SubscriptionCreate}, func(e core.AuditEntry) bool { return e.Action == audit.SubscriptionCreate }},
		"both": {store.AuditListParams{TenantID: a.ID, Action: audit.SubscriptionDelete},
			func(e core.AuditEntry) bool { return false }},
		"since": {store.AuditListParams{Since: mid}, func(e core.AuditEntry) bool { return !e.At.Before(mid) }},
		"until": {store.AuditListParams{Until: mid}, func(e core.AuditEntry) bool { return e.At.Before(mid) }},
	} {
		c.p.Limit = 3
		if got, want := ids(f.audit(c.p), auditID), filter(c.keep); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
}

func auditID(e core.AuditEntry) string { return e.ID }

// audit lists every audit entry p selects, following the cursor.
func (f *fx) audit(p store.AuditListParams) []core.AuditEntry {
	f.t.Helper()
	var out []core.AuditEntry
	for range 100 {
		page, err := f.s.AuditList(f.ctx, p)
		if err != nil {
			f.t.Fatalf("AuditList: %v", err)
		}
		out = append(out, page.Data...)
		if page.NextCursor == "" {
			return out
		}
		p.Cursor = page.NextCursor
	}
	f.t.Fatal("AuditList: more than 100 pages")
	return nil
}
