package dispatch

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/send"
	"hookd/internal/store"
)

// countingStore takes result batches without writing them, so the
// benchmark measures the dispatcher's own bookkeeping, not SQLite.
type countingStore struct {
	store.Store
	written atomic.Int64
}

func (c *countingStore) DeliveryRecordResults(_ context.Context, rs []store.AttemptResult) error {
	c.written.Add(int64(len(rs)))
	return nil
}

// BenchmarkDispatchBookkeeping: hand-off, admission, lane selection,
// retry policy and result batching for one delivery, with an endpoint that
// answers at once and a store that takes results without writing: ten
// endpoints on hosts of their own, and 100 paths of one shared host
// (where every start looks at the host's lanes for the fair share).
func BenchmarkDispatchBookkeeping(b *testing.B) {
	b.Run("10-hosts", func(b *testing.B) {
		benchBookkeeping(b, 10, func(i int) string { return fmt.Sprintf("h%d.example:443", i) })
	})
	b.Run("1-host-100-paths", func(b *testing.B) {
		benchBookkeeping(b, 100, func(int) string { return "gateway.example:443" })
	})
}

func benchBookkeeping(b *testing.B, n int, hostOf func(i int) string) {
	bd := setup(&testing.T{})
	var subsList []core.Subscription
	for i := range n {
		subsList = append(subsList, bd.subscriptionB(b, hostOf(i), i))
	}
	cs := &countingStore{Store: bd.store}
	d := New(Config{Store: cs, Subs: bd.subs, Resync: time.Hour, FlushInterval: 200 * time.Microsecond,
		Sender: senderFunc(func(context.Context, *core.Subscription, *core.Job) send.Outcome {
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		})})
	if err := d.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer d.Stop(context.Background())
	now := time.Now()
	// Hand over at most a window per lane at a time, as the store would
	// otherwise take the overflow, and wait for those results.
	chunk := len(subsList) * (d.cfg.Window - 2)
	jobs := make([]core.Job, 0, chunk)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s := subsList[i%len(subsList)]
		jobs = append(jobs, core.Job{
			Delivery: core.Delivery{ID: core.NewID("dlv"), SubscriptionID: s.ID, Host: s.Host,
				State: core.DeliveryPending, NextAttemptAt: now},
			Event: core.Event{ID: core.NewID("evt"), Type: "a.b", Payload: []byte(`{}`)},
		})
		if len(jobs) == chunk || i == b.N-1 {
			d.Notify(jobs)
			jobs = jobs[:0]
			for cs.written.Load() < int64(i+1) {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
}

func (b *bundle) subscriptionB(tb testing.TB, host string, path int) core.Subscription {
	s := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: fmt.Sprintf("https://%s/p%d", host, path),
		Host: host, EventTypes: []string{"*"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		State: core.SubActive}
	b.subs.Put(s)
	return s
}
