// Package ingest turns accepted events into the outbox: each event and all
// its deliveries are written in one durable transaction, and concurrent
// requests share that transaction (group commit) so throughput is not one
// fsync per request.
package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"hookd/internal/core"
	"hookd/internal/metrics"
	"hookd/internal/shed"
	"hookd/internal/store"
	"hookd/internal/subs"
)

// maxBatch bounds one group commit: large enough to amortise the fsync,
// small enough to keep one transaction short.
const maxBatch = 256

// ErrClosed answers submissions after Close.
var ErrClosed = errors.New("ingest: closed")

type Result struct {
	EventID   string
	Duplicate bool
	// Deliveries are the event's deliveries as written (none for a
	// duplicate): a test event's caller answers with its one delivery.
	Deliveries []core.Delivery
}

type request struct {
	ev    core.Event
	reply chan reply
}

type reply struct {
	res Result
	err error
}

// Ingester runs the group-commit loop. Notify (the dispatcher's hand-off)
// receives every committed pending delivery right after its commit.
type Ingester struct {
	store  store.Store
	subs   *subs.Registry
	notify func([]core.Job)
	// reserve and release (nil: none) bracket a commit; see WithReservations.
	reserve, release func([]store.EventInsert)
	m                *metrics.Metrics
	shed             *shed.Shedder // nil: nothing is shed

	in        chan request
	committed chan committed // to answer, in commit order
	closeOnce sync.Once
	quit      chan struct{}
	done      chan struct{}
}

// committed is a durable batch whose callers are still to be answered.
type committed struct {
	batch   []request
	results []store.EventInsertResult
	took    time.Duration
}

// Option configures an Ingester.
type Option func(*Ingester)

// WithMetrics counts accepted and repeated events, deliveries created and
// group commits (size and duration).
func WithMetrics(m *metrics.Metrics) Option { return func(in *Ingester) { in.m = m } }

// WithReservations has reserve told of a batch's deliveries before its
// commit, and release told of those the hand-off will not bring (the
// commit failed, an idempotency key repeated, or the store wrote one
// skipped), so that no refill sends a delivery before its hand-off does.
func WithReservations(reserve, release func([]store.EventInsert)) Option {
	return func(in *Ingester) { in.reserve, in.release = reserve, release }
}

// WithShedder writes the deliveries of subscriptions it sheds skipped.
func WithShedder(s *shed.Shedder) Option { return func(in *Ingester) { in.shed = s } }

func New(st store.Store, reg *subs.Registry, notify func([]core.Job), opts ...Option) *Ingester {
	in := &Ingester{
		store: st, subs: reg, notify: notify,
		in:        make(chan request, maxBatch*4),
		committed: make(chan committed, 16),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	for _, o := range opts {
		o(in)
	}
	answered := make(chan struct{})
	go in.answer(answered)
	go in.loop(answered)
	return in
}

// Submit writes ev (validated by the caller; ID, CreatedAt set here) with a
// delivery for every matching subscription. It returns once the transaction
// is durable, or with an error, in which case nothing of it was written.
func (in *Ingester) Submit(ctx context.Context, ev core.Event) (Result, error) {
	r := request{ev: ev, reply: make(chan reply, 1)}
	select {
	case <-in.quit:
		// Checked first: with both ready a select picks at random, and a
		// request queued after the loop's last drain is never answered.
		return Result{}, ErrClosed
	default:
	}
	select {
	case in.in <- r:
	case <-in.quit:
		return Result{}, ErrClosed
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	// Once queued the commit goes ahead; waiting for it is the caller's choice.
	select {
	case rep := <-r.reply:
		return rep.res, rep.err
	case <-in.done:
		// Every queued request is answered before done closes: no reply now
		// means this one came in after the loop's last look (a shutdown),
		// and nothing of it was written.
		select {
		case rep := <-r.reply:
			return rep.res, rep.err
		default:
			return Result{}, ErrClosed
		}
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// Close commits what is queued and stops the loop.
func (in *Ingester) Close() {
	in.closeOnce.Do(func() { close(in.quit) })
	<-in.done
}

// loop is the one writer: it gathers a batch, commits it, hands its
// deliveries to the dispatcher, passes it to answer and gathers the next.
// Answering callers happens off this goroutine, so that under load the next
// commit does not wait for the scheduler to run the woken handlers.
func (in *Ingester) loop(answered chan struct{}) {
	defer func() {
		close(in.committed)
		<-answered
		close(in.done)
	}()
	for {
		var batch []request // handed to answer with the commit: never reused
		select {
		case r := <-in.in:
			batch = append(make([]request, 0, 16), r)
		case <-in.quit:
			// Drain: whoever got into the queue gets an answer.
			for {
				select {
				case r := <-in.in:
					in.commit([]request{r})
				default:
					return
				}
			}
		}
		// Whatever queued while the last commit ran joins this one.
	fill:
		for len(batch) < maxBatch {
			select {
			case r := <-in.in:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		in.commit(batch)
	}
}

func (in *Ingester) commit(batch []request) {
	now := time.Now().UTC()
	inserts := make([]store.EventInsert, len(batch))
	for i, r := range batch {
		ev := r.ev
		ev.ID = core.NewID("evt")
		ev.CreatedAt = now
		inserts[i] = store.EventInsert{Event: ev, Deliveries: in.fanOut(ev, now)}
	}
	if in.reserve != nil {
		in.reserve(inserts)
	}
	// The commit outlives any one caller: it is shared by the whole batch.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	began := time.Now()
	results, err := in.store.EventInsertBatch(ctx, inserts)
	took := time.Since(began)
	cancel()
	if err != nil {
		if in.release != nil {
			in.release(inserts)
		}
		if len(batch) > 1 {
			// One bad event must not fail its neighbours: retry them alone.
			for _, r := range batch {
				in.commit([]request{r})
			}
			return
		}
		batch[0].reply <- reply{err: err}
		return
	}
	// The hand-off to the dispatcher happens here, at once; the reservation
	// keeps refills off these deliveries however late it comes.
	n := 0
	for _, res := range results {
		n += len(res.Deliveries)
	}
	jobs := make([]core.Job, 0, n)
	skipped := 0 // as written: the store skips what it must at commit
	for i, res := range results {
		for _, d := range res.Deliveries {
			if d.State == core.DeliveryPending {
				jobs = append(jobs, core.Job{Delivery: d, Event: inserts[i].Event})
			} else if d.State == core.DeliverySkipped {
				skipped++
			}
		}
	}
	if len(jobs) > 0 && in.notify != nil {
		in.notify(jobs)
	}
	if in.release != nil {
		if unsent := unsent(inserts, results); len(unsent) > 0 {
			in.release(unsent)
		}
	}
	in.m.DeliveriesCreated(len(jobs), skipped)
	in.committed <- committed{batch: batch, results: results, took: took}
}

// unsent returns what was reserved but will not be handed off: every
// delivery of a repeated idempotency key (none was written), and those
// planned pending that the store wrote otherwise (their subscription was
// disabled or deleted by the commit).
func unsent(inserts []store.EventInsert, results []store.EventInsertResult) []store.EventInsert {
	var out []store.EventInsert
	for i, res := range results {
		if res.Duplicate {
			out = append(out, inserts[i])
			continue
		}
		var ds []core.Delivery
		for k, d := range res.Deliveries { // in the order given
			if planned := inserts[i].Deliveries[k]; planned.State == core.DeliveryPending && d.State != core.DeliveryPending {
				ds = append(ds, planned)
			}
		}
		if len(ds) > 0 {
			out = append(out, store.EventInsert{Event: inserts[i].Event, Deliveries: ds})
		}
	}
	return out
}

// answer replies to each committed batch's callers, in commit order.
func (in *Ingester) answer(answered chan struct{}) {
	defer close(answered)
	for c := range in.committed {
		dups := 0
		for i, r := range c.batch {
			res := c.results[i]
			r.reply <- reply{res: Result{EventID: res.EventID, Duplicate: res.Duplicate, Deliveries: res.Deliveries}}
			if res.Duplicate {
				dups++
			}
		}
		in.m.Committed(len(c.batch)-dups, dups, c.took)
	}
}

// fanOut makes one delivery per matching subscription. A disabled or shed
// subscription's delivery is written skipped, so it can be replayed later.
// hookd's own events go only to patterns that name them, never to the
// subscription they are about; a test event only to its one subscription.
func (in *Ingester) fanOut(ev core.Event, now time.Time) []core.Delivery {
	var matched []*core.Subscription
	switch {
	case ev.Only != "":
		if s, ok := in.subs.Get(ev.Only); ok && s.TenantID == ev.TenantID {
			matched = []*core.Subscription{s}
		}
	case core.Reserved(ev.Type):
		matched = slices.DeleteFunc(in.subs.MatchNamed(ev.TenantID, ev.Type),
			func(s *core.Subscription) bool { return s.ID == ev.About })
	default:
		matched = in.subs.Match(ev.TenantID, ev.Type)
	}
	out := make([]core.Delivery, 0, len(matched))
	for _, s := range matched {
		state, lastErr := core.DeliveryPending, ""
		if s.State == core.SubDisabled {
			state, lastErr = core.DeliverySkipped, store.SkipDisabled
		} else if _, on := in.shed.Shedding(s.ID); on {
			state = core.DeliverySkipped
			lastErr = fmt.Sprintf("shed at ingest: over %d deliveries pending and not shrinking; replayable", in.shed.Threshold())
		}
		out = append(out, core.Delivery{
			ID:             core.NewID("dlv"),
			EventID:        ev.ID,
			SubscriptionID: s.ID,
			TenantID:       ev.TenantID,
			EventType:      ev.Type,
			Host:           s.Host,
			Shard:          core.ShardOf(s.Host),
			State:          state,
			NextAttemptAt:  now,
			LastError:      lastErr,
			CreatedAt:      now,
			UpdatedAt:      now,
		})
	}
	return out
}
