package dispatch

import (
	"context"
	"time"

	"hookd/internal/core"
	"hookd/internal/metrics"
	"hookd/internal/store"
)

// result is one finished attempt on its way to the store.
type result struct {
	store.AttemptResult
	host    string
	ordered bool   // its lane's next delivery of the same key waits for this one
	disable string // non-empty: disable the subscription with this reason once written
	// eventAt is the event's acceptance, for the delivery-lag metric; zero
	// when the attempt is in a replayed round.
	eventAt time.Time
}

// unblocks reports whether the next delivery of its ordering key waits on
// this result being written.
func (r *result) unblocks() bool { return r.ordered && r.State != core.DeliveryPending }

// outcome is what the attempt did to its delivery, for the attempts metric.
func (r *result) outcome() metrics.Outcome {
	switch {
	case r.State == core.DeliveryDelivered:
		return metrics.OutcomeDelivered
	case r.State == core.DeliveryPending:
		return metrics.OutcomeRetry
	case r.disable != "":
		return metrics.OutcomeGone
	}
	return metrics.OutcomeFail
}

// resultWriter writes attempt results in batches: one transaction per
// interval or per batch results, whichever comes first. Until a result is
// written its delivery is still pending in the store, so a crash resends it.
type resultWriter struct {
	d        *Dispatcher // its store, log and outage tracker; written after every successful write
	interval time.Duration
	batch    int
	in       chan result
	done     chan struct{}
	// ctx ends when the writer gives up (abandon): a write the store
	// refuses is then dropped rather than retried.
	ctx     context.Context
	abandon context.CancelFunc
}

// newResultWriter queues two batches more than the one being written.
func newResultWriter(d *Dispatcher) *resultWriter {
	w := &resultWriter{d: d, interval: d.cfg.FlushInterval, batch: d.cfg.ResultBatch,
		in: make(chan result, d.cfg.ResultBatch*2), done: make(chan struct{})}
	w.ctx, w.abandon = context.WithCancel(context.Background())
	go w.loop()
	return w
}

// add queues a result; it blocks when the writer is behind, which slows
// senders rather than growing memory without bound.
func (w *resultWriter) add(r result) { w.in <- r }

// tryAdd queues a result if the writer has room, without waiting.
func (w *resultWriter) tryAdd(r result) bool {
	select {
	case w.in <- r:
		return true
	default:
		return false
	}
}

// close writes everything queued and stops, dropping what the store
// still refuses once ctx ends (see write). No add may follow.
func (w *resultWriter) close(ctx context.Context) {
	close(w.in)
	select {
	case <-w.done:
	case <-ctx.Done():
		w.abandon()
		<-w.done
	}
	w.abandon()
}

func (w *resultWriter) loop() {
	defer close(w.done)
	var batch []result
	for {
		r, ok := <-w.in
		if !ok {
			return
		}
		batch = append(batch[:0], r)
		hurry := r.unblocks()
		timer := time.NewTimer(w.interval)
		open := true
	collect:
		for len(batch) < w.batch {
			var r result
			// A result the next of its ordering key waits for is written
			// with what is queued already, not after the interval: each
			// key's turn would otherwise take an interval (20 ms: 50 a
			// second per key).
			if hurry {
				select {
				case r, open = <-w.in:
				default:
					break collect
				}
			} else {
				select {
				case r, open = <-w.in:
				case <-timer.C:
					break collect
				}
			}
			if !open {
				break collect
			}
			batch = append(batch, r)
			hurry = hurry || r.unblocks()
		}
		timer.Stop()
		w.write(batch)
		if !open {
			return
		}
	}
}

// write retries until the store takes the batch: dropping a result would
// lose an attempt record (the delivery itself stays pending either way).
// Only once the writer is abandoned (a shutdown whose deadline passed
// with the store down) is a batch dropped, as a kill would: shutdown must
// not hang on a dead database.
func (w *resultWriter) write(batch []result) {
	rs := make([]store.AttemptResult, len(batch))
	for i, r := range batch {
		rs[i] = r.AttemptResult
	}
	backoff := 100 * time.Millisecond
	began := time.Now()
	for {
		tried := time.Now()
		ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
		err := w.d.cfg.Store.DeliveryRecordResults(ctx, rs)
		cancel()
		if err == nil {
			break
		}
		if w.ctx.Err() != nil {
			w.d.cfg.Log.Warn("stopped with attempt results unwritten: their deliveries stay pending and are sent again",
				"n", len(rs), "err", err)
			return
		}
		w.d.report("writing attempt results; will retry", tried, err, "n", len(rs))
		select {
		case <-time.After(backoff):
		case <-w.ctx.Done():
		}
		backoff = min(backoff*2, 5*time.Second)
	}
	w.d.cfg.Outage.Committed()
	w.d.written(batch, began)
}
