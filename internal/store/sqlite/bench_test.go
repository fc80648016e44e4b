package sqlite

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/store/storetest"
)

// BenchmarkEventInsertBatch measures the outbox write: one durable
// transaction per batch. Run with -benchmem; rows/s counts events+deliveries.
func BenchmarkEventInsertBatch(b *testing.B) {
	for _, events := range []int{1, 100} {
		for _, per := range []int{1, 10} {
			b.Run(fmt.Sprintf("events=%d/deliveries=%d", events, per), func(b *testing.B) {
				benchInsert(b, events, per)
			})
		}
	}
}

// benchStore opens a fresh store with n subscriptions, each on its own host.
func benchStore(b *testing.B, n int) (*Store, []core.Subscription) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "bench.db"), testKeys)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	now := time.Now().UTC()
	subs := make([]core.Subscription, n)
	for i := range subs {
		host := fmt.Sprintf("h%d.example:443", i)
		subs[i] = core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://" + host,
			Host: host, EventTypes: []string{"*"}, Secret: "whsec_x", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
		if err := s.SubscriptionCreate(b.Context(), subs[i]); err != nil {
			b.Fatal(err)
		}
	}
	return s, subs
}

func benchInsert(b *testing.B, events, per int) {
	ctx := b.Context()
	s, subs := benchStore(b, per)
	now := time.Now().UTC()
	payload := []byte(`{"amount":1234,"currency":"eur","customer":"cus_0123456789","description":"a typical small webhook payload"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		batch := make([]store.EventInsert, events)
		for i := range batch {
			e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "payment.succeeded",
				Payload: payload, IdempotencyKey: core.NewID("idem"), CreatedAt: now}
			ds := make([]core.Delivery, per)
			for j, sub := range subs {
				ds[j] = core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID,
					TenantID: e.TenantID, EventType: e.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host),
					State: core.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
			}
			batch[i] = store.EventInsert{Event: e, Deliveries: ds}
		}
		b.StartTimer()
		if _, err := s.EventInsertBatch(ctx, batch); err != nil {
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
			ctx := b.Context()
			s, subs := benchStore(b, 1)
			sub, host, now := subs[0], subs[0].Host, time.Now().UTC()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				batch := make([]store.EventInsert, n)
				rs := make([]store.AttemptResult, n)
				for i := range batch {
					e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "payment.succeeded",
						Payload: []byte(`{}`), CreatedAt: now}
					d := core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID,
						TenantID: e.TenantID, EventType: e.Type, Host: host, Shard: core.ShardOf(host),
						State: core.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
					batch[i] = store.EventInsert{Event: e, Deliveries: []core.Delivery{d}}
					rs[i] = store.AttemptResult{Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: now,
						Duration: time.Millisecond, StatusCode: 200, Response: "ok"}, State: core.DeliveryDelivered, Now: now}
				}
				if _, err := s.EventInsertBatch(ctx, batch); err != nil {
					b.Fatal(err)
				}
				s.rides.mu.Lock()
				s.rides.lastWrite = time.Time{} // a write of its own, not waiting for a carrier
				s.rides.mu.Unlock()
				b.StartTimer()
				if err := s.DeliveryRecordResults(ctx, rs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "results/s")
		})
	}
}

// BenchmarkLifecycle measures what the store spends per delivery in the
// steady state at fanout 10 and 1: each op commits one ingest batch (10
// events, or 4, each to every subscription) and the first-try successes of the
// batch before it, which are written beside it, as under load (so they
// ride in an ingest commit). cpu-µs/delivery is the process's CPU time,
// fsync waits left out; wal-pages/delivery counts the pages the commits
// wrote (WAL frames, checkpoints held off for the run): what a delivery
// costs in B-tree pages, steady where the timings are not.
func BenchmarkLifecycle(b *testing.B) {
	for _, fanout := range []int{10, 1} {
		b.Run(fmt.Sprintf("fanout=%d", fanout), func(b *testing.B) { benchLifecycle(b, 10, fanout) })
	}
	// The commits of a live run at 32 clients hold 4 to 6 events.
	b.Run("fanout=1,events=4", func(b *testing.B) { benchLifecycle(b, 4, 1) })
}

func benchLifecycle(b *testing.B, events, fanout int) {
	ctx := b.Context()
	s, subs := benchStore(b, fanout)
	wal := walFrames(b, s)
	payload := []byte(`{"amount":1234,"currency":"eur","customer":"cus_0123456789","description":"a typical small webhook payload"}`)
	var prev []store.AttemptResult
	var pending chan error // the result write of the op before
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		now := time.Now().UTC()
		batch := make([]store.EventInsert, events)
		var rs []store.AttemptResult
		for i := range batch {
			e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "payment.succeeded",
				Payload: payload, CreatedAt: now}
			ds := make([]core.Delivery, fanout)
			for j, sub := range subs {
				ds[j] = core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID,
					TenantID: e.TenantID, EventType: e.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host),
					State: core.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
				rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: ds[j].ID, N: 1, StartedAt: now,
					Duration: time.Millisecond, StatusCode: 200, Response: "ok"}, State: core.DeliveryDelivered, Now: now})
			}
			batch[i] = store.EventInsert{Event: e, Deliveries: ds}
		}
		// As in a node under load, ingest never waits for results: the
		// previous batch's go out beside this commit (riding in it or the
		// next), and only the batch before those is waited for here.
		errc := make(chan error, 1)
		if prev != nil {
			go func(prev []store.AttemptResult) { errc <- s.DeliveryRecordResults(ctx, prev) }(prev)
		} else {
			errc <- nil
		}
		if _, err := s.EventInsertBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
		if pending != nil {
			if err := <-pending; err != nil {
				b.Fatal(err)
			}
		}
		prev, pending = rs, errc
	}
	if pending != nil {
		if err := <-pending; err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N * events * fanout)
	b.ReportMetric(b.Elapsed().Seconds()*1e6/n, "µs/delivery")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e6/n, "cpu-µs/delivery")
	b.ReportMetric(float64(wal())/n, "wal-pages/delivery")
}

// walFrames holds s's checkpoints off and returns a count of the WAL
// frames (pages) written since.
func walFrames(b *testing.B, s *Store) func() int64 {
	ctx := b.Context()
	var path string
	if err := s.w.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&path); err != nil {
		b.Fatal(err)
	}
	var pageSize int64
	if err := s.w.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		b.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0`); err != nil {
		b.Fatal(err)
	}
	if _, err := execDirect(s.d, `PRAGMA wal_autocheckpoint = 0`); err != nil {
		b.Fatal(err)
	}
	var busy, frames, done int
	if err := s.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done); err != nil || busy != 0 {
		b.Fatalf("checkpoint: busy %d, %v", busy, err)
	}
	return func() int64 {
		fi, err := os.Stat(path + "-wal")
		if err != nil {
			b.Fatal(err)
		}
		const walHeader, frameHeader = 32, 24
		return (fi.Size() - walHeader) / (pageSize + frameHeader)
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkOrderedRefill measures one lane refill of a subscription
// whose backlog sits behind a few ordering keys, their heads in flight
// (excluded): the refill must not cost the whole backlog.
func BenchmarkOrderedRefill(b *testing.B) {
	storetest.BenchOrderedRefill(b, func(b *testing.B) (store.Store, func()) {
		s, _ := benchStore(b, 0)
		return s, nil
	})
}
