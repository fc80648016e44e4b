package dispatch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/testenv"
)

// senderFunc lets a test play the endpoints in memory.
type senderFunc func(ctx context.Context, sub *core.Subscription, job *core.Job) send.Outcome

func (f senderFunc) Send(ctx context.Context, sub *core.Subscription, job *core.Job, now time.Time) send.Outcome {
	out := f(ctx, sub, job)
	out.StartedAt = now
	return out
}

type bundle struct {
	store store.Store
	subs  *subs.Registry
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hookd.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &bundle{store: st, subs: subs.New(nil)}
}

func (b *bundle) subscription(t *testing.T, host string) core.Subscription {
	t.Helper()
	s := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "http://" + host + "/",
		Host: host, EventTypes: []string{"*"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		RetrySchedule: []time.Duration{time.Second}, State: core.SubActive,
		CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	if err := b.store.SubscriptionCreate(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	b.subs.Put(s)
	return s
}

// pending writes n pending deliveries for sub straight into the store, as a
// crashed node would have left them.
func (b *bundle) pending(t *testing.T, sub core.Subscription, n int) []string {
	t.Helper()
	batch, ids := pendingBatch(sub, n)
	b.commit(t, batch)
	return ids
}

// pendingBatch is what ingest would write for n events to sub, one pending
// delivery each.
func pendingBatch(sub core.Subscription, n int) ([]store.EventInsert, []string) {
	now := time.Now().UTC()
	var batch []store.EventInsert
	var ids []string
	for i := range n {
		ev := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "a.b",
			Payload: []byte(fmt.Sprintf(`{"i":%d}`, i)), CreatedAt: now}
		d := core.Delivery{ID: core.NewID("dlv"), EventID: ev.ID, SubscriptionID: sub.ID, TenantID: ev.TenantID,
			EventType: ev.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host), State: core.DeliveryPending,
			NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
		batch = append(batch, store.EventInsert{Event: ev, Deliveries: []core.Delivery{d}})
		ids = append(ids, d.ID)
	}
	return batch, ids
}

func (b *bundle) commit(t *testing.T, batch []store.EventInsert) {
	t.Helper()
	if _, err := b.store.EventInsertBatch(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) start(t *testing.T, s Sender, window int) *Dispatcher {
	t.Helper()
	return b.run(t, Config{Sender: s, Window: window})
}

// run starts a dispatcher on cfg, its store and registry defaulting to the
// bundle's, and stops it when the test ends. prepare runs on it before it
// starts (and so before it first reads the store).
func (b *bundle) run(t *testing.T, cfg Config, prepare ...func(*Dispatcher)) *Dispatcher {
	t.Helper()
	if cfg.Store == nil {
		cfg.Store = b.store
	}
	if cfg.Subs == nil {
		cfg.Subs = b.subs
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := New(cfg)
	for _, p := range prepare {
		p(d)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Stop(ctx)
	})
	return d
}

// jobs reads deliveries back as the jobs ingest would hand over.
func (b *bundle) jobs(t *testing.T, ids []string) []core.Job {
	t.Helper()
	var out []core.Job
	for _, id := range ids {
		dl := b.state(t, id)
		ev, _, err := b.store.EventGet(context.Background(), "", dl.EventID)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, core.Job{Delivery: dl, Event: ev})
	}
	return out
}

func (b *bundle) state(t *testing.T, id string) core.Delivery {
	t.Helper()
	d, _, err := b.store.DeliveryGet(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// held counts what the dispatcher keeps in memory for host.
func (d *Dispatcher) held(host string) (window, known int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.hosts[host]
	if h == nil {
		return 0, 0
	}
	for _, l := range h.lanes {
		window += l.queued()
		known += len(l.known)
	}
	return window, known
}

func TestPendingWorkLeftInStoreIsSentOnStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "a.example:80")
	ids := b.pending(t, sub, 50)
	var sent sync.Map
	b.start(t, senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		if _, dup := sent.LoadOrStore(j.Delivery.ID, true); dup {
			t.Errorf("%s sent twice", j.Delivery.ID)
		}
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), 0)
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" delivered", func() bool {
			return b.state(t, id).State == core.DeliveryDelivered
		})
	}
}

func TestHungHostHoldsOnlyItsCapAndOthersFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	hung, healthy := b.subscription(t, "hung.example:80"), b.subscription(t, "ok.example:80")
	b.pending(t, hung, 200)
	release := make(chan struct{})
	var inflight, peak atomic.Int64
	d := b.start(t, senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		if s.Host == hung.Host {
			n := inflight.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			inflight.Add(-1)
			return send.Outcome{Class: send.Retry, Err: "timeout"}
		}
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), 32)
	// Its one endpoint, never answered, holds all but the slot kept for
	// the next endpoint of its host.
	lone := int64(core.DefaultHostConcurrency - 1)
	testenv.Eventually(t, 5*time.Second, "the hung host fills its cap", func() bool { return inflight.Load() == lone })

	// With the hung host's cap full, the healthy host still delivers everything.
	ids := b.pending(t, healthy, 100)
	d.Wake(healthy.Host, healthy.ID)
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, "healthy delivery "+id, func() bool {
			return b.state(t, id).State == core.DeliveryDelivered
		})
	}
	// A bounded window of the 200 is in memory, not all of them.
	window, known := d.held(hung.Host)
	if window > 32 || known > 32+core.DefaultHostConcurrency {
		t.Errorf("hung host holds window %d, known %d; want at most 32 and %d", window, known, 32+core.DefaultHostConcurrency)
	}
	if p := peak.Load(); p != lone {
		t.Errorf("peak in flight to the hung host %d, want exactly %d", p, lone)
	}
	close(release)
}

func TestNextState(t *testing.T) {
	sub := &core.Subscription{ID: "sub_1", RetrySchedule: []time.Duration{10 * time.Second, time.Minute}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name       string
		count, rs  int
		out        send.Outcome
		state      core.DeliveryState
		minW, maxW time.Duration
		disable    bool
	}{
		{name: "2xx", out: send.Outcome{Class: send.Delivered, StatusCode: 200}, state: core.DeliveryDelivered},
		{name: "first retry", out: send.Outcome{Class: send.Retry, StatusCode: 500}, state: core.DeliveryPending, minW: 8 * time.Second, maxW: 12 * time.Second},
		{name: "second retry", count: 1, out: send.Outcome{Class: send.Retry}, state: core.DeliveryPending, minW: 48 * time.Second, maxW: 72 * time.Second},
		{name: "schedule spent", count: 2, out: send.Outcome{Class: send.Retry}, state: core.DeliveryFailed},
		{name: "replay starts a new round", count: 3, rs: 3, out: send.Outcome{Class: send.Retry}, state: core.DeliveryPending, minW: 8 * time.Second, maxW: 12 * time.Second},
		{name: "retry-after is a floor", out: send.Outcome{Class: send.Retry, StatusCode: 429, RetryAfter: 30 * time.Second}, state: core.DeliveryPending, minW: 30 * time.Second, maxW: 30 * time.Second},
		{name: "retry-after below schedule", out: send.Outcome{Class: send.Retry, StatusCode: 429, RetryAfter: time.Second}, state: core.DeliveryPending, minW: 8 * time.Second, maxW: 12 * time.Second},
		{name: "4xx", out: send.Outcome{Class: send.Fail, StatusCode: 400}, state: core.DeliveryFailed},
		{name: "410", out: send.Outcome{Class: send.Gone, StatusCode: 410}, state: core.DeliveryFailed, disable: true},
	} {
		c.out.StartedAt = now
		r := nextState(sub, &core.Delivery{ID: "dlv_1", AttemptCount: c.count, RoundStart: c.rs}, c.out)
		if r.State != c.state || r.Attempt.N != c.count+1 || (r.disable != "") != c.disable {
			t.Errorf("%s: state %s, n %d, disable %q", c.name, r.State, r.Attempt.N, r.disable)
		}
		if c.state == core.DeliveryPending {
			if w := r.NextAttemptAt.Sub(now); w < c.minW || w > c.maxW {
				t.Errorf("%s: waits %s, want %s..%s", c.name, w, c.minW, c.maxW)
			}
		}
	}
}

// lateStore answers DeliveryDue with what the store held when the query
// ran, but only once released: a refill that raced a commit.
type lateStore struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *lateStore) DeliveryDue(ctx context.Context, p store.DeliveryDueParams) ([]core.Job, time.Time, error) {
	jobs, next, err := s.Store.DeliveryDue(ctx, p)
	if s.armed.CompareAndSwap(true, false) {
		close(s.entered)
		<-s.release
	}
	return jobs, next, err
}

// A hand-off that overflows the window while a refill is running must not be
// forgotten when that refill, which queried before the commit, comes back empty.
func TestOverflowDuringRefillIsNotLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "late.example:80")
	ls := &lateStore{Store: b.store, entered: make(chan struct{}), release: make(chan struct{})}
	b.store = ls
	d := b.run(t, Config{Store: ls, Window: 2, Resync: time.Hour,
		Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		})})
	jobsFor := func(ids []string) []core.Job { return b.jobs(t, ids) }
	// The host is paused (a Retry-After), so its fresh window stays full.
	d.mu.Lock()
	h, _ := d.laneLocked(sub.Host, sub.ID)
	h.pauseUntil = time.Now().Add(time.Hour)
	d.mu.Unlock()
	d.Notify(jobsFor(b.pending(t, sub, 2)))
	// A refill queries now, finds nothing new, and is held before answering.
	ls.armed.Store(true)
	d.Wake(sub.Host, sub.ID)
	<-ls.entered
	// Meanwhile one more delivery is committed and handed over: it overflows.
	late := b.pending(t, sub, 1)[0]
	d.Notify(jobsFor([]string{late}))
	close(ls.release)
	testenv.Eventually(t, 10*time.Second, "the overflowed delivery is fetched without waiting for a resync", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		l := d.hosts[sub.Host].lanes[sub.ID]
		return l.known[late]
	})
}

// refillCounter counts refills: reads of due work back from the store.
type refillCounter struct {
	store.Store
	due atomic.Int64
}

func (s *refillCounter) DeliveryDue(ctx context.Context, p store.DeliveryDueParams) ([]core.Job, time.Time, error) {
	s.due.Add(1)
	return s.Store.DeliveryDue(ctx, p)
}

// Under load, hand-offs beyond the backlog window stay in memory while the
// host takes work (no read back from the store), within the byte budget;
// once the host stops taking work (a Retry-After pause) the lane keeps only
// a window of them, and everything is still delivered exactly once.
func TestHandOffsBeyondWindowStayInMemoryWhileHostTakesWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "busy.example:80")
	cs := &refillCounter{Store: b.store}
	release := make(chan struct{})
	var sent sync.Map
	var sends atomic.Int64
	d := b.run(t, Config{Store: cs, Window: 4, Resync: time.Hour,
		Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
			if _, dup := sent.LoadOrStore(j.Delivery.ID, true); dup {
				t.Errorf("%s sent twice", j.Delivery.ID)
			}
			sends.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		})})
	ids := b.pending(t, sub, 100)
	d.Notify(b.jobs(t, ids))
	// All but the slot kept for another endpoint: none has answered yet.
	lone := core.DefaultHostConcurrency - 1
	testenv.Eventually(t, 5*time.Second, "the host's cap in flight", func() bool { return sends.Load() == int64(lone) })
	if window, _ := d.held(sub.Host); window != 100-lone {
		t.Fatalf("%d hand-offs held while the host takes work, want %d", window, 100-lone)
	}
	if n := cs.due.Load(); n != 0 {
		t.Fatalf("%d refills while every hand-off fit in memory, want 0", n)
	}

	// A Retry-After pause: the lane keeps a window and leaves the rest to the store.
	d.mu.Lock()
	h, _ := d.laneLocked(sub.Host, sub.ID)
	h.pauseUntil = time.Now().Add(200 * time.Millisecond)
	d.pumpLocked(h, time.Now())
	d.mu.Unlock()
	if window, _ := d.held(sub.Host); window > 4 {
		t.Fatalf("%d hand-offs held while the host is paused, want at most the window of 4", window)
	}
	close(release)
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" delivered", func() bool {
			return b.state(t, id).State == core.DeliveryDelivered
		})
	}
	if n := sends.Load(); n != 100 {
		t.Fatalf("%d sends for 100 deliveries", n)
	}
}

// The byte budget bounds hand-offs across all lanes: beyond it they wait in
// the store and are still delivered.
func TestHandOffsBeyondTheByteBudgetWaitInTheStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "budget.example:80")
	release := make(chan struct{})
	d := b.run(t, Config{Window: 4, FreshBytes: 20 * 520, Resync: time.Hour,
		Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		})})
	ids := b.pending(t, sub, 100)
	d.Notify(b.jobs(t, ids))
	d.mu.Lock()
	held := d.freshBytes
	d.mu.Unlock()
	if held > 20*520 {
		t.Fatalf("%d bytes of hand-offs held, budget %d", held, 20*520)
	}
	close(release)
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" delivered", func() bool {
			return b.state(t, id).State == core.DeliveryDelivered
		})
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.freshBytes != 0 {
		t.Fatalf("%d bytes still counted as held after everything was sent", d.freshBytes)
	}
}

// A subscription moved to another host while its old host's lane held its
// deliveries: each is sent once, from the new host's lane.
func TestMovedSubscriptionIsSentOnceFromItsNewHost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "old.example:80")
	ids := b.pending(t, sub, 50)
	var sent sync.Map // delivery ID → times sent
	var fromOld atomic.Int64
	// The old host pauses (a Retry-After) with the lane full. Paused
	// before the dispatcher starts: paused after, its first refill could
	// send some before the pause (under load, the lane then never held 50).
	var old *host
	d := b.run(t, Config{Window: 64, Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		n, _ := sent.LoadOrStore(j.Delivery.ID, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if j.Delivery.Host == "old.example:80" {
			fromOld.Add(1)
		}
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	})}, func(d *Dispatcher) {
		old, _ = d.laneLocked(sub.Host, sub.ID)
		old.pauseUntil = time.Now().Add(time.Hour)
	})
	d.Wake(sub.Host, sub.ID)
	testenv.Eventually(t, 5*time.Second, "the old lane holds the deliveries", func() bool {
		w, _ := d.held(sub.Host)
		return w == 50
	})

	moved := sub
	moved.URL, moved.Host, moved.UpdatedAt = "http://new.example:80/", "new.example:80", time.Now().UTC()
	if err := b.store.SubscriptionUpdate(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	b.subs.Put(moved)
	d.Wake(moved.Host, moved.ID)
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" delivered", func() bool {
			return b.state(t, id).State == core.DeliveryDelivered
		})
	}
	// The pause ends: the old lane must let go of its copies, not send them.
	d.mu.Lock()
	old.pauseUntil = time.Now()
	d.pumpLocked(old, time.Now())
	d.mu.Unlock()
	testenv.Eventually(t, 5*time.Second, "the old lane let go", func() bool {
		w, known := d.held("old.example:80")
		return w == 0 && known == 0
	})
	sent.Range(func(id, n any) bool {
		if c := n.(*atomic.Int64).Load(); c != 1 {
			t.Errorf("%s sent %d times", id, c)
		}
		return true
	})
	if n := fromOld.Load(); n != 0 {
		t.Errorf("%d sends from the old host's lane", n)
	}
}

// A subscription moved to another host while its deliveries were in
// flight to the old one: the new host's lane leaves them alone until their
// results are written. Delivered there, they are sent nowhere else; told
// to retry, the new host sends each once, at its retry time.
func TestMovedSubscriptionLeavesWhatIsInFlightToItsResult(t *testing.T) {
	t.Parallel()
	for _, status := range []int{200, 500} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			b := setup(t)
			sub := b.subscription(t, "left.example:80")
			ids := b.pending(t, sub, 3)
			cs := &refillCounter{Store: b.store}
			release := make(chan struct{})
			var inflight, toOld, toNew sync.Map // delivery ID → *atomic.Int64
			count := func(m *sync.Map, id string) *atomic.Int64 {
				n, _ := m.LoadOrStore(id, new(atomic.Int64))
				return n.(*atomic.Int64)
			}
			d := b.run(t, Config{Store: cs, Resync: time.Hour,
				Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
					if s.Host != "left.example:80" {
						count(&toNew, j.Delivery.ID).Add(1)
						return send.Outcome{Class: send.Delivered, StatusCode: 200}
					}
					count(&toOld, j.Delivery.ID).Add(1)
					count(&inflight, "all").Add(1)
					select {
					case <-release:
					case <-ctx.Done():
						return send.Outcome{Class: send.Retry, Err: "stopped"}
					}
					if status == 200 {
						return send.Outcome{Class: send.Delivered, StatusCode: 200}
					}
					return send.Outcome{Class: send.Retry, StatusCode: 500}
				})})
			d.Wake(sub.Host, sub.ID)
			testenv.Eventually(t, 5*time.Second, "three in flight to the old host", func() bool { return count(&inflight, "all").Load() == 3 })

			moved := sub
			moved.URL, moved.Host, moved.UpdatedAt = "http://right.example:80/", "right.example:80", time.Now().UTC()
			if err := b.store.SubscriptionUpdate(context.Background(), moved); err != nil {
				t.Fatal(err)
			}
			b.subs.Put(moved)
			before := cs.due.Load()
			d.Wake(moved.Host, moved.ID)
			testenv.Eventually(t, 5*time.Second, "the new lane refilled", func() bool {
				d.mu.Lock()
				defer d.mu.Unlock()
				h := d.hosts[moved.Host]
				// Gone again if it found nothing to do.
				return cs.due.Load() > before && (h == nil || h.lanes[moved.ID] == nil || !h.lanes[moved.ID].refilling)
			})
			for _, id := range ids {
				if n := count(&toNew, id).Load(); n != 0 {
					t.Errorf("%s sent to the new host %d times while in flight to the old one", id, n)
				}
			}
			close(release)
			for _, id := range ids {
				testenv.Eventually(t, 10*time.Second, id+" delivered", func() bool {
					return b.state(t, id).State == core.DeliveryDelivered
				})
			}
			want := int64(0) // delivered at the old host
			if status != 200 {
				want = 1 // its retry, once, at the new host
			}
			for _, id := range ids {
				if o, n := count(&toOld, id).Load(), count(&toNew, id).Load(); o != 1 || n != want {
					t.Errorf("%s sent %d times to the old host and %d to the new, want 1 and %d", id, o, n, want)
				}
			}
		})
	}
}

// After a move, the old host's lane stops asking the store for the
// subscription's work (which now belongs to the new host's lane) instead of
// fetching it, dropping it and fetching it again.
func TestMovedSubscriptionStopsRefillingTheOldLane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "was.example:80")
	ids := b.pending(t, sub, 200)
	cs := &refillCounter{Store: b.store}
	release := make(chan struct{})
	d := b.run(t, Config{Store: cs, Resync: time.Hour,
		Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
			if j.Delivery.Host == "was.example:80" {
				select { // the old host is slow: its lane stays busy
				case <-release:
				case <-ctx.Done():
				}
			}
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		})})
	testenv.Eventually(t, 5*time.Second, "the old lane is full", func() bool {
		w, _ := d.held(sub.Host)
		return w > 0
	})
	moved := sub
	moved.URL, moved.Host, moved.UpdatedAt = "http://now.example:80/", "now.example:80", time.Now().UTC()
	if err := b.store.SubscriptionUpdate(context.Background(), moved); err != nil {
		t.Fatal(err)
	}
	b.subs.Put(moved)
	before := cs.due.Load()
	close(release) // the old lane's sends finish: it pumps, refills, picks again
	d.Wake(moved.Host, moved.ID)
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" delivered", func() bool {
			return b.state(t, id).State == core.DeliveryDelivered
		})
	}
	testenv.Eventually(t, 5*time.Second, "the old lane is gone", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		h := d.hosts["was.example:80"]
		return h == nil || len(h.lanes) == 0
	})
	// The new lane fetches 200 in windows of 32: about 9 refills. A
	// lane that keeps refetching made 54 here (hundreds elsewhere).
	n := cs.due.Load() - before
	t.Logf("%d refills after the move", n)
	if n > 25 {
		t.Errorf("%d refills after the move", n)
	}
}

// A node that died after writing a 410's result and before its disable
// landed left the subscription active with its backlog: started again, it
// sent that backlog to the endpoint that had said it is gone, up to the
// host's cap, before the next 410 disabled it. The 410 is in the store
// with the subscription's last failure, so the restarted node disables it
// first and sends it nothing. One re-enabled after its 410 is sent to.
func TestA410WhoseDisableDidNotLandDisablesAfterARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gone, back := b.subscription(t, "gone.example:80"), b.subscription(t, "back.example:80")
	// A 410 its subscription asked to have retried (retry_status_codes) is
	// a failure like a 500, not a goodbye.
	retried := b.subscription(t, "retried.example:80")
	retried.RetryStatusCodes = []int{410}
	if err := b.store.SubscriptionUpdate(context.Background(), retried); err != nil {
		t.Fatal(err)
	}
	b.subs.Put(retried)
	answered := time.Now().UTC().Add(time.Millisecond)
	for _, sub := range []core.Subscription{gone, back, retried} {
		ids := b.pending(t, sub, 20)
		if err := b.store.DeliveryRecordResults(context.Background(), []store.AttemptResult{{SubscriptionID: sub.ID,
			Attempt: core.Attempt{DeliveryID: ids[0], N: 1, StartedAt: answered, Duration: time.Millisecond, StatusCode: 410},
			State:   core.DeliveryFailed, Now: answered}}); err != nil {
			t.Fatal(err)
		}
	}
	// back was re-enabled after its 410 (by its owner, on another node).
	back.UpdatedAt = answered.Add(time.Millisecond)
	if err := b.store.SubscriptionUpdate(context.Background(), back); err != nil {
		t.Fatal(err)
	}
	b.subs.Put(back)

	var sentGone, sentBack atomic.Int64
	disabled := make(chan string, 10)
	b.run(t, Config{
		Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
			if s.ID == gone.ID {
				sentGone.Add(1)
				return send.Outcome{Class: send.Gone, StatusCode: 410}
			}
			sentBack.Add(1)
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		}),
		Disable: func(ctx context.Context, id, reason string) error {
			disabled <- id + ": " + reason
			return nil
		},
	})
	select {
	case got := <-disabled:
		if want := gone.ID + ": " + goneReason; got != want {
			t.Fatalf("disabled %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription whose 410 was written is not disabled after the restart")
	}
	testenv.Eventually(t, 10*time.Second, "the re-enabled and the retried subscriptions' 19 each sent", func() bool { return sentBack.Load() == 2*19 })
	if n := sentGone.Load(); n != 0 {
		t.Errorf("%d deliveries sent to the endpoint that answered 410 before the restart", n)
	}
	select {
	case got := <-disabled:
		t.Errorf("also disabled %q", got)
	default:
	}
}
