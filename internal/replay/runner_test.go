package replay

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/testenv"
)

// waker plays the dispatcher: it owns the shards in owned and counts wakes.
type waker struct {
	owned map[int]bool
	wakes int
}

func (w *waker) Wake(host, subscriptionID string) { w.wakes++ }
func (w *waker) OwnsShard(shard int) bool         { return w.owned[shard] }

// fixture is a SQLite store holding one subscription and its registry.
type fixture struct {
	ctx context.Context
	st  store.Store
	sub core.Subscription
	reg *subs.Registry
	now time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hookd.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC()
	sub := core.Subscription{ID: "sub_1", TenantID: core.DefaultTenant, URL: "https://r.example/", Host: "r.example:443",
		EventTypes: []string{"*"}, Secret: "whsec_x", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := st.SubscriptionCreate(ctx, sub); err != nil {
		t.Fatal(err)
	}
	return &fixture{ctx: ctx, st: st, sub: sub, reg: subs.New([]core.Subscription{sub}), now: now}
}

// failed writes n failed deliveries of the subscription.
func (f *fixture) failed(t *testing.T, n int) {
	t.Helper()
	batch := make([]store.EventInsert, n)
	for i := range batch {
		e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`), CreatedAt: f.now}
		d := core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: f.sub.ID, TenantID: e.TenantID, EventType: e.Type,
			Host: f.sub.Host, Shard: core.ShardOf(f.sub.Host), State: core.DeliveryFailed, AttemptCount: 1, LastStatus: 400,
			CreatedAt: f.now, UpdatedAt: f.now}
		batch[i] = store.EventInsert{Event: e, Deliveries: []core.Delivery{d}}
	}
	if _, err := f.st.EventInsertBatch(f.ctx, batch); err != nil {
		t.Fatal(err)
	}
}

// job starts a running job at rate over everything failed or skipped of
// the event types given (none: all).
func (f *fixture) job(t *testing.T, rate float64, types ...string) core.ReplayJob {
	t.Helper()
	j := core.ReplayJob{ID: core.NewID("rpl"), TenantID: core.DefaultTenant, SubscriptionID: f.sub.ID, Since: f.now.Add(-time.Hour),
		EventTypes: types, States: core.ReplayStatesDefault, Rate: rate, CreatedAt: f.now, UpdatedAt: f.now}
	if err := f.st.ReplayJobCreate(f.ctx, j); err != nil {
		t.Fatal(err)
	}
	return j
}

func (f *fixture) get(t *testing.T, id string) core.ReplayJob {
	t.Helper()
	j, err := f.st.ReplayJobGet(f.ctx, "", id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// runner is a node's runner whose loop is not started: the test calls run
// with the times it chooses, so no loop races it.
func (f *fixture) runner(w Waker) *Runner {
	return New(f.st, f.reg, w, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// A job is stepped only by the node that owns its destination's shard, a
// batch (its rate × StepEvery) at a time, and the owner's lane is woken.
func TestStepRunsOnlyOnTheOwnerOfTheDestination(t *testing.T) {
	f := newFixture(t)
	f.failed(t, 130)
	j := f.job(t, 500)
	at := f.now

	other := &waker{owned: map[int]bool{}}
	f.runner(other).run(at)
	if got := f.get(t, j.ID).Replayed; got != 0 || other.wakes != 0 {
		t.Fatalf("a node without the shard replayed %d and woke %d times, want 0 and 0", got, other.wakes)
	}
	owner := &waker{owned: map[int]bool{core.ShardOf(f.sub.Host): true}}
	r := f.runner(owner)
	r.run(at)
	if got := f.get(t, j.ID).Replayed; got != 50 || owner.wakes != 1 {
		t.Fatalf("the owner's first step replayed %d and woke %d times, want 50 and 1", got, owner.wakes)
	}
	// Not again until a batch's worth of time has passed.
	r.run(at.Add(StepEvery / 2))
	if got := f.get(t, j.ID).Replayed; got != 50 {
		t.Fatalf("half a step later %d replayed, want still 50", got)
	}
	r.run(at.Add(StepEvery))
	r.run(at.Add(2 * StepEvery))
	if got := f.get(t, j.ID); got.Replayed != 130 || got.State != core.ReplayDone {
		t.Fatalf("after three steps: %d replayed, %s; want 130, done", got.Replayed, got.State)
	}
}

// Completed is called once for each job that finishes, by the node whose
// step finished it; never for a cancelled job, nor by a node that finds a
// job it holds finished or cancelled by another.
func TestCompletedOncePerFinishedJobNeverForCancelled(t *testing.T) {
	f := newFixture(t)
	f.failed(t, 120)
	cancelled := f.job(t, 500)
	shard := core.ShardOf(f.sub.Host)
	w0, w1 := &waker{owned: map[int]bool{shard: true}}, &waker{owned: map[int]bool{}}
	nodes := []*Runner{f.runner(w0), f.runner(w1)}
	calls := map[string]int{}
	var by []int
	for i, r := range nodes {
		r.Completed = func(j core.ReplayJob) {
			calls[j.ID]++
			by = append(by, i)
			if j.State != core.ReplayDone {
				t.Errorf("Completed with a job in state %s", j.State)
			}
		}
	}
	at := f.now
	nodes[0].run(at) // a batch of 50
	nodes[1].run(at) // lists the job, does not own it yet
	if got := f.get(t, cancelled.ID).Replayed; got != 50 {
		t.Fatalf("first step replayed %d, want 50", got)
	}
	if _, err := f.st.ReplayJobCancel(f.ctx, "", cancelled.ID, at); err != nil {
		t.Fatal(err)
	}
	w1.owned[shard] = true // both nodes step every job from here
	at = at.Add(StepEvery)
	nodes[0].run(at) // both find it cancelled
	nodes[1].run(at)

	// Two more jobs, both finishing: one takes the 70 failed left and 3
	// more (two batches); the other, of a second subscription on the
	// host (one job runs per subscription), matches nothing.
	f.failed(t, 3)
	twoSteps := f.job(t, 500)
	second := f.sub
	second.ID = "sub_2"
	if err := f.st.SubscriptionCreate(f.ctx, second); err != nil {
		t.Fatal(err)
	}
	f.reg.Put(second)
	empty := twoSteps
	empty.ID, empty.SubscriptionID, empty.EventTypes = core.NewID("rpl"), second.ID, []string{"no.such"}
	if err := f.st.ReplayJobCreate(f.ctx, empty); err != nil {
		t.Fatal(err)
	}
	at = at.Add(2 * listEvery)
	nodes[0].run(at) // twoSteps: 50; empty: done here
	nodes[1].run(at) // twoSteps: the last 23, done here
	at = at.Add(StepEvery)
	nodes[0].run(at) // finds twoSteps done
	nodes[1].run(at)

	if calls[cancelled.ID] != 0 || calls[twoSteps.ID] != 1 || calls[empty.ID] != 1 || !slices.Equal(by, []int{0, 1}) {
		t.Fatalf("Completed calls %v by nodes %v; want one for each finished job (empty by node 0, the other by node 1), none for the cancelled one", calls, by)
	}
	if got := f.get(t, cancelled.ID); got.State != core.ReplayCancelled || got.Replayed != 50 {
		t.Fatalf("cancelled job now %s with %d replayed, want cancelled with 50", got.State, got.Replayed)
	}
	if got := f.get(t, twoSteps.ID); got.State != core.ReplayDone || got.Replayed != 73 {
		t.Fatalf("finished job now %s with %d replayed, want done with 73", got.State, got.Replayed)
	}
	for i, r := range nodes {
		if len(r.jobs) != 0 {
			t.Errorf("node %d still holds %d jobs", i, len(r.jobs))
		}
	}
}

// A job hands the endpoint no more than its rate while what it put back
// has not been tried, and counts what was tried for a Window after.
func TestAJobWaitsForWhatItPutBackToBeTried(t *testing.T) {
	f := newFixture(t)
	f.failed(t, 30)
	j := f.job(t, 10) // a batch of 1 each 100 ms, at most 10 a second
	w := &waker{owned: map[int]bool{core.ShardOf(f.sub.Host): true}}
	r := f.runner(w)
	at := f.now
	r.clock = func() time.Time { return at }
	for range 30 { // 3 s of steps, nothing tried: 10 put back, then none
		r.run(at)
		at = at.Add(StepEvery)
	}
	if got := f.get(t, j.ID).Replayed; got != 10 {
		t.Fatalf("with nothing tried, %d put back, want 10 (the rate)", got)
	}
	// The endpoint takes them now: each tried once.
	var rs []store.AttemptResult
	for _, b := range r.jobs[j.ID].waiting {
		for _, id := range b {
			rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: id, N: 2, StartedAt: at, StatusCode: 200},
				State: core.DeliveryDelivered, Now: at})
		}
	}
	if len(rs) != 10 {
		t.Fatalf("%d deliveries waiting, want 10", len(rs))
	}
	if err := f.st.DeliveryRecordResults(f.ctx, rs); err != nil {
		t.Fatal(err)
	}
	r.run(at) // sees them tried at at: they count for a Window more
	for range 9 {
		at = at.Add(StepEvery)
		r.run(at)
	}
	if got := f.get(t, j.ID).Replayed; got != 10 {
		t.Fatalf("within a second of the tries, %d put back, want still 10", got)
	}
	at = at.Add(StepEvery) // a Window after the tries
	r.run(at)
	if got := f.get(t, j.ID).Replayed; got != 11 {
		t.Fatalf("a second after the tries, %d put back, want 11", got)
	}
}

// downStore fails every step, as a database that cannot be reached.
type downStore struct {
	store.Store
	steps int
}

func (d *downStore) ReplayJobStep(ctx context.Context, id string, limit int, now time.Time) (core.ReplayJob, []string, error) {
	d.steps++
	return core.ReplayJob{}, nil, store.ErrUnavailable
}

// A step that fails holds its job back for a second: a database down is
// tried (and logged) once a second per job, not every tick.
func TestAFailedStepHoldsTheJobBackASecond(t *testing.T) {
	f := newFixture(t)
	f.failed(t, 10)
	f.job(t, 100)
	down := &downStore{Store: f.st}
	r := New(down, f.reg, &waker{owned: map[int]bool{core.ShardOf(f.sub.Host): true}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	at := f.now
	for range 50 { // a second of ticks
		r.run(at)
		at = at.Add(tick)
	}
	if down.steps != 1 {
		t.Fatalf("%d steps tried in a second of a failing store, want 1", down.steps)
	}
	r.run(at)
	if down.steps != 2 {
		t.Fatalf("%d steps tried after a second, want 2", down.steps)
	}
}

// The pace, simulated over 30 s of the loop's ticks: each delivery put
// back reaches the endpoint after a delay of its own, up to 400 ms, and
// its result is written a little later; the loop sees a batch tried at
// its first tick after the last result. However the delays fall, the
// endpoint never gets more than the rate (at least one) in any second,
// steps stay within a batch, and with short delays the job still runs at
// no less than about 90 % of its rate (its whole part, over 1).
func TestPaceStaysUnderTheRateInAnyWindow(t *testing.T) {
	for _, maxDelay := range []time.Duration{30 * time.Millisecond, 400 * time.Millisecond} {
		for _, rate := range []float64{0.5, 1, 1.5, 7, 100, 333, 500} {
			rng := rand.New(rand.NewPCG(uint64(rate*10), uint64(maxDelay)))
			p := newPace(rate)
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			const span = 30 * time.Second
			type put struct{ tried time.Time } // one batch: tried when its last result is written
			var waiting []put
			var waitingN []int
			var sends []time.Time
			for now := start; now.Before(start.Add(span)); now = now.Add(tick + time.Duration(rng.IntN(3))*time.Millisecond) {
				keep, keepN := waiting[:0], waitingN[:0]
				for i, b := range waiting {
					if b.tried.After(now) {
						keep, keepN = append(keep, b), append(keepN, waitingN[i])
						continue
					}
					p.triedBy(now, waitingN[i])
				}
				waiting, waitingN = keep, keepN
				w := 0
				for _, n := range waitingN {
					w += n
				}
				n := p.allow(now, w)
				if n == 0 {
					continue
				}
				if n > p.size() {
					t.Fatalf("rate %v: a step of %d, over the batch of %d", rate, n, p.size())
				}
				p.took(n)
				var last time.Time
				for range n {
					sent := now.Add(time.Millisecond + time.Duration(rng.Int64N(int64(maxDelay))))
					sends = append(sends, sent)
					if tried := sent.Add(time.Duration(1+rng.IntN(30)) * time.Millisecond); tried.After(last) {
						last = tried
					}
				}
				waiting, waitingN = append(waiting, put{last}), append(waitingN, n)
			}
			slices.SortFunc(sends, func(a, b time.Time) int { return a.Compare(b) })
			limit := max(1, int(rate))
			for i, j := 0, 0; i < len(sends); i++ {
				for j < len(sends) && sends[j].Sub(sends[i]) < time.Second {
					j++
				}
				if j-i > limit {
					t.Fatalf("delays up to %s, rate %v: %d sent within a second from %s, over %d",
						maxDelay, rate, j-i, sends[i].Sub(start), limit)
				}
			}
			want := 0.9 * min(rate, float64(limit)) * span.Seconds()
			if maxDelay <= 30*time.Millisecond && float64(len(sends)) < want {
				t.Errorf("delays up to %s, rate %v: %d sent in %s, want at least %.0f", maxDelay, rate, len(sends), span, want)
			}
		}
	}
}

// A new job starts at once with a whole batch.
func TestPaceStartsAtOnce(t *testing.T) {
	p := newPace(100)
	if n := p.allow(time.Now(), 0); n != 10 {
		t.Fatalf("a new job at 100/s may put back %d at once, want 10", n)
	}
}
