//go:build !race

package dispatch

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"hookd/internal/core"
)

// A node whose lease renewals fail starts no send once its leases are
// within a third of their TTL of lapsing (another node may take the shards
// at the lapse), and starts again as soon as a renewal succeeds.
func TestSimLeaseLapseStopsSends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, sub := s.endpoint("leased", ok(100*time.Millisecond))
		const ttl = 3 * time.Second
		t0 := time.Now()
		// Renewals fail from 0.5 s to 6 s: the last good one is at t0, so the
		// leases lapse at t0+3s and sends must stop at t0+2s.
		l := &leasing{Store: s.store, shards: []int{core.ShardOf(sub.Host)}, failing: func(now time.Time) bool {
			return now.Sub(t0) >= 500*time.Millisecond && now.Sub(t0) < 6*time.Second
		}}
		s.d = New(Config{Store: l, Subs: s.subs, Sender: s.fleet, HostConcurrency: 1, Node: "n", LeaseTTL: ttl,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		s.pendingFor(sub, 200)
		if err := s.d.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		s.d.Stop(context.Background())
		s.store.Close()

		stopAt := t0.Add(ttl - ttl/3)
		var resumed time.Time // first good renewal after the failures
		for _, at := range l.leased {
			if at.After(stopAt) {
				resumed = at
				break
			}
		}
		if resumed.IsZero() {
			t.Fatalf("no renewal succeeded after the failures: %v", l.leased)
		}
		var before, during, after int
		for _, a := range ep.snapshot() {
			switch {
			case a.start.Before(stopAt):
				before++
			case a.start.Before(resumed):
				during++
				t.Errorf("a send started %s after t0, while the leases were within ttl/3 of lapsing", a.start.Sub(t0))
			default:
				after++
			}
		}
		// 100 ms per send, one at a time: about 20 before the stop.
		if before < 15 || after == 0 {
			t.Fatalf("sends: %d before the stop at +%s, %d until the renewal at +%s, %d after; want ~20, 0, some",
				before, stopAt.Sub(t0), during, resumed.Sub(t0), after)
		}
		t.Logf("sends: %d before +%s, none until the renewal at +%s, %d after", before, stopAt.Sub(t0), resumed.Sub(t0), after)
	})
}

// pendingFor writes n pending deliveries for sub straight into the store.
func (s *sim) pendingFor(sub core.Subscription, n int) {
	b := &bundle{store: s.store, subs: s.subs}
	b.pending(s.t, sub, n)
}
