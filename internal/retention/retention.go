// Package retention removes events, deliveries and attempts once they are
// older than the retention window, a batch at a time, keeping their daily
// per-subscription counts (see store.Purge).
package retention

import (
	"context"
	"log/slog"
	"time"

	"hookd/internal/store"
)

const (
	// Every is how often a pass runs (the first right at start).
	Every = time.Hour
	// batch events go per transaction, so a pass never holds the writer long.
	batch = 1000
)

// Purger runs passes until Stop.
type Purger struct {
	st    store.Store
	keep  time.Duration
	log   *slog.Logger
	every time.Duration
	quit  chan struct{}
	done  chan struct{}
}

// Start runs a pass now and every Every after, removing what is older than
// keep.
func Start(st store.Store, keep time.Duration, log *slog.Logger) *Purger {
	p := &Purger{st: st, keep: keep, log: log, every: Every, quit: make(chan struct{}), done: make(chan struct{})}
	go p.loop()
	return p
}

// Stop ends the loop, after the batch in progress.
func (p *Purger) Stop() {
	close(p.quit)
	<-p.done
}

func (p *Purger) loop() {
	defer close(p.done)
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		p.pass()
		select {
		case <-t.C:
		case <-p.quit:
			return
		}
	}
}

// pass removes batches until one comes back short. An error ends the pass;
// the next one tries again.
func (p *Purger) pass() {
	cutoff := time.Now().Add(-p.keep)
	total := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		n, err := p.st.Purge(ctx, cutoff, batch)
		cancel()
		total += n
		if err != nil {
			p.log.Error("retention: removing old events", "err", err, "removed", total)
			return
		}
		if n < batch {
			break
		}
		select {
		case <-p.quit:
			return
		default:
		}
	}
	if total > 0 {
		p.log.Info("retention: removed old events with their deliveries and attempts",
			"events", total, "older_than", cutoff.UTC().Format(time.RFC3339))
	}
}
