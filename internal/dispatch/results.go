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
	store     store.Store
	interval  time.Duration
	batch     int
	report    func(msg string, err error, args ...any) bool // a failed write (Dispatcher.report)
	committed func()                                        // a write committed (outage.Tracker.Committed)
	written   func([]result, time.Time)                     // after every successful write, with when it began
	in        chan result
	done      chan struct{}
}

// newResultWriter queues two batches more than the one being written.
func newResultWriter(st store.Store, interval time.Duration, batch int,
	report func(string, error, ...any) bool, committed func(), written func([]result, time.Time)) *resultWriter {
	w := &resultWriter{store: st, interval: interval, batch: batch, report: report, committed: committed, written: written,
		in: make(chan result, batch*2), done: make(chan struct{})}
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

// close writes everything queued and stops. No add may follow.
func (w *resultWriter) close() {
	close(w.in)
	<-w.done
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
		timer := time.NewTimer(w.interval)
		open := true
	collect:
		for len(batch) < w.batch {
			select {
			case r, more := <-w.in:
				if !more {
					open = false
					break collect
				}
				batch = append(batch, r)
			case <-timer.C:
				break collect
			}
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
func (w *resultWriter) write(batch []result) {
	rs := make([]store.AttemptResult, len(batch))
	for i, r := range batch {
		rs[i] = r.AttemptResult
	}
	backoff := 100 * time.Millisecond
	began := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := w.store.DeliveryRecordResults(ctx, rs)
		cancel()
		if err == nil {
			break
		}
		w.report("writing attempt results; will retry", err, "n", len(rs))
		time.Sleep(backoff)
		backoff = min(backoff*2, 5*time.Second)
	}
	w.committed()
	w.written(batch, began)
}
