package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// leasing makes a store a store.Leaser whose answers the test decides, and
// records what the dispatcher asks of it.
type leasing struct {
	store.Store
	mu         sync.Mutex
	shards     []int
	failing    func(now time.Time) bool // nil: never
	leased     []time.Time              // the now of each successful ShardLeases
	asked      [][]int                  // DeliveryPendingSubscriptions' shards, per call
	released   []string
	leaving    []int // answered as leaving until handed over
	handedOver []int
	// failPending makes DeliveryPendingSubscriptions fail when it answers
	// true for the shards asked (nil: never).
	failPending func(shards []int) bool
}

func (l *leasing) ShardLeases(_ context.Context, node string, ttl time.Duration, now time.Time) ([]int, []int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing != nil && l.failing(now) {
		return nil, nil, errors.New("database unreachable")
	}
	l.leased = append(l.leased, now)
	return slices.Clone(l.shards), slices.Clone(l.leaving), nil
}

func (l *leasing) ShardHandOver(_ context.Context, node string, shards []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.handedOver = append(l.handedOver, shards...)
	l.leaving = slices.DeleteFunc(l.leaving, func(s int) bool { return slices.Contains(shards, s) })
	return nil
}

func (l *leasing) handed() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.handedOver)
}

func (l *leasing) ShardRelease(_ context.Context, node string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released = append(l.released, node)
	return nil
}

func (l *leasing) DeliveryPendingSubscriptions(ctx context.Context, shards []int) ([]store.SubscriptionDue, error) {
	l.mu.Lock()
	l.asked = append(l.asked, slices.Clone(shards))
	fail := l.failPending != nil && l.failPending(shards)
	l.mu.Unlock()
	if fail {
		return nil, errors.New("statement timeout")
	}
	return l.Store.DeliveryPendingSubscriptions(ctx, shards)
}

func (l *leasing) set(shards ...int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.shards = shards
}

func (l *leasing) lastAsked() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.asked) == 0 {
		return nil
	}
	return l.asked[len(l.asked)-1]
}

// twoShards returns two hosts on different shards.
func twoShards() (string, string) {
	a := "mine.example:443"
	for i := 0; ; i++ {
		if b := fmt.Sprintf("theirs%d.example:443", i); core.ShardOf(b) != core.ShardOf(a) {
			return a, b
		}
	}
}

func (b *bundle) startLeased(t *testing.T, l *leasing, s Sender, hostConc int) *Dispatcher {
	t.Helper()
	return b.run(t, Config{Store: l, Sender: s, HostConcurrency: hostConc, Node: "node-1", LeaseTTL: 3 * time.Second})
}

func (d *Dispatcher) hasHost(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hosts[name] != nil
}

// A node sends only to hosts on its shards: the resync asks for those, and
// hand-offs and wake-ups for other shards are left to their owner.
func TestOnlyOwnedShardsAreDispatched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mineHost, theirsHost := twoShards()
	mine, theirs := b.subscription(t, mineHost), b.subscription(t, theirsHost)
	mineIDs := b.pending(t, mine, 5)
	theirIDs := b.pending(t, theirs, 5)
	var sentTheirs atomic.Int64
	l := &leasing{Store: b.store, shards: []int{core.ShardOf(mineHost)}}
	d := b.startLeased(t, l, senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		if s.Host == theirsHost {
			sentTheirs.Add(1)
		}
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), 0)
	if got := l.lastAsked(); !slices.Equal(got, []int{core.ShardOf(mineHost)}) {
		t.Fatalf("resync asked for shards %v, want only the owned one", got)
	}
	for _, id := range mineIDs {
		testenv.Eventually(t, 10*time.Second, id+" delivered", func() bool { return b.state(t, id).State == core.DeliveryDelivered })
	}

	// A hand-off and a wake-up for the other shard change nothing here.
	ev := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`)}
	d.Notify([]core.Job{{Event: ev, Delivery: core.Delivery{ID: theirIDs[0], EventID: ev.ID,
		SubscriptionID: theirs.ID, Host: theirsHost, Shard: core.ShardOf(theirsHost), State: core.DeliveryPending}}})
	d.Wake(theirsHost, theirs.ID)
	if d.hasHost(theirsHost) || sentTheirs.Load() != 0 {
		t.Fatalf("the other shard's host is held (%v) or was sent to (%d times)", d.hasHost(theirsHost), sentTheirs.Load())
	}
	for _, id := range theirIDs {
		if st := b.state(t, id); st.State != core.DeliveryPending || st.AttemptCount != 0 {
			t.Errorf("%s on the other shard: %s after %d attempts, want untouched", id, st.State, st.AttemptCount)
		}
	}
	if got := d.Shards(); !slices.Equal(got, []int{core.ShardOf(mineHost)}) {
		t.Errorf("Shards() = %v", got)
	}
}

// A lost shard's queued work leaves memory at once; the attempt in flight
// finishes and its result is written; gaining the shard back resyncs it.
func TestLostShardDropsQueuedWorkAndGainedShardResyncs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	host := "mine.example:443"
	sub := b.subscription(t, host)
	ids := b.pending(t, sub, 5)
	release := make(chan struct{})
	var sent atomic.Int64
	l := &leasing{Store: b.store, shards: []int{core.ShardOf(host)}}
	d := b.startLeased(t, l, senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		if sent.Add(1) == 1 {
			<-release // the first attempt is in flight when the shard goes
		}
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), 1)
	testenv.Eventually(t, 5*time.Second, "one attempt in flight, the rest queued", func() bool {
		s := d.Stats()
		return s.Inflight == 1 && s.Window == 4
	})

	l.set() // the shard went to another node
	d.Rebalance()
	testenv.Eventually(t, 5*time.Second, "queued work dropped", func() bool { return d.Stats().Window == 0 })
	if s := d.Stats(); s.Inflight != 1 {
		t.Fatalf("in flight %d after losing the shard, want the 1 attempt still running", s.Inflight)
	}
	close(release)
	testenv.Eventually(t, 5*time.Second, "the in-flight result written and the host let go", func() bool {
		n := 0
		for _, id := range ids {
			if b.state(t, id).State == core.DeliveryDelivered {
				n++
			}
		}
		return n == 1 && !d.hasHost(host)
	})
	if n := sent.Load(); n != 1 {
		t.Fatalf("%d attempts after the shard was lost, want only the one in flight", n)
	}

	l.set(core.ShardOf(host)) // and back
	d.Rebalance()
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" delivered after regaining the shard", func() bool {
			return b.state(t, id).State == core.DeliveryDelivered
		})
	}
	if got := l.lastAsked(); !slices.Equal(got, []int{core.ShardOf(host)}) {
		t.Errorf("regained shard resynced with %v, want just it", got)
	}
}

// A gained shard whose resync fails (it shares the renewal's short
// budget) is resynced again at once, not at the next periodic resync (30 s
// here, longer than the test waits).
func TestFailedResyncOfGainedShardIsRetriedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	host := "gained.example:443"
	sub := b.subscription(t, host)
	ids := b.pending(t, sub, 3)
	var failed atomic.Bool
	l := &leasing{Store: b.store, failPending: func(shards []int) bool {
		// Only the gained shard's own resync, once.
		return len(shards) == 1 && shards[0] == core.ShardOf(host) && failed.CompareAndSwap(false, true)
	}}
	d := b.startLeased(t, l, senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), 0)
	l.set(core.ShardOf(host))
	d.Rebalance()
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" delivered after its shard was gained", func() bool {
			return b.state(t, id).State == core.DeliveryDelivered
		})
	}
	if !failed.Load() {
		t.Fatal("the gained shard's resync never failed: the test did not test anything")
	}
}

// Stop gives the leases back only after the attempt in flight finished
// and its result was written.
func TestStopReleasesLeasesAfterInFlightWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	host := "mine.example:443"
	sub := b.subscription(t, host)
	ids := b.pending(t, sub, 1)
	arrived, release := make(chan struct{}), make(chan struct{})
	l := &leasing{Store: b.store, shards: []int{core.ShardOf(host)}}
	d := b.startLeased(t, l, senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		close(arrived)
		<-release
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), 0)
	<-arrived
	stopped := make(chan struct{})
	go func() {
		d.Stop(context.Background())
		close(stopped)
	}()
	testenv.Eventually(t, 5*time.Second, "stopping", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.stopping
	})
	l.mu.Lock()
	early := len(l.released)
	l.mu.Unlock()
	if early != 0 {
		t.Fatal("leases released while an attempt was in flight")
	}
	close(release)
	<-stopped
	if st := b.state(t, ids[0]).State; st != core.DeliveryDelivered {
		t.Fatalf("after Stop the delivery is %s, want its result written", st)
	}
	if !slices.Equal(l.released, []string{"node-1"}) {
		t.Fatalf("released %v, want node-1 once", l.released)
	}
}

// Shards the store says this node is leaving are handed over once idle,
// even ones it never knew it held (it restarted under the same name, or a
// reply was lost): otherwise nobody would ever send to them again.
func TestLeavingShardsTheNodeDidNotKnowOfAreHandedOver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := &leasing{Store: b.store, shards: []int{1, 2}, leaving: []int{5, 7}}
	b.startLeased(t, l, senderFunc(func(context.Context, *core.Subscription, *core.Job) send.Outcome {
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), 10)
	testenv.Eventually(t, 5*time.Second, "shards 5 and 7 handed over", func() bool {
		got := l.handed()
		return slices.Contains(got, 5) && slices.Contains(got, 7)
	})
	if got := l.handed(); slices.ContainsFunc(got, func(s int) bool { return s == 1 || s == 2 }) {
		t.Fatalf("handed over %v, which includes shards still held", got)
	}
}

// board records what publishCircuits sends.
type board struct {
	leasing
	mu  sync.Mutex
	got []store.Circuit
}

func (b *board) CircuitsPublish(_ context.Context, cs []store.Circuit) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, cs...)
	return nil
}

func (b *board) CircuitsGet(context.Context, []string) ([]store.Circuit, error) {
	return nil, nil
}

func (b *board) take() []store.Circuit {
	b.mu.Lock()
	defer b.mu.Unlock()
	got := b.got
	b.got = nil
	return got
}

// An owned host's breaker is published when it opens, again when it
// re-opens with a new retry time, and once more when it closes; a closed
// breaker that never opened is not published at all. So are its
// endpoints' own circuits and pauses.
func TestBreakersArePublishedWhenTheyChange(t *testing.T) {
	bd := setup(t)
	mine, _ := twoShards()
	bo := &board{leasing: leasing{Store: bd.store, shards: []int{core.ShardOf(mine)}}}
	d := bd.run(t, Config{Store: bo, Sender: senderFunc(func(context.Context, *core.Subscription, *core.Job) send.Outcome {
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), Node: "node-1", LeaseTTL: time.Hour})
	if d.board == nil {
		t.Fatal("a leasing store that is a CircuitBoard was not used as one")
	}
	d.mu.Lock()
	h, l := d.laneLocked(mine, "sub_x")
	d.mu.Unlock()
	publish := func() []store.Circuit {
		d.publishCircuits(t.Context())
		return bo.take()
	}
	if got := publish(); len(got) != 0 {
		t.Fatalf("a closed breaker was published: %+v", got)
	}
	d.mu.Lock()
	h.breaker.trip(time.Now())
	retry := h.breaker.retryAt
	d.mu.Unlock()
	before := time.Now()
	if got := publish(); len(got) != 1 || !got[0].Open || got[0].Key != mine ||
		got[0].RetryIn <= 0 || got[0].RetryIn > retry.Sub(before) {
		t.Fatalf("after opening (retry at %v): %+v", retry, got)
	}
	d.mu.Lock()
	h.breaker.trip(time.Now()) // again: a new retry time
	d.mu.Unlock()
	if got := publish(); len(got) != 1 || !got[0].Open {
		t.Fatalf("after re-opening: %+v", got)
	}
	if got := publish(); len(got) != 0 {
		t.Fatalf("unchanged, published again at once: %+v", got)
	}
	d.mu.Lock()
	h.breaker.state = closed
	d.mu.Unlock()
	if got := publish(); len(got) != 1 || got[0].Open {
		t.Fatalf("after closing: %+v", got)
	}
	// An endpoint's own circuit and its Retry-After pause go under its
	// subscription ID; the pause's end is published as it ends.
	d.mu.Lock()
	l.breaker.trip(time.Now())
	l.pauseUntil = time.Now().Add(time.Minute)
	d.mu.Unlock()
	if got := publish(); len(got) != 1 || got[0].Key != "sub_x" || !got[0].Open || got[0].PausedFor <= 0 {
		t.Fatalf("after the endpoint's circuit opened and it was paused: %+v", got)
	}
	d.mu.Lock()
	l.breaker.state, l.pauseUntil = closed, time.Time{}
	d.mu.Unlock()
	if got := publish(); len(got) != 1 || got[0].Key != "sub_x" || got[0].Open || got[0].PausedFor != 0 {
		t.Fatalf("after the endpoint closed and its pause ended: %+v", got)
	}
	// A node whose leases may have lapsed publishes nothing: the host may
	// be another node's already.
	d.mu.Lock()
	h.breaker.trip(time.Now())
	d.heldUntil = time.Now()
	d.mu.Unlock()
	if got := publish(); len(got) != 0 {
		t.Fatalf("published with its leases lapsing: %+v", got)
	}
}
