package postgres

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// activeSub creates an active subscription of the default tenant on host.
func activeSub(t *testing.T, s *Store, host string) core.Subscription {
	t.Helper()
	now := time.Now().UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://" + host + "/",
		Host: host, EventTypes: []string{"*"}, Secret: "whsec_x", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := s.SubscriptionCreate(t.Context(), sub); err != nil {
		t.Fatal(err)
	}
	return sub
}

// event builds one event with a pending delivery to each of subs.
func event(subs ...core.Subscription) store.EventInsert {
	now := time.Now().UTC()
	e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "t", Payload: []byte(`{}`), CreatedAt: now}
	in := store.EventInsert{Event: e}
	for _, sub := range subs {
		in.Deliveries = append(in.Deliveries, core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID,
			TenantID: e.TenantID, EventType: e.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host),
			State: core.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now})
	}
	return in
}

func insert(t *testing.T, s *Store, batch ...store.EventInsert) []store.EventInsertResult {
	t.Helper()
	res, err := s.EventInsertBatch(t.Context(), batch)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
