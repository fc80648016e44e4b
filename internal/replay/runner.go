// Package replay runs bulk replay jobs: each puts a subscription's failed
// and skipped deliveries back in line a batch at a time, so a recovered
// endpoint gets what it missed at a bounded pace, through the same queue
// and admission as everything else.
package replay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/subs"
)

const (
	// Batch and Interval bound a job's pace: at most Batch deliveries put
	// back in line per Interval. Admission (rate limit, breaker, ramp) then
	// paces the sends themselves.
	Batch    = 500
	Interval = time.Second
)

// Waker is the dispatcher: told where new due work appeared, and asked
// which shards this node dispatches.
type Waker interface {
	Wake(host, subscriptionID string)
	OwnsShard(shard int) bool
}

type Runner struct {
	store store.Store
	subs  *subs.Registry
	wake  Waker
	log   *slog.Logger

	kick chan struct{}
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func New(st store.Store, reg *subs.Registry, w Waker, log *slog.Logger) *Runner {
	r := &Runner{store: st, subs: reg, wake: w, log: log,
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

// Kick runs a step now rather than at the next tick (a job was created).
func (r *Runner) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Stop ends the loop; unfinished jobs resume at the next start.
func (r *Runner) Stop() {
	r.once.Do(func() { close(r.quit) })
	<-r.done
}

func (r *Runner) loop() {
	defer close(r.done)
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-tick.C:
		case <-r.kick:
		}
		r.step()
	}
}

// step advances every running job by one batch.
func (r *Runner) step() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := r.store.ReplayJobsRunning(ctx)
	if err != nil {
		r.log.Error("listing replay jobs", "err", err)
		return
	}
	for _, j := range jobs {
		// With several nodes each job is stepped by the node that owns its
		// destination, so its pace is Batch per Interval, not that times the
		// nodes. A subscription this node does not know (deleted) is stepped
		// anyway: the step marks the job done.
		if sub, ok := r.subs.Get(j.SubscriptionID); ok && !r.wake.OwnsShard(core.ShardOf(sub.Host)) {
			continue
		}
		_, ids, err := r.store.ReplayJobStep(ctx, j.ID, Batch, time.Now().UTC())
		if errors.Is(err, store.ErrConflict) {
			continue // finished or cancelled since the list
		}
		if err != nil {
			r.log.Error("replay job step", "job", j.ID, "err", err)
			continue
		}
		if len(ids) > 0 {
			if sub, ok := r.subs.Get(j.SubscriptionID); ok {
				r.wake.Wake(sub.Host, sub.ID)
			}
		}
	}
}
