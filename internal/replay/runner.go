// Package replay runs bulk replay jobs: each puts a subscription's
// deliveries of the states it names back in line a batch at a time, at the
// job's own rate, so a recovered endpoint gets what it missed at a bounded
// pace, through the same queue and admission as everything else.
package replay

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"hookd/internal/core"
	"hookd/internal/outage"
	"hookd/internal/store"
	"hookd/internal/subs"
)

const (
	// tick is how often the loop looks at its jobs' budgets: fine enough
	// that a batch goes within a fifth of StepEvery of being due.
	tick = 20 * time.Millisecond
	// listEvery is how often the loop reads which jobs run (at once when
	// kicked): a job started on another node is picked up within it.
	listEvery = time.Second
)

// Waker is the dispatcher: told where new due work appeared, and asked
// which shards this node dispatches.
type Waker interface {
	Wake(host, subscriptionID string)
	OwnsShard(shard int) bool
}

// Runner steps the running jobs of the destinations this node dispatches.
// One goroutine (loop) owns jobs and listed; the rest is set before Start.
type Runner struct {
	store store.Store
	subs  *subs.Registry
	wake  Waker
	log   *slog.Logger

	// Completed, if set, is called once for each job that reaches done
	// (not cancelled), on the node whose step finished it, after that step
	// committed; on the runner's goroutine, so it should not block long.
	// Set it before Start.
	Completed func(core.ReplayJob)
	// Outage, if set before Start, is told of the store calls that failed:
	// an outage is logged there once, not here for each call.
	Outage *outage.Tracker

	jobs   map[string]*job // running jobs by ID, as last listed
	listed time.Time       // when jobs was last read from the store
	clock  func() time.Time

	kick    chan struct{}
	quit    chan struct{}
	done    chan struct{}
	started atomic.Bool
	once    sync.Once
}

// job is a running job and this node's budget for it.
type job struct {
	core.ReplayJob
	pace *pace
	// waiting are the batches this node put back that were not yet seen
	// tried, oldest first; they count against the window until they are.
	waiting [][]string
	// idleUntil holds the job back after a store error: a database down
	// is tried once a listEvery per job, not every tick.
	idleUntil time.Time
}

// waitingCount is how many deliveries are in waiting.
func (j *job) waitingCount() int {
	n := 0
	for _, b := range j.waiting {
		n += len(b)
	}
	return n
}

func New(st store.Store, reg *subs.Registry, w Waker, log *slog.Logger) *Runner {
	return &Runner{store: st, subs: reg, wake: w, log: log, jobs: map[string]*job{}, clock: time.Now,
		kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// Start runs the loop until Stop.
func (r *Runner) Start() {
	if r.started.CompareAndSwap(false, true) {
		go r.loop()
	}
}

// Kick reads the running jobs now rather than within listEvery (a job was
// created).
func (r *Runner) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Stop ends the loop; unfinished jobs resume at the next start.
func (r *Runner) Stop() {
	r.once.Do(func() { close(r.quit) })
	if r.started.Load() {
		<-r.done
	}
}

func (r *Runner) loop() {
	defer close(r.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-r.quit:
			return
		case <-t.C:
		case <-r.kick:
			r.listed = time.Time{}
		}
		r.run(r.clock())
		// Idle, it only looks for jobs; Reset leaves no stale tick (Go 1.23).
		next := tick
		if len(r.jobs) == 0 {
			next = listEvery
		}
		t.Reset(next)
	}
}

// run reads the running jobs when due, then steps each one whose budget
// allows a batch.
func (r *Runner) run(now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if now.Sub(r.listed) >= listEvery {
		began := time.Now()
		if err := r.list(ctx); err != nil {
			r.Outage.Report(r.log, "listing replay jobs", began, err)
		}
		r.listed = now
	}
	for _, j := range r.jobs {
		r.step(ctx, j, now)
	}
}

// list reads the running jobs, keeping the budget of each one known.
func (r *Runner) list(ctx context.Context) error {
	running, err := r.store.ReplayJobsRunning(ctx)
	if err != nil {
		return err
	}
	jobs := make(map[string]*job, len(running))
	for _, j := range running {
		if old, ok := r.jobs[j.ID]; ok {
			old.ReplayJob = j
			jobs[j.ID] = old
			continue
		}
		jobs[j.ID] = &job{ReplayJob: j, pace: newPace(j.Rate)}
	}
	r.jobs = jobs
	return nil
}

// step puts back the batch j's budget allows at now, if this node owns
// its destination. With several nodes each job is stepped by that one
// node, so its pace is its rate, not that times the nodes. A subscription
// this node does not know (deleted) is stepped anyway: the step marks the
// job done.
func (r *Runner) step(ctx context.Context, j *job, now time.Time) {
	sub, known := r.subs.Get(j.SubscriptionID)
	if (known && !r.wake.OwnsShard(core.ShardOf(sub.Host))) || now.Before(j.idleUntil) {
		return
	}
	began := time.Now()
	if err := r.tried(ctx, j); err != nil {
		r.Outage.Report(r.log, "replay job: reading what was tried", began, err, "job", j.ID)
		j.idleUntil = now.Add(listEvery)
		return
	}
	n := j.pace.allow(now, j.waitingCount())
	if n == 0 {
		return
	}
	began = time.Now()
	after, ids, err := r.store.ReplayJobStep(ctx, j.ID, n, now.UTC())
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		delete(r.jobs, j.ID) // cancelled, or finished by another node
		return
	case err != nil:
		r.Outage.Report(r.log, "replay job step", began, err, "job", j.ID)
		j.idleUntil = now.Add(listEvery)
		return
	}
	j.pace.took(len(ids))
	if len(ids) > 0 {
		j.waiting = append(j.waiting, ids)
	}
	j.ReplayJob = after
	if len(ids) > 0 && known {
		r.wake.Wake(sub.Host, sub.ID)
	}
	if after.State == core.ReplayDone {
		delete(r.jobs, j.ID)
		if r.Completed != nil {
			r.Completed(after)
		}
	}
}

// tried moves the batches of j whose every delivery has been tried from
// waiting to the pace's window.
func (r *Runner) tried(ctx context.Context, j *job) error {
	if len(j.waiting) == 0 {
		return nil
	}
	var ids []string
	for _, b := range j.waiting {
		ids = append(ids, b...)
	}
	untried, err := r.store.DeliveryUntried(ctx, ids)
	if err != nil {
		return err
	}
	// Read after the query: each batch found tried reached the endpoint
	// (or failed to) before this instant.
	at := r.clock()
	waits := make(map[string]bool, len(untried))
	for _, id := range untried {
		waits[id] = true
	}
	keep := j.waiting[:0]
	for _, b := range j.waiting {
		if slices.ContainsFunc(b, func(id string) bool { return waits[id] }) {
			keep = append(keep, b)
			continue
		}
		j.pace.triedBy(at, len(b))
	}
	j.waiting = keep
	return nil
}
