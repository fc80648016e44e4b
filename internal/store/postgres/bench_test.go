package postgres

import (
	"fmt"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/store/storetest"
	"hookd/internal/testenv"
)

// BenchmarkEventInsertBatch measures the outbox write: one durable
// transaction per batch. Run with -benchmem; rows/s counts events+deliveries.
// It mirrors the SQLite benchmark, plus the 256 x 10 batch ingest can send.
func BenchmarkEventInsertBatch(b *testing.B) {
	for _, c := range []struct{ events, per int }{{1, 1}, {1, 10}, {100, 1}, {100, 10}, {256, 10}} {
		b.Run(fmt.Sprintf("events=%d/deliveries=%d", c.events, c.per), func(b *testing.B) {
			benchInsert(b, c.events, c.per)
		})
	}
}

func benchSubs(b *testing.B, s *Store, n int, now time.Time) []core.Subscription {
	subs := make([]core.Subscription, n)
	for i := range subs {
		host := fmt.Sprintf("h%d.example:443", i)
		subs[i] = core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://" + host,
			Host: host, EventTypes: []string{"*"}, Secret: "whsec_x", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
		if err := s.SubscriptionCreate(b.Context(), subs[i]); err != nil {
			b.Fatal(err)
		}
	}
	return subs
}

func benchBatch(subs []core.Subscription, events int, now time.Time, payload []byte) []store.EventInsert {
	batch := make([]store.EventInsert, events)
	for i := range batch {
		e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "payment.succeeded",
			Payload: payload, IdempotencyKey: core.NewID("idem"), CreatedAt: now}
		ds := make([]core.Delivery, len(subs))
		for j, sub := range subs {
			ds[j] = core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID,
				TenantID: e.TenantID, EventType: e.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host),
				State: core.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
		}
		batch[i] = store.EventInsert{Event: e, Deliveries: ds}
	}
	return batch
}

func benchInsert(b *testing.B, events, per int) {
	s := openURL(b, testenv.PostgresSchema(b))
	now := time.Now().UTC()
	subs := benchSubs(b, s, per, now)
	payload := []byte(`{"amount":1234,"currency":"eur","customer":"cus_0123456789","description":"a typical small webhook payload"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		batch := benchBatch(subs, events, now, payload)
		b.StartTimer()
		if _, err := s.EventInsertBatch(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*events*(1+per))/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkDeliveryRecordResults measures the result write: one durable
// transaction per batch of first-try successes.
func BenchmarkDeliveryRecordResults(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("results=%d", n), func(b *testing.B) {
			s := openURL(b, testenv.PostgresSchema(b))
			now := time.Now().UTC()
			subs := benchSubs(b, s, 1, now)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				batch := benchBatch(subs, n, now, []byte(`{}`))
				if _, err := s.EventInsertBatch(b.Context(), batch); err != nil {
					b.Fatal(err)
				}
				rs := make([]store.AttemptResult, n)
				for i, in := range batch {
					rs[i] = store.AttemptResult{Attempt: core.Attempt{DeliveryID: in.Deliveries[0].ID, N: 1, StartedAt: now,
						Duration: time.Millisecond, StatusCode: 200, Response: "ok"}, State: core.DeliveryDelivered, Now: now}
				}
				b.StartTimer()
				if err := s.DeliveryRecordResults(b.Context(), rs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "results/s")
		})
	}
}

// BenchmarkOrderedRefill: see storetest.BenchOrderedRefill.
func BenchmarkOrderedRefill(b *testing.B) {
	storetest.BenchOrderedRefill(b, func(b *testing.B) (store.Store, func()) {
		s := openURL(b, testenv.PostgresSchema(b))
		// Fresh statistics, as autovacuum keeps them.
		return s, func() {
			if _, err := s.pool.Exec(b.Context(), `ANALYZE`); err != nil {
				b.Fatal(err)
			}
		}
	})
}
