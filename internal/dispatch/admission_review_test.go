package dispatch

// What a review of the two-key admission found, in real time (also under
// -race); sim_admission_test.go has the simulations.

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/send"
	"hookd/internal/testenv"
)

// A subscription that moved host (its URL was edited) keeps its old lane
// while an attempt there finishes, beside its new one: its key goes once
// in a publish. Twice, PostgreSQL refused the whole batch ("ON CONFLICT DO
// UPDATE command cannot affect row a second time"), every host's and
// endpoint's change with it, every second until the old lane went.
func TestMovedSubscriptionIsPublishedOnceABatch(t *testing.T) {
	bd := setup(t)
	a := "old.example:443"
	b := ""
	for i := 0; ; i++ {
		if b = fmt.Sprintf("new%d.example:443", i); core.ShardOf(b) != core.ShardOf(a) {
			break
		}
	}
	bo := &board{leasing: leasing{Store: bd.store, shards: []int{core.ShardOf(a), core.ShardOf(b)}}}
	d := bd.run(t, Config{Store: bo, Sender: senderFunc(func(context.Context, *core.Subscription, *core.Job) send.Outcome {
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), Node: "node-1", LeaseTTL: time.Hour})
	d.mu.Lock()
	_, old := d.laneLocked(a, "sub_x")
	old.breaker.trip(time.Now())
	d.mu.Unlock()
	d.publishCircuits(t.Context())
	if got := bo.take(); len(got) != 1 || !got[0].Open {
		t.Fatalf("the open endpoint was not published: %+v", got)
	}
	// The subscription moves to b while its probe is in flight on a:
	// movedFromLocked resets the old lane, which stays for the attempt;
	// the new host's lane is made by the move.
	d.mu.Lock()
	old.inflight = 1
	d.movedFromLocked(old, &core.Subscription{ID: "sub_x", Host: b})
	d.laneLocked(b, "sub_x")
	d.moves = nil
	d.mu.Unlock()
	d.publishCircuits(t.Context())
	got := bo.take()
	seen := map[string]int{}
	for _, c := range got {
		seen[c.Key]++
	}
	t.Logf("one publish: %+v", got)
	if seen["sub_x"] > 1 {
		t.Errorf("key sub_x published %d times in one CircuitsPublish batch", seen["sub_x"])
	}
	d.mu.Lock()
	old.inflight = 0
	d.mu.Unlock()
}

// heldLane holds a rate-limited lane (rate_limit 5) with work queued that
// cannot start, its bucket a float ulp short of a token, and returns when
// its host's next wake-up is due. With laneFull the lane holds its
// max_concurrency of 1 with a hanging attempt; else another lane's hanging
// attempt holds the host's cap of 1.
func heldLane(t *testing.T, laneFull bool) time.Duration {
	b := setup(t)
	const host = "spin.example:80"
	hung := b.subscription(t, host)
	limited := b.subscription(t, host)
	limited.URL += "limited"
	limited.RateLimit = 5
	if laneFull {
		limited.MaxConcurrency = 1
	}
	limited.UpdatedAt = time.Now().UTC()
	b.subs.Put(limited)
	if err := b.store.SubscriptionUpdate(context.Background(), limited); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var inflight atomic.Int64
	cfg := Config{HostConcurrency: 1, Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		inflight.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return send.Outcome{Class: send.Retry, Err: "timeout"}
	})}
	holder, queued := hung, 5
	if laneFull {
		cfg.HostConcurrency = 0 // the default, 10
		holder, queued = limited, 4
	}
	d := b.run(t, cfg)
	defer close(release)
	b.pending(t, holder, 1)
	d.Wake(host, holder.ID)
	testenv.Eventually(t, 5*time.Second, "the slot is taken", func() bool { return inflight.Load() == 1 })
	b.pending(t, limited, queued)
	d.Wake(host, limited.ID)
	testenv.Eventually(t, 5*time.Second, "the limited lane holds its work", func() bool {
		w, _ := d.held(host)
		return w == queued
	})
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.hosts[host]
	now := time.Now()
	// Float sums can leave a bucket this short of a token (a simulation
	// found 0.99999999999999989 at rate 5).
	h.lanes[limited.ID].bucket = bucket{rate: 5, tokens: math.Nextafter(1, 0), last: now}
	h.wakeAt = time.Time{}
	d.pumpLocked(h, now)
	if h.wakeAt.IsZero() {
		return time.Hour
	}
	return h.wakeAt.Sub(now)
}

// A lane that cannot start (its host at its cap, or itself at its limit)
// does not wake its host for a token: its bucket is not refilled while it
// is held, so a token computed from it is stale. A float ulp short of a
// token, that wait rounded up to a nanosecond, every time: the loop
// re-pumped the host as fast as it could, holding the mutex.
func TestHeldLaneDoesNotWakeItsHostForAToken(t *testing.T) {
	for _, laneFull := range []bool{false, true} {
		if in := heldLane(t, laneFull); in < time.Millisecond {
			t.Errorf("lane full %v: the host's next wake-up is due in %s", laneFull, in)
		}
	}
}

// A bucket a float ulp short of a token has one.
func TestBucketForgivesAnUlp(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	k := bucket{rate: 5, tokens: math.Nextafter(1, 0), last: now}
	if !k.ready(now, 5) || !k.nextToken(now).Equal(now) {
		t.Fatalf("tokens %v: ready %v, next token in %s", k.tokens, k.ready(now, 5), k.nextToken(now).Sub(now))
	}
}
