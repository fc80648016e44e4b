// Package dispatch decides what is sent when. Each destination host has a
// queue; inside it each subscription (an endpoint) has a lane holding a
// bounded window of due deliveries, refilled from the store in order of
// next_attempt_at. Admission has two keys: the host (host:port) is one
// server to be polite to, and owns the concurrency cap its active endpoints
// share fairly; the endpoint owns its failures (breaker, Retry-After pause,
// 429 back-off, recovery ramp, rate limit). The host has a circuit of its
// own only on host-wide evidence. Results go back to the store in batches.
// With several nodes on one store, a node dispatches only the hosts on
// shards it leases (leases.go). Time is read from the time package only, so
// tests run the real code under testing/synctest.
//
// The files, one concern each: intake.go takes work in (hand-off,
// reservations, wake-ups); host.go holds host and lane state and their
// admission; admission.go the value types admission is made of; attempt.go
// starts and finishes attempts; reconcile.go keeps memory in step with the
// store (refill, resync, strays, expiry); results.go writes results;
// health.go reports; leases.go owns shards.
package dispatch

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"hookd/internal/core"
	"hookd/internal/metrics"
	"hookd/internal/outage"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/internal/subs"
)

// Sender performs one attempt. *send.Sender is the real one; simulations
// substitute endpoints in memory.
type Sender interface {
	Send(ctx context.Context, sub *core.Subscription, job *core.Job, now time.Time) send.Outcome
}

type Config struct {
	Store  store.Store
	Subs   *subs.Registry
	Sender Sender
	Log    *slog.Logger
	// HostConcurrency caps in-flight attempts per destination host (default
	// 10), shared fairly among the endpoints active on it.
	HostConcurrency int
	// Window caps the due deliveries a lane fetches from the store and
	// holds as its backlog (default 32).
	Window int
	// FreshWindow caps the deliveries handed over at ingest that a lane
	// holds (default 4096), and FreshBytes those held by every lane
	// together, counting payloads (default 64 MiB). Under load, hand-offs
	// kept in memory save reading them back from the store; beyond these
	// bounds they wait in the store, so memory never grows with a backlog.
	FreshWindow int
	FreshBytes  int64
	// FlushInterval bounds how long a result waits to be written (default
	// 20ms); ResultBatch caps one write (default 4096), and twice as many
	// more may wait. The batch is large because under heavy ingest it rides
	// an ingest commit of up to 2,560 deliveries (256 events at fanout 10):
	// at 512 the results fell behind and delivery dropped to a third.
	FlushInterval time.Duration
	ResultBatch   int
	// Resync is how often the store is asked for every subscription with
	// pending work, a safety net behind hand-offs and wake-ups (default 30s).
	Resync time.Duration
	// Node names this process to a store.Leaser (default DefaultNode());
	// LeaseTTL is how long its shard leases last unrenewed (default 15s,
	// renewed every LeaseTTL/3). Both unused unless Store is a Leaser.
	Node     string
	LeaseTTL time.Duration
	// Metrics receives attempt outcomes and finished deliveries (nil: none).
	Metrics *metrics.Metrics
	// Outage is told of every store call that failed (an outage is logged
	// there once, not here for each call) and of every result write that
	// committed (nil: every failure is logged here).
	Outage *outage.Tracker
	// Disable turns a subscription off after its endpoint answered 410
	// Gone: the subscription service's Disable, so it is ordered like every
	// other change (nil: the 410 only fails its delivery).
	Disable func(ctx context.Context, subID, reason string) error
	// Failing is told, off the dispatcher's lock and at most once an hour
	// per subscription on this node, that an endpoint fails: reason is
	// endpoint_circuit_open, host_circuit_open or delivery_failed, with the
	// attempt that showed it (nil: nobody is told).
	Failing func(ctx context.Context, f Failure)
}

// Failure is one report for Config.Failing.
type Failure struct {
	SubscriptionID, Reason string
	Status                 int
	Error                  string
	At                     time.Time
}

// Dispatcher holds one big mutex, mu, over the host and lane state and
// every field below it. Methods and helpers that must be called with mu
// held end in Locked; no function lets go of a lock its caller took.
// Exported methods take mu themselves. Attempts, refills and store writes
// run on goroutines of their own without mu and take it to record what
// they did.
type Dispatcher struct {
	cfg     Config
	results *resultWriter

	mu         sync.Mutex
	moves      []move // lanes to look at after a subscription moved host (see movedFromLocked)
	freshBytes int64  // held in every lane's fresh queue, see jobSize
	hosts      map[string]*host
	health     map[string]*subHealth // by subscription ID
	// sent holds, by subscription, the deliveries sent and not yet
	// recorded, with the lane that sent them: after a move to another host
	// the new lane must not send them again (see refill).
	sent     map[string]map[string]*lane
	wakes    wakeHeap
	stopping bool
	expiring bool // an expireHeld pass is running
	// refillsAfter holds every lane's refills back after one found the
	// store down: a failed ingest's Release makes its lane due at once, and
	// each read the dead store in turn. refillHold is the hold, doubling
	// from a second to maxRefillHold while refills keep failing.
	refillsAfter time.Time
	refillHold   time.Duration
	kick         chan struct{} // the earliest wake-up changed
	resyncNow    chan struct{}

	// Shard ownership (leases.go). leaser is nil when the store is not a
	// Leaser: then every shard is owned and owned, heldUntil are unused.
	leaser    store.Leaser
	owned     [core.NumShards]bool
	heldUntil time.Time
	leaving   map[int]time.Time // shards given back, not yet handed over: since when
	handAfter time.Time         // after a failed hand-over, the next try
	// board (when the store is one) is where this node publishes its
	// hosts' and endpoints' circuits and pauses, for other nodes' health
	// (health.go) and for whichever node sends to them next (restore).
	board     store.CircuitBoard
	published map[string]published // what board last got, by key
	rebalance chan struct{}
	leaseQuit chan struct{} // ends the lease loop, or the publish loop of a node without leases
	leaseDone chan struct{} // nil until the lease loop runs
	// publishDone: nil unless the publish loop runs on its own (no leases).
	publishDone chan struct{}

	sendCtx    context.Context
	cancelSend context.CancelFunc
	work       sync.WaitGroup // in-flight attempts and refills
	loopDone   chan struct{}
	quit       chan struct{}
	idle       chan attemptArgs // attempt goroutines waiting for their next one
	disabling  map[string]bool  // subscriptions being disabled (disableAsync)
	async      sync.WaitGroup   // disableAsync's and keepRampAsync's store calls
	// failures queue reports for Config.Failing to one goroutine, so a host
	// circuit opening over thousands of endpoints costs no goroutine each;
	// closed (and failuresClosed set) once nothing can report any more.
	failures       chan Failure
	failuresClosed bool
	failuresDone   chan struct{}
}

func New(cfg Config) *Dispatcher {
	if cfg.HostConcurrency <= 0 {
		cfg.HostConcurrency = core.DefaultHostConcurrency
	}
	if cfg.Window <= 0 {
		cfg.Window = 32
	}
	if cfg.FreshWindow <= 0 {
		cfg.FreshWindow = 4096
	}
	if cfg.FreshBytes <= 0 {
		cfg.FreshBytes = 64 << 20
	}
	if cfg.ResultBatch <= 0 {
		cfg.ResultBatch = 4096
	}
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 20 * time.Millisecond
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	d := &Dispatcher{
		cfg:       cfg,
		hosts:     map[string]*host{},
		health:    map[string]*subHealth{},
		sent:      map[string]map[string]*lane{},
		kick:      make(chan struct{}, 1),
		resyncNow: make(chan struct{}, 1),
		rebalance: make(chan struct{}, 1),
		leaseQuit: make(chan struct{}),
		loopDone:  make(chan struct{}),
		quit:      make(chan struct{}),
		idle:      make(chan attemptArgs),
		disabling: map[string]bool{},
		failures:  make(chan Failure, failureQueue),
	}
	d.board, _ = cfg.Store.(store.CircuitBoard)
	if l, ok := cfg.Store.(store.Leaser); ok {
		d.leaser = l
		if d.cfg.Node == "" {
			d.cfg.Node = DefaultNode()
		}
		if d.cfg.LeaseTTL <= 0 {
			d.cfg.LeaseTTL = DefaultLeaseTTL
		}
	}
	d.sendCtx, d.cancelSend = context.WithCancel(context.Background())
	d.results = newResultWriter(d)
	return d
}

// report logs a failed store call begun at began, or tells Config.Outage
// of it if it is an outage; it reports whether it was one.
func (d *Dispatcher) report(msg string, began time.Time, err error, args ...any) bool {
	return d.cfg.Outage.Report(d.cfg.Log, msg, began, err, args...)
}

// Start leases shards (with a Leaser), loads every subscription with
// pending work on them and begins dispatching.
func (d *Dispatcher) Start(ctx context.Context) error {
	if d.leaser != nil {
		if _, err := d.renew(ctx); err != nil {
			return fmt.Errorf("leasing shards: %w", err)
		}
	}
	if err := d.resync(ctx, true); err != nil {
		return err
	}
	d.failuresDone = make(chan struct{})
	go d.reportFailures()
	go d.loop()
	if d.leaser != nil {
		d.leaseDone = make(chan struct{})
		go d.leaseLoop()
	} else if d.board != nil {
		d.publishDone = make(chan struct{})
		go d.publishLoop()
	}
	return nil
}

// Stop starts no new attempts, lets those in flight finish or time out
// (until ctx ends, then cancels them), and writes every result, unless
// ctx ends with the store refusing them: those are dropped (their
// deliveries stay pending, to be sent again) rather than retried for
// ever. Then it gives its shard leases back, so the other nodes take them
// at once.
func (d *Dispatcher) Stop(ctx context.Context) {
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return
	}
	d.stopping = true
	d.mu.Unlock()
	close(d.quit)
	<-d.loopDone
	done := make(chan struct{})
	go func() { d.work.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.cancelSend()
		d.results.abandon() // attempts wait on a writer the store refuses
		<-done
	}
	d.cancelSend()
	d.results.close(ctx)
	d.async.Wait()
	d.mu.Lock()
	d.failuresClosed = true
	close(d.failures)
	d.mu.Unlock()
	if d.failuresDone != nil {
		<-d.failuresDone
	}
	// Renewals ran through the drain so no one else sent meanwhile; the
	// work is now written, so the shards can go.
	if d.leaseDone != nil {
		close(d.leaseQuit)
		<-d.leaseDone
		d.release()
	}
	if d.publishDone != nil {
		close(d.leaseQuit)
		<-d.publishDone
	}
}

// Resync asks for a resync now rather than at the next tick: notifications
// may have been missed (a LISTEN reconnected).
func (d *Dispatcher) Resync() {
	select {
	case d.resyncNow <- struct{}{}:
	default:
	}
}

// loop fires host wake-ups on time and resyncs with the store now and then.
func (d *Dispatcher) loop() {
	defer close(d.loopDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	resync := time.NewTicker(d.cfg.Resync)
	defer resync.Stop()
	for {
		d.mu.Lock()
		now := time.Now()
		for len(d.wakes) > 0 && !d.wakes[0].at.After(now) {
			w := heap.Pop(&d.wakes).(wake)
			if h := d.hosts[w.host]; h != nil {
				if h.wakeAt.Equal(w.at) {
					h.wakeAt = time.Time{}
				}
				d.pumpLocked(h, now)
			}
		}
		next := time.Hour
		if len(d.wakes) > 0 {
			next = d.wakes[0].at.Sub(now)
		}
		d.mu.Unlock()
		timer.Reset(next)
		select {
		case <-d.quit:
			return
		case <-d.kick:
		case <-timer.C:
		case <-resync.C:
			d.poll(false)
		case <-d.resyncNow:
			d.poll(true) // asked: a lost notification, or gained shards whose resync failed
		}
	}
}

// scheduleLocked queues the host's next wake-up at next (zero: nothing to
// wait for), unless an earlier one is queued.
func (d *Dispatcher) scheduleLocked(h *host, next, now time.Time) {
	if next.IsZero() || (h.wakeAt.After(now) && !next.Before(h.wakeAt)) {
		return
	}
	h.wakeAt = next
	heap.Push(&d.wakes, wake{at: next, host: h.name})
	if d.wakes[0].host == h.name {
		select {
		case d.kick <- struct{}{}:
		default:
		}
	}
}

type wake struct {
	at   time.Time
	host string
}

type wakeHeap []wake

func (w wakeHeap) Len() int           { return len(w) }
func (w wakeHeap) Less(i, j int) bool { return w[i].at.Before(w[j].at) }
func (w wakeHeap) Swap(i, j int)      { w[i], w[j] = w[j], w[i] }
func (w *wakeHeap) Push(x any)        { *w = append(*w, x.(wake)) }
func (w *wakeHeap) Pop() any {
	old := *w
	x := old[len(old)-1]
	*w = old[:len(old)-1]
	return x
}
