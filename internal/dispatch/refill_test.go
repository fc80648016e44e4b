package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/outage"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// slowDue answers its first DeliveryDue as the store stood when asked, but
// only once the test lets it: a refill whose query is slow.
type slowDue struct {
	store.Store
	once    atomic.Bool
	asked   chan struct{}
	release chan struct{}
}

func (s *slowDue) DeliveryDue(ctx context.Context, p store.DeliveryDueParams) ([]core.Job, time.Time, error) {
	jobs, next, err := s.Store.DeliveryDue(ctx, p)
	if s.once.CompareAndSwap(false, true) {
		close(s.asked)
		<-s.release
	}
	return jobs, next, err
}

func (d *Dispatcher) refilling(host string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.hosts[host]; h != nil {
		for _, l := range h.lanes {
			if l.refilling {
				return true
			}
		}
	}
	return false
}

// A refill's answer can predate results written while it ran: a delivery
// handed off, sent and recorded meanwhile comes back as pending. It must
// not be sent again.
func TestRefillDoesNotResendWhatWasRecordedMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	host := "a.example:443"
	sub := b.subscription(t, host)
	id := b.pending(t, sub, 1)[0]
	st := &slowDue{Store: b.store, asked: make(chan struct{}), release: make(chan struct{})}
	var sent atomic.Int64
	d := New(Config{Store: st, Subs: b.subs, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
			sent.Add(1)
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		})})
	if err := d.Start(context.Background()); err != nil { // its resync starts a refill
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	<-st.asked // the refill has read the delivery as pending

	// Meanwhile it is handed off (as ingest does), sent and recorded.
	dl, _, err := b.store.DeliveryGet(context.Background(), "", id)
	if err != nil {
		t.Fatal(err)
	}
	d.Notify([]core.Job{{Delivery: dl, Event: core.Event{ID: dl.EventID, TenantID: dl.TenantID, Type: dl.EventType, Payload: []byte(`{}`)}}})
	testenv.Eventually(t, 5*time.Second, "the hand-off recorded", func() bool {
		_, known := d.held(host)
		return b.state(t, id).State == core.DeliveryDelivered && known == 0
	})
	close(st.release)
	testenv.Eventually(t, 5*time.Second, "the refill done and nothing in flight", func() bool {
		_, known := d.held(host)
		return !d.refilling(host) && d.Stats().Inflight == 0 && known == 0
	})
	if n := sent.Load(); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// A refill can find a delivery committed by this node's ingest before the
// ingest hands it over (the hand-off lagged the commit by 68 ms in a loaded
// CI run): it must leave it to the hand-off, or the delivery goes out twice.
func TestRefillLeavesReservedDeliveriesToTheirHandOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "reserved.example:443")
	d, sends := b.startCounting(t)
	batch, _ := pendingBatch(sub, 1)
	ev, dl := batch[0].Event, batch[0].Deliveries[0]

	// What ingest does: reserve, commit; then a refill runs (another
	// node's notification, a resync) before the hand-off.
	d.Reserve(batch)
	b.commit(t, batch)
	d.Wake(sub.Host, sub.ID)
	testenv.Eventually(t, 5*time.Second, "the woken lane's refill to finish", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		h := d.hosts[sub.Host]
		return h != nil && h.lanes[sub.ID] != nil && !h.lanes[sub.ID].refilling && h.lanes[sub.ID].storeDue.IsZero()
	})
	if early := sends(dl.ID); early != 0 {
		t.Fatalf("the refill sent a reserved delivery %d times before its hand-off", early)
	}
	d.Notify([]core.Job{{Delivery: dl, Event: ev}})
	testenv.Eventually(t, 5*time.Second, "the hand-off to be delivered and written", func() bool {
		st, _, err := b.store.DeliveryGet(context.Background(), "", dl.ID)
		return err == nil && st.State == core.DeliveryDelivered
	})
	d.Wake(sub.Host, sub.ID) // and a refill after it finds nothing to resend
	testenv.Eventually(t, 5*time.Second, "the lane to go idle", func() bool { return d.Stats().Window == 0 && d.Stats().Inflight == 0 })
	if n := sends(dl.ID); n != 1 {
		t.Errorf("delivery sent %d times, want once", n)
	}
}

// A reservation whose commit failed is released, and the store is asked:
// the commit may have landed after all.
func TestReleasedReservationIsFetchedFromTheStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "released.example:443")
	var sent atomic.Int64
	d := b.start(t, senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		sent.Add(1)
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	}), 0)
	batch, _ := pendingBatch(sub, 1)
	dl := batch[0].Deliveries[0]
	d.Reserve(batch)
	b.commit(t, batch)
	d.Release(batch) // as if the commit had reported an error though it landed
	testenv.Eventually(t, 5*time.Second, "the released delivery to be fetched and sent", func() bool { return sent.Load() == 1 })
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.hosts[sub.Host].lanes[sub.ID].reserved[dl.ID]; ok {
		t.Error("still reserved after Release")
	}
}

// A replay can land between an attempt's result commit and the dispatcher
// noting it: the wake-up's refill skips the delivery as still held, and
// nothing asked for it again until the resync.
func TestReplayWhileResultIsNotedIsSentWithoutResync(t *testing.T) {
	t.Parallel()
	b := setup(t)
	host := "replay.example:443"
	sub := b.subscription(t, host)
	var sent atomic.Int64
	d := b.run(t, Config{Resync: time.Hour, Sender: senderFunc(func(context.Context, *core.Subscription, *core.Job) send.Outcome {
		sent.Add(1)
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	})})
	batch, ids := pendingBatch(sub, 1)
	x := ids[0]
	d.mu.Lock() // x is in flight: held by its lane
	_, l := d.laneLocked(host, sub.ID)
	l.known[x] = true
	d.mu.Unlock()
	b.commit(t, batch)

	ctx := context.Background()
	began := time.Now() // the result write
	r := result{host: host}
	r.SubscriptionID = sub.ID
	r.Attempt = core.Attempt{DeliveryID: x, N: 1, StartedAt: time.Now(), StatusCode: 200}
	r.State, r.Now = core.DeliveryDelivered, time.Now()
	if err := b.store.DeliveryRecordResults(ctx, []store.AttemptResult{r.AttemptResult}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.DeliveryReplay(ctx, core.DefaultTenant, x, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	d.Wake(host, sub.ID) // as the API does after a replay
	testenv.Eventually(t, 5*time.Second, "the wake-up's refill to finish", func() bool { return !d.refilling(host) })
	d.written([]result{r}, began)
	testenv.Eventually(t, 5*time.Second, "the replayed delivery to be sent", func() bool { return sent.Load() == 1 })
}

// downDue fails DeliveryDue as an unreachable database does while down is
// set, counting the calls.
type downDue struct {
	store.Store
	down  atomic.Bool
	calls atomic.Int64
}

func (s *downDue) DeliveryDue(ctx context.Context, p store.DeliveryDueParams) ([]core.Job, time.Time, error) {
	if s.down.Load() {
		s.calls.Add(1)
		return nil, time.Time{}, fmt.Errorf("%w: dial tcp 127.0.0.1:5432: connection refused", store.ErrUnavailable)
	}
	return s.Store.DeliveryDue(ctx, p)
}

// While the store is down, each failed ingest releases its reservations
// and makes its lane due at once: the lane's refills must hold back rather
// than read the dead store once per failed ingest (356 reads, each logged,
// in an 8 s outage), be the tracker's to log, and resume once it is back.
func TestRefillsHoldBackWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "down.example:443")
	st := &downDue{Store: b.store}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&syncWriter{mu: &mu, w: &logs}, nil))
	tr := outage.New(outage.Config{Log: log}, b.store) // not started: only Report counts
	var sent atomic.Int64
	d := b.run(t, Config{Store: st, Log: log, Outage: tr, Resync: time.Hour,
		Sender: senderFunc(func(context.Context, *core.Subscription, *core.Job) send.Outcome {
			sent.Add(1)
			return send.Outcome{Class: send.Delivered, StatusCode: 200}
		})})
	st.down.Store(true)
	// A commit that failed as it landed: released, so only the store has it.
	batch, _ := pendingBatch(sub, 1)
	d.Reserve(batch)
	b.commit(t, batch)
	d.Release(batch)
	tick := time.NewTicker(5 * time.Millisecond)
	for range 200 { // a second of failed ingests
		failed, _ := pendingBatch(sub, 1)
		d.Reserve(failed)
		d.Release(failed)
		<-tick.C
	}
	tick.Stop()
	if err := tr.Err(); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("after the refills failed the tracker says %v, want store unavailable (for /readyz)", err)
	}
	if n := st.calls.Load(); n > 3 {
		t.Errorf("%d reads of the store while it was down for a second under 200 failed ingests, want at most 3", n)
	}
	st.down.Store(false)
	testenv.Eventually(t, 10*time.Second, "the committed delivery sent once the store is back", func() bool { return sent.Load() == 1 })
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 || !strings.Contains(logs.String(), `msg="store outage began"`) {
		t.Errorf("%d ERROR lines, want only the outage's start:\n%s", n, logs.String())
	}
}

type syncWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// refusesResults is a store that takes no attempt result: a database gone
// while the node stops.
type refusesResults struct {
	store.Store
	tries atomic.Int64
}

func (s *refusesResults) DeliveryRecordResults(ctx context.Context, rs []store.AttemptResult) error {
	s.tries.Add(1)
	return fmt.Errorf("%w: dial tcp 127.0.0.1:5432: connection refused", store.ErrUnavailable)
}

// Stopping while the store refuses results returns once its context ends:
// the results are dropped, as a kill would drop them, and their
// deliveries stay pending to be sent again. (It retried for ever, so
// SIGTERM during an outage never ended the process.)
func TestStopDoesNotHangOnAStoreThatRefusesResults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "refused.example:443")
	st := &refusesResults{Store: b.store}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&syncWriter{mu: &mu, w: &logs}, nil))
	var sent atomic.Int64
	d := New(Config{Store: st, Subs: b.subs, Log: log, Sender: senderFunc(func(context.Context, *core.Subscription, *core.Job) send.Outcome {
		sent.Add(1)
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	})})
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := b.pending(t, sub, 1)[0]
	d.Wake(sub.Host, sub.ID)
	testenv.Eventually(t, 5*time.Second, "the delivery sent and its result refused", func() bool { return sent.Load() == 1 && st.tries.Load() > 0 })

	stopped := make(chan struct{})
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		d.Stop(ctx)
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop with a 200 ms deadline still waiting after 10 s on a store that refuses results")
	}
	if got := b.state(t, id); got.State != core.DeliveryPending {
		t.Errorf("the delivery whose result was dropped is %s, want pending (sent again later)", got.State)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "stopped with attempt results unwritten") {
		t.Errorf("dropping results was not logged:\n%s", logs.String())
	}
}

// A hand-off reserved before its lane was dropped goes through the store:
// another node disabled the subscription (writing its pending deliveries
// skipped) and made it active again, and this node's reload dropped the
// lane before the hand-off came.
func TestHandOffReservedBeforeALaneDropAsksTheStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "dropped.example:443")
	d, sends := b.startCounting(t)
	batch, _ := pendingBatch(sub, 1)
	ev, dl := batch[0].Event, batch[0].Deliveries[0]
	d.Reserve(batch)
	b.commit(t, batch)

	b.disableAndReenableElsewhere(t, d, sub)
	d.Notify([]core.Job{{Delivery: dl, Event: ev}})

	b.skippedNeverSent(t, d, sends, sub, dl.ID)
}

// A refill that read a delivery as pending before its lane was dropped
// (another node's disable skipped it, then re-enabled the subscription,
// all heard in one reload) must not queue what it read: it reads again,
// and the skipped delivery is never sent.
func TestRefillBegunBeforeALaneDropReadsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub := b.subscription(t, "dropped-while-reading.example:443")
	id := b.pending(t, sub, 1)[0]
	st := &slowDue{Store: b.store, asked: make(chan struct{}), release: make(chan struct{})}
	d, sends := b.startCountingOn(t, st) // its resync starts a refill
	<-st.asked                           // which has read the delivery as pending

	b.disableAndReenableElsewhere(t, d, sub)
	close(st.release)

	b.skippedNeverSent(t, d, sends, sub, id)
}

// disableAndReenableElsewhere has another node disable sub (its pending
// deliveries written skipped) and make it active again, both heard here
// in one reload.
func (b *bundle) disableAndReenableElsewhere(t *testing.T, d *Dispatcher, sub core.Subscription) {
	t.Helper()
	off, on := sub, sub
	off.State, off.DisabledReason, off.UpdatedAt = core.SubDisabled, "disabled by request", sub.UpdatedAt.Add(time.Millisecond)
	on.UpdatedAt = sub.UpdatedAt.Add(2 * time.Millisecond)
	for _, s := range []core.Subscription{off, on} {
		if err := b.store.SubscriptionUpdate(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	b.subs.Put(on) // what the reload read
	d.Reloaded(map[string]bool{sub.ID: true})
}

// skippedNeverSent checks that the lane, once a delivery made after the
// re-enable is delivered and it is idle, never sent the skipped one.
func (b *bundle) skippedNeverSent(t *testing.T, d *Dispatcher, sends func(string) int, sub core.Subscription, skipped string) {
	t.Helper()
	after, ids := pendingBatch(sub, 1)
	b.commit(t, after)
	d.Wake(sub.Host, sub.ID)
	testenv.Eventually(t, 5*time.Second, "the delivery made after the re-enable to be delivered", func() bool {
		dl, _, err := b.store.DeliveryGet(context.Background(), "", ids[0])
		return err == nil && dl.State == core.DeliveryDelivered
	})
	testenv.Eventually(t, 5*time.Second, "the lane to go idle", func() bool { return d.Stats().Window == 0 && d.Stats().Inflight == 0 })
	if n := sends(skipped); n != 0 {
		t.Errorf("the skipped delivery was sent %d times, want none", n)
	}
	if dl, _, err := b.store.DeliveryGet(context.Background(), "", skipped); err != nil || dl.State != core.DeliverySkipped {
		t.Errorf("the delivery is %q (err %v), want skipped", dl.State, err)
	}
}

// startCounting starts a dispatcher whose every send delivers, and returns
// how many times a delivery was sent so far.
func (b *bundle) startCounting(t *testing.T) (*Dispatcher, func(id string) int) {
	return b.startCountingOn(t, nil)
}

// startCountingOn is startCounting over st (nil: the bundle's store).
func (b *bundle) startCountingOn(t *testing.T, st store.Store) (*Dispatcher, func(id string) int) {
	var mu sync.Mutex
	sent := map[string]int{}
	d := b.run(t, Config{Store: st, Sender: senderFunc(func(ctx context.Context, s *core.Subscription, j *core.Job) send.Outcome {
		mu.Lock()
		sent[j.Delivery.ID]++
		mu.Unlock()
		return send.Outcome{Class: send.Delivered, StatusCode: 200}
	})})
	return d, func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return sent[id]
	}
}
