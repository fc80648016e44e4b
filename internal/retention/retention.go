// Package retention removes events, deliveries and attempts once they are
// older than the retention window, a batch at a time, keeping their daily
// per-subscription counts (see store.Purge).
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"hookd/internal/outage"
	"hookd/internal/store"
)

const (
	// Every is how often a pass runs (the first right at start).
	Every = time.Hour
	// Min is the shortest window a node or purge takes: shorter looks like
	// a slip (1ns, 30s) and would remove a delivery's record and payload
	// before anyone could look at it or replay it.
	Min = time.Hour
	// batch events are looked at per transaction, so a pass never holds
	// the writer long, however many old events are kept (pending).
	batch = 1000
)

// Purger runs passes until Stop.
type Purger struct {
	st     store.Store
	keep   time.Duration
	log    *slog.Logger
	outage *outage.Tracker // nil: every failed pass is logged
	ctx    context.Context // cancelled by Stop: a batch in progress ends too
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs a pass now and every Every after, removing what is older than
// keep. A pass the store fails in an outage is told to out, which logs the
// outage once for the node.
func Start(st store.Store, keep time.Duration, log *slog.Logger, out *outage.Tracker) *Purger {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Purger{st: st, keep: keep, log: log, outage: out, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go p.loop()
	return p
}

// Stop ends the loop, cancelling the batch in progress.
func (p *Purger) Stop() {
	p.cancel()
	<-p.done
}

func (p *Purger) loop() {
	defer close(p.done)
	t := time.NewTicker(Every)
	defer t.Stop()
	for {
		p.pass()
		select {
		case <-t.C:
		case <-p.ctx.Done():
			return
		}
	}
}

// pass walks every event older than the window once; an error ends it and
// the next one tries again.
func (p *Purger) pass() {
	if _, err := Pass(p.ctx, p.st, p.keep, p.log); err != nil && p.ctx.Err() == nil {
		began := time.Now()
		var bf *batchFailed
		if errors.As(err, &bf) {
			began = bf.began
		}
		p.outage.Report(p.log, "retention: removing old events", began, err)
	}
}

// batchFailed is Pass's error with when the failing batch began: a pass
// may outlast an outage's end, and the tracker asks when the call began.
type batchFailed struct {
	began time.Time
	err   error
}

func (e *batchFailed) Error() string { return e.err.Error() }
func (e *batchFailed) Unwrap() error { return e.err }

// Pass removes, a batch at a time, every event older than keep and not
// pending, and answers how many went (also logged). An error ends it: what
// it removed so far stays removed.
func Pass(ctx context.Context, st store.Store, keep time.Duration, log *slog.Logger) (int, error) {
	cutoff := time.Now().Add(-keep)
	var at store.PurgeCursor
	removed := 0
	for ctx.Err() == nil {
		began := time.Now()
		bctx, cancel := context.WithTimeout(ctx, time.Minute)
		r, err := st.Purge(bctx, cutoff, at, batch)
		cancel()
		if err != nil {
			return removed, &batchFailed{began: began, err: fmt.Errorf("%w (removed %d)", err, removed)}
		}
		removed += r.Removed
		if r.Looked < batch {
			break
		}
		at = r.Next
	}
	if removed > 0 {
		log.Info("retention: removed old events with their deliveries and attempts",
			"events", removed, "older_than", cutoff.UTC().Format(time.RFC3339))
	}
	return removed, ctx.Err()
}
