package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// The tenant-wide logs: events and deliveries of one tenant newest first
// (by creation time, then ID), paged without loss or repeat, each filter
// keeping what it names and nothing of another tenant; the types a tenant
// sent; and a subscription's deliveries counted as a bulk replay selects
// them.
func testLogs(t *testing.T, s store.Store) {
	f := newFx(t, s)
	a, b := f.tenant(), f.tenant()
	subA, subA2, subB := f.sub(a.ID, "a.example:443"), f.sub(a.ID, "a2.example:443"), f.sub(b.ID, "b.example:443")
	type made struct {
		ev core.Event
		ds []core.Delivery
	}
	var events []made // tenant a's, oldest first
	types := []string{"order.created", "order.paid", "invoice.sent"}
	for i := range 12 {
		e := ev(a.ID, types[i%3], func(e *core.Event) { e.CreatedAt = at(time.Duration(i/2) * time.Minute) }) // pairs share a time
		if i == 4 {
			e.IdempotencyKey = "key-4"
		}
		res := f.insert(item(e, t0, subA, subA2))
		events = append(events, made{e, res[0].Deliveries})
	}
	f.insert(item(ev(b.ID, "order.created", key("key-4")), t0, subB))
	f.insert(item(ev(b.ID, "secret.type"), t0, subB))
	// Some results: subA's deliveries of the first four events fail with 500, one is delivered.
	var rs []store.AttemptResult
	for i, m := range events[:5] {
		state, status := core.DeliveryFailed, 500
		if i == 4 {
			state, status = core.DeliveryDelivered, 200
		}
		rs = append(rs, store.AttemptResult{SubscriptionID: subA.ID, State: state, Now: at(time.Hour),
			Attempt: core.Attempt{DeliveryID: m.ds[0].ID, N: 1, StartedAt: at(time.Hour), StatusCode: status}})
	}
	noErr(t, "DeliveryRecordResults", s.DeliveryRecordResults(f.ctx, rs))

	// want lists event IDs newest first: by time, then ID descending.
	want := func(keep func(i int, m made) bool) []string {
		var sel []made
		for i, m := range events {
			if keep(i, m) {
				sel = append(sel, m)
			}
		}
		slices.SortFunc(sel, func(x, y made) int {
			if c := y.ev.CreatedAt.Compare(x.ev.CreatedAt); c != 0 {
				return c
			}
			switch {
			case x.ev.ID > y.ev.ID:
				return -1
			case x.ev.ID < y.ev.ID:
				return 1
			}
			return 0
		})
		return ids(sel, func(m made) string { return m.ev.ID })
	}
	listEvents := func(p store.EventListParams) []string {
		t.Helper()
		var out []string
		for range 100 {
			page, err := s.EventList(f.ctx, p)
			noErr(t, "EventList", err)
			for _, e := range page.Data {
				if len(e.Payload) != 0 {
					t.Fatalf("EventList carries a payload: %s", e.Payload)
				}
				out = append(out, e.ID)
			}
			if page.NextCursor == "" {
				return out
			}
			p.Cursor = page.NextCursor
		}
		t.Fatal("EventList does not end")
		return nil
	}
	all := func(int, made) bool { return true }
	same(t, "events, 5 a page", listEvents(store.EventListParams{TenantID: a.ID, Limit: 5}), want(all))
	same(t, "events of a type", listEvents(store.EventListParams{TenantID: a.ID, Types: []string{"order.paid"}, Limit: 2}),
		want(func(_ int, m made) bool { return m.ev.Type == "order.paid" }))
	same(t, "events in [+1m, +3m)", listEvents(store.EventListParams{TenantID: a.ID, Since: at(time.Minute), Until: at(3 * time.Minute), Limit: 3}),
		want(func(_ int, m made) bool {
			return !m.ev.CreatedAt.Before(at(time.Minute)) && m.ev.CreatedAt.Before(at(3*time.Minute))
		}))
	same(t, "event by idempotency key", listEvents(store.EventListParams{TenantID: a.ID, IdempotencyKey: "key-4"}), []string{events[4].ev.ID})
	same(t, "another tenant's type", listEvents(store.EventListParams{TenantID: a.ID, Types: []string{"secret.type"}}), []string(nil))
	page, err := s.EventList(f.ctx, store.EventListParams{TenantID: a.ID, Limit: 1})
	noErr(t, "EventList", err)
	if e := page.Data[0]; e.Type == "" || e.TenantID != a.ID || !e.CreatedAt.Equal(events[11].ev.CreatedAt) {
		t.Fatalf("EventList row %+v, want the newest event's fields", e)
	}

	listDeliveries := func(p store.DeliveryListParams) []string {
		t.Helper()
		var out []string
		for range 100 {
			page, err := s.DeliveryListTenant(f.ctx, p)
			noErr(t, "DeliveryListTenant", err)
			out = append(out, ids(page.Data, dlvID)...)
			if page.NextCursor == "" {
				return out
			}
			p.Cursor = page.NextCursor
		}
		t.Fatal("DeliveryListTenant does not end")
		return nil
	}
	// Deliveries of a: both subscriptions', newest event first (by time,
	// then ID), an event's by subscription ID, descending.
	wantDeliveries := func(keep func(i int, d core.Delivery) bool) []string {
		var sel []core.Delivery
		for i, m := range events {
			for _, d := range m.ds {
				if keep(i, d) {
					sel = append(sel, d)
				}
			}
		}
		slices.SortFunc(sel, func(x, y core.Delivery) int {
			if c := y.CreatedAt.Compare(x.CreatedAt); c != 0 {
				return c
			}
			if c := strings.Compare(y.EventID, x.EventID); c != 0 {
				return c
			}
			return strings.Compare(y.SubscriptionID, x.SubscriptionID)
		})
		return ids(sel, dlvID)
	}
	for _, limit := range []int{1, 3, 7, 100} { // pages ending inside an event's deliveries too
		same(t, fmt.Sprintf("deliveries, %d a page", limit), listDeliveries(store.DeliveryListParams{TenantID: a.ID, Limit: limit}),
			wantDeliveries(func(int, core.Delivery) bool { return true }))
	}
	failed := wantDeliveries(func(i int, d core.Delivery) bool { return d.SubscriptionID == subA.ID && i < 4 })
	same(t, "failed deliveries", listDeliveries(store.DeliveryListParams{TenantID: a.ID, State: core.DeliveryFailed, Limit: 3}), failed)
	same(t, "deliveries answered 500", listDeliveries(store.DeliveryListParams{TenantID: a.ID, Status: 500}), failed)
	same(t, "deliveries answered 200", listDeliveries(store.DeliveryListParams{TenantID: a.ID, Status: 200}), []string{events[4].ds[0].ID})
	same(t, "deliveries of a type since +2m", listDeliveries(store.DeliveryListParams{TenantID: a.ID, EventType: "invoice.sent", Since: at(2 * time.Minute)}),
		wantDeliveries(func(i int, d core.Delivery) bool { return d.EventType == "invoice.sent" && i >= 4 }))
	same(t, "deliveries of one subscription", listDeliveries(store.DeliveryListParams{TenantID: a.ID, SubscriptionID: subA2.ID, Until: at(time.Minute)}),
		wantDeliveries(func(i int, d core.Delivery) bool { return d.SubscriptionID == subA2.ID && i < 2 }))
	same(t, "another tenant's subscription", listDeliveries(store.DeliveryListParams{TenantID: a.ID, SubscriptionID: subB.ID}), []string(nil))

	// The types a tenant sent, in order, paged by the last one.
	got, err := s.EventTypesSent(f.ctx, a.ID, "", 100)
	noErr(t, "EventTypeList", err)
	same(t, "types", got, []string{"invoice.sent", "order.created", "order.paid"})
	got, err = s.EventTypesSent(f.ctx, a.ID, "invoice.sent", 1)
	noErr(t, "EventTypeList after", err)
	same(t, "types after invoice.sent, one", got, []string{"order.created"})
	got, err = s.EventTypesSent(f.ctx, "nobody", "", 10)
	noErr(t, "EventTypeList of nobody", err)
	if len(got) != 0 {
		t.Fatalf("types of a tenant with no events: %v", got)
	}

	// Counted as a bulk replay selects them.
	count := func(p store.DeliveryCountParams) int {
		t.Helper()
		if p.Max == 0 {
			p.Max = 1000
		}
		n, err := s.DeliveryCount(f.ctx, p)
		noErr(t, "DeliveryCount", err)
		return n
	}
	failedStates := []core.DeliveryState{core.DeliveryFailed, core.DeliverySkipped}
	if n := count(store.DeliveryCountParams{TenantID: a.ID, SubscriptionID: subA.ID, States: failedStates}); n != 4 {
		t.Fatalf("failed and skipped of subA: %d, want 4", n)
	}
	if n := count(store.DeliveryCountParams{SubscriptionID: subA.ID, States: failedStates, Since: at(time.Minute), EventTypes: []string{"order.paid", "invoice.sent"}}); n != 1 {
		t.Fatalf("failed and skipped of subA since +1m of two types: %d, want 1 (the third event)", n)
	}
	if n := count(store.DeliveryCountParams{SubscriptionID: subA.ID, States: []core.DeliveryState{core.DeliveryPending}, Until: at(3 * time.Minute)}); n != 1 {
		t.Fatalf("pending of subA before +3m: %d, want 1", n)
	}
	if n := count(store.DeliveryCountParams{SubscriptionID: subA2.ID, States: []core.DeliveryState{core.DeliveryPending}, Max: 5}); n != 5 {
		t.Fatalf("pending of subA2 up to 5: %d, want 5", n)
	}
	if _, err := s.DeliveryCount(f.ctx, store.DeliveryCountParams{TenantID: b.ID, SubscriptionID: subA.ID, States: failedStates, Max: 10}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("counting another tenant's: %v, want ErrNotFound", err)
	}
}
