package storetest

import (
	"fmt"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// BenchOrderedRefill measures one lane refill (DeliveryDue) of a
// subscription with a backlog: unordered (keys 0), behind a few ordering
// keys, or spread over one key per row. 100 of its due rows are in flight
// (excluded): the keys' heads where it is ordered. open returns the store
// and what to run once the backlog is written (nil: nothing).
func BenchOrderedRefill(b *testing.B, open func(*testing.B) (store.Store, func())) {
	for _, c := range []struct{ pending, keys int }{{10000, 0}, {1000, 4}, {10000, 4}, {10000, 10000}} {
		b.Run(fmt.Sprintf("pending=%d/keys=%d", c.pending, c.keys), func(b *testing.B) {
			s, written := open(b)
			sub, now, exclude := Backlog(b, s, c.pending, c.keys)
			if written != nil {
				written()
			}
			for b.Loop() {
				if _, _, err := s.DeliveryDue(b.Context(), store.DeliveryDueParams{SubscriptionID: sub.ID,
					Now: now.Add(time.Second), Limit: 100, Exclude: exclude}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Backlog makes the subscription BenchOrderedRefill refills, with pending
// rows due at the time it returns, and the rows it names in flight.
func Backlog(b testing.TB, s store.Store, pending, keys int) (core.Subscription, time.Time, []string) {
	ctx := b.Context()
	now := time.Now().UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://backlog.example",
		Host: "backlog.example:443", EventTypes: []string{"*"}, Secret: "whsec_x", State: core.SubActive,
		Ordered: keys > 0, CreatedAt: now, UpdatedAt: now}
	if err := s.SubscriptionCreate(ctx, sub); err != nil {
		b.Fatal(err)
	}
	seen := map[string]bool{}
	exclude := []string{}
	for i := 0; i < pending; i += 500 {
		batch := []store.EventInsert{}
		for j := i; j < min(i+500, pending); j++ {
			key := ""
			if keys > 0 {
				key = fmt.Sprintf("k%d", j%keys)
			}
			e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "t",
				Payload: []byte(`{}`), OrderingKey: key, CreatedAt: now}
			d := dlv(e, sub, now)
			if (keys == 0 || !seen[key]) && len(exclude) < 100 {
				exclude = append(exclude, d.ID)
			}
			seen[key] = true
			batch = append(batch, store.EventInsert{Event: e, Deliveries: []core.Delivery{d}})
		}
		if _, err := s.EventInsertBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	return sub, now, exclude
}
