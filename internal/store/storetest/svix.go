package storetest

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// What the Svix-compatible API keeps of a tenant: created without a key,
// found by uid, listed, updated, deleted, its uid taken again and its ID not.
func testTenantsAsApplications(t *testing.T, s store.Store) {
	f := newFx(t, s)
	app := core.Tenant{ID: "app_one", Name: "One", CreatedAt: t0, UID: "One.Upper",
		Metadata: map[string]string{"plan": "gold"}, RateLimit: 7}
	noErr(t, "TenantCreate without a key", s.TenantCreate(f.ctx, app, core.APIKey{}))
	got, err := s.TenantGet(f.ctx, app.ID)
	noErr(t, "TenantGet", err)
	same(t, "application", got, app)
	got, err = s.TenantByUID(f.ctx, "One.Upper")
	noErr(t, "TenantByUID", err)
	same(t, "by uid", got, app)
	_, err = s.TenantByUID(f.ctx, "one.upper")
	wantErr(t, "TenantByUID compares exactly", err, store.ErrNotFound)
	_, err = s.TenantByUID(f.ctx, "")
	wantErr(t, "TenantByUID(\"\")", err, store.ErrNotFound)

	// A uid is one tenant's only.
	two := core.Tenant{ID: "app_two", Name: "Two", CreatedAt: t0}
	noErr(t, "TenantCreate(two)", s.TenantCreate(f.ctx, two, core.APIKey{}))
	two.UID, two.UpdatedAt = "One.Upper", at(time.Minute)
	wantErr(t, "TenantUpdate to a taken uid", s.TenantUpdate(f.ctx, two), store.ErrConflict)
	two.UID, two.Name, two.Metadata, two.RateLimit = "two", "Second", map[string]string{"a": "b"}, 3
	noErr(t, "TenantUpdate", s.TenantUpdate(f.ctx, two))
	got, err = s.TenantGet(f.ctx, two.ID)
	noErr(t, "TenantGet(two)", err)
	same(t, "updated", got, two)
	wantErr(t, "TenantUpdate(missing)", s.TenantUpdate(f.ctx, core.Tenant{ID: "app_none"}), store.ErrNotFound)

	// Paging by ID, the default tenant (made by the migrations) included.
	var seen []string
	p := store.TenantListParams{Limit: 2}
	for range 10 {
		page, err := s.TenantList(f.ctx, p)
		noErr(t, "TenantList", err)
		seen = append(seen, ids(page.Data, func(t core.Tenant) string { return t.ID })...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	same(t, "tenants listed", seen, []string{"app_one", "app_two", core.DefaultTenant})

	// Deleted: gone from reads, its uid free, its ID never given again
	// (its events stay for retention, keyed by it).
	noErr(t, "TenantDelete", s.TenantDelete(f.ctx, app.ID, at(time.Hour)))
	wantErr(t, "TenantDelete(again)", s.TenantDelete(f.ctx, app.ID, at(time.Hour)), store.ErrNotFound)
	_, err = s.TenantGet(f.ctx, app.ID)
	wantErr(t, "TenantGet(deleted)", err, store.ErrNotFound)
	_, err = s.TenantByUID(f.ctx, "One.Upper")
	wantErr(t, "TenantByUID(deleted)", err, store.ErrNotFound)
	page, err := s.TenantList(f.ctx, store.TenantListParams{})
	noErr(t, "TenantList", err)
	same(t, "tenants after delete", ids(page.Data, func(t core.Tenant) string { return t.ID }), []string{"app_two", core.DefaultTenant})
	again := core.Tenant{ID: app.ID, Name: "One again", CreatedAt: at(2 * time.Hour)}
	wantErr(t, "TenantCreate(a deleted ID)", s.TenantCreate(f.ctx, again, core.APIKey{}), store.ErrConflict)
	_, err = s.TenantGet(f.ctx, app.ID)
	wantErr(t, "TenantGet(a deleted ID, after a create)", err, store.ErrNotFound)
	fresh := core.Tenant{ID: "app_three", UID: "One.Upper", Name: "One again", CreatedAt: at(2 * time.Hour)}
	noErr(t, "TenantCreate(the deleted one's uid)", s.TenantCreate(f.ctx, fresh, core.APIKey{}))
	got, err = s.TenantByUID(f.ctx, "One.Upper")
	noErr(t, "TenantByUID(again)", err)
	same(t, "uid taken again", got.ID, fresh.ID)
	wantErr(t, "TenantCreate(a live ID)", s.TenantCreate(f.ctx, fresh, core.APIKey{}), store.ErrConflict)
}

// An endpoint's uid, description, metadata and wire-header flag round-trip,
// and a uid is unique among a tenant's live subscriptions.
func testSubscriptionSvixFields(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	sub := f.sub(a.ID, "a.example:443", func(s *core.Subscription) {
		s.UID, s.Description, s.SvixHeaders = "ep-1", "orders", true
		s.Metadata = map[string]string{"team": "billing"}
	})
	plain := f.sub(a.ID, "a.example:443")
	got, err := s.SubscriptionGet(f.ctx, a.ID, sub.ID)
	noErr(t, "SubscriptionGet", err)
	same(t, "svix fields", got, sub)
	got, err = s.SubscriptionGet(f.ctx, a.ID, plain.ID)
	noErr(t, "SubscriptionGet(plain)", err)
	same(t, "plain", got, plain)

	got, err = s.SubscriptionByUID(f.ctx, a.ID, "ep-1")
	noErr(t, "SubscriptionByUID", err)
	same(t, "by uid", got, sub)
	_, err = s.SubscriptionByUID(f.ctx, b.ID, "ep-1")
	wantErr(t, "SubscriptionByUID(other tenant)", err, store.ErrNotFound)

	// Another tenant may use the same uid; the same tenant may not.
	f.sub(b.ID, "b.example:443", func(s *core.Subscription) { s.UID = "ep-1" })
	dup := core.Subscription{ID: core.NewID("sub"), TenantID: a.ID, URL: "https://a.example/x", Host: "a.example:443",
		EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive, CreatedAt: t0, UpdatedAt: t0, UID: "ep-1"}
	wantErr(t, "SubscriptionCreate(taken uid)", s.SubscriptionCreate(f.ctx, dup), store.ErrConflict)
	plain.UID, plain.UpdatedAt = "ep-1", at(time.Second)
	wantErr(t, "SubscriptionUpdate(taken uid)", s.SubscriptionUpdate(f.ctx, plain), store.ErrConflict)

	// Once deleted, its uid is free.
	noErr(t, "SubscriptionDelete", s.SubscriptionDelete(f.ctx, a.ID, sub.ID, at(time.Minute)))
	_, err = s.SubscriptionByUID(f.ctx, a.ID, "ep-1")
	wantErr(t, "SubscriptionByUID(deleted)", err, store.ErrNotFound)
	noErr(t, "SubscriptionUpdate(freed uid)", s.SubscriptionUpdate(f.ctx, plain))
	got, err = s.SubscriptionByUID(f.ctx, a.ID, "ep-1")
	noErr(t, "SubscriptionByUID(moved)", err)
	if got.ID != plain.ID {
		t.Fatalf("uid ep-1 is %s, want %s", got.ID, plain.ID)
	}
}

// A tenant's events, newest first, by type and time, paged.
func testEventList(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	var want []string
	for i := range 5 {
		typ := "order.created"
		if i%2 == 1 {
			typ = "order.paid"
		}
		e := ev(a.ID, typ, func(e *core.Event) { e.CreatedAt = at(time.Duration(i) * time.Minute) })
		f.insert(store.EventInsert{Event: e})
		want = append([]string{e.ID}, want...)
	}
	f.insert(store.EventInsert{Event: ev(b.ID, "order.created")})

	var got []string
	p := store.EventListParams{TenantID: a.ID, Limit: 2}
	for range 10 {
		page, err := s.EventList(f.ctx, p)
		noErr(t, "EventList", err)
		got = append(got, ids(page.Data, func(e core.Event) string { return e.ID })...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	same(t, "events newest first", got, want)

	page, err := s.EventList(f.ctx, store.EventListParams{TenantID: a.ID, Types: []string{"order.paid"}})
	noErr(t, "EventList(types)", err)
	same(t, "order.paid events", ids(page.Data, func(e core.Event) string { return e.ID }), []string{want[1], want[3]})
	page, err = s.EventList(f.ctx, store.EventListParams{TenantID: a.ID, Since: at(time.Minute), Until: at(3 * time.Minute), WithPayload: true})
	noErr(t, "EventList(since, until)", err)
	same(t, "events in [1m, 3m)", ids(page.Data, func(e core.Event) string { return e.ID }), []string{want[2], want[3]})
	if string(page.Data[0].Payload) != `{"amount":1200,"note":"caf\u00e9"}` {
		t.Fatalf("payload %s", page.Data[0].Payload)
	}
}

// Attempts of a subscription's or an event's deliveries, newest first.
func testAttemptList(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a := f.tenant()
	s1, s2 := f.sub(a.ID, "a.example:443"), f.sub(a.ID, "b.example:443")
	e := ev(a.ID, "order.created")
	res := f.insert(item(e, t0, s1, s2))[0]
	d1, d2 := res.Deliveries[0], res.Deliveries[1]
	f.record(d1, 1, 503, core.DeliveryPending, at(time.Minute))
	f.record(d1, 2, 200, core.DeliveryDelivered, time.Time{})
	f.record(d2, 1, 200, core.DeliveryDelivered, time.Time{})
	later := f.deliver(s1, t0)
	f.record(later, 1, 410, core.DeliveryFailed, time.Time{})

	key := func(r store.AttemptRow) string { return r.Attempt.DeliveryID + "#" + string(rune('0'+r.Attempt.N)) }
	var got []string
	p := store.AttemptListParams{SubscriptionID: s1.ID, Limit: 2}
	for range 10 {
		page, err := s.AttemptList(f.ctx, p)
		noErr(t, "AttemptList(subscription)", err)
		got = append(got, ids(page.Data, key)...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	same(t, "subscription's attempts", got, []string{later.ID + "#1", d1.ID + "#2", d1.ID + "#1"})

	page, err := s.AttemptList(f.ctx, store.AttemptListParams{EventID: e.ID})
	noErr(t, "AttemptList(event)", err)
	same(t, "event's attempts", ids(page.Data, key), []string{d2.ID + "#1", d1.ID + "#2", d1.ID + "#1"})
	r := page.Data[1]
	if r.Attempt.StatusCode != 200 || !r.Attempt.StartedAt.Equal(at(2*time.Second)) || r.Attempt.Duration != 15*time.Millisecond ||
		r.Delivery.SubscriptionID != s1.ID || r.Delivery.EventID != e.ID || r.Delivery.State != core.DeliveryDelivered {
		t.Fatalf("attempt row %+v", r)
	}
	page, err = s.AttemptList(f.ctx, store.AttemptListParams{EventID: e.ID, SubscriptionID: s2.ID})
	noErr(t, "AttemptList(event, subscription)", err)
	same(t, "one endpoint's attempts of the event", ids(page.Data, key), []string{d2.ID + "#1"})
	page, err = s.AttemptList(f.ctx, store.AttemptListParams{EventID: e.ID, TenantID: "someone-else"})
	noErr(t, "AttemptList(other tenant)", err)
	same(t, "another tenant's view", ids(page.Data, key), []string(nil))
	_, err = s.AttemptList(f.ctx, store.AttemptListParams{EventID: e.ID, Cursor: "garbage"})
	wantErr(t, "AttemptList(bad cursor)", err, store.ErrInvalidCursor)
}

func testEventTypes(t *testing.T, s store.Store) {
	f := newFx(t, s)
	et := core.EventType{Name: "order.created", Description: "An order", GroupName: "order",
		FeatureFlags: []string{"beta"}, Schemas: []byte(`{"1":{"type":"object"}}`), CreatedAt: t0, UpdatedAt: t0}
	noErr(t, "EventTypeCreate", s.EventTypeCreate(f.ctx, et))
	wantErr(t, "EventTypeCreate(again)", s.EventTypeCreate(f.ctx, et), store.ErrConflict)
	got, err := s.EventTypeGet(f.ctx, et.Name)
	noErr(t, "EventTypeGet", err)
	same(t, "event type", got, et)
	plain := core.EventType{Name: "order.paid", CreatedAt: t0, UpdatedAt: t0, FeatureFlags: []string{}}
	noErr(t, "EventTypeCreate(plain)", s.EventTypeCreate(f.ctx, plain))

	et.Archived, et.Description, et.Schemas, et.UpdatedAt = true, "Archived", nil, at(time.Minute)
	noErr(t, "EventTypeUpdate", s.EventTypeUpdate(f.ctx, et))
	got, err = s.EventTypeGet(f.ctx, et.Name)
	noErr(t, "EventTypeGet(updated)", err)
	same(t, "updated", got, et)
	wantErr(t, "EventTypeUpdate(missing)", s.EventTypeUpdate(f.ctx, core.EventType{Name: "x"}), store.ErrNotFound)

	name := func(e core.EventType) string { return e.Name }
	page, err := s.EventTypeList(f.ctx, store.EventTypeListParams{})
	noErr(t, "EventTypeList", err)
	same(t, "live event types", ids(page.Data, name), []string{"order.paid"})
	page, err = s.EventTypeList(f.ctx, store.EventTypeListParams{IncludeArchived: true, Limit: 1})
	noErr(t, "EventTypeList(archived)", err)
	same(t, "first page", ids(page.Data, name), []string{"order.created"})
	page, err = s.EventTypeList(f.ctx, store.EventTypeListParams{IncludeArchived: true, Limit: 1, Cursor: page.NextCursor})
	noErr(t, "EventTypeList(next)", err)
	same(t, "second page", ids(page.Data, name), []string{"order.paid"})
	if page.NextCursor != "" {
		t.Fatalf("cursor after the last page: %q", page.NextCursor)
	}

	noErr(t, "EventTypeDelete", s.EventTypeDelete(f.ctx, et.Name))
	wantErr(t, "EventTypeDelete(again)", s.EventTypeDelete(f.ctx, et.Name), store.ErrNotFound)
	_, err = s.EventTypeGet(f.ctx, et.Name)
	wantErr(t, "EventTypeGet(deleted)", err, store.ErrNotFound)
}
