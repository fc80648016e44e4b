// Package dispatch decides what is sent when. Each destination host has a
// queue; inside it each subscription has a lane holding a bounded window of
// due deliveries, refilled from the store in order of next_attempt_at.
// Admission (admission.go) decides when each may start: a per-host
// concurrency cap shared fairly among lanes, per-subscription rate limits, a
// circuit breaker, 429 back-off and a recovery ramp. Results go back to the
// store in batches. With several nodes on one store, a node dispatches only
// the hosts on shards it leases (leases.go). Time is read from the time
// package only, so tests run the real code under testing/synctest.
package dispatch

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"hookd/internal/core"
	"hookd/internal/metrics"
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
	// HostConcurrency caps in-flight attempts per destination host (default 10).
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
}

type Dispatcher struct {
	cfg     Config
	results *resultWriter

	mu         sync.Mutex
	moves      []move // lanes to look at after a subscription moved host (see movedFrom)
	freshBytes int64  // held in every lane's fresh queue, see jobSize
	hosts      map[string]*host
	health     map[string]*subHealth // by subscription ID
	wakes      wakeHeap
	stopping   bool
	expiring   bool          // an expireHeld pass is running
	kick       chan struct{} // the earliest wake-up changed
	resyncNow  chan struct{}

	// Shard ownership (leases.go). leaser is nil when the store is not a
	// Leaser: then every shard is owned and owned, heldUntil are unused.
	leaser    store.Leaser
	owned     [core.NumShards]bool
	heldUntil time.Time
	leaving   map[int]time.Time // shards given back, not yet handed over: since when
	handAfter time.Time         // after a failed hand-over, the next try
	// board (with a leaser, when the store is one) is where this node
	// publishes its hosts' breakers and reads others' (health.go).
	board     store.CircuitBoard
	published map[string]published // open breakers board last got, by host
	rebalance chan struct{}
	leaseQuit chan struct{}
	leaseDone chan struct{} // nil until the lease loop runs

	sendCtx    context.Context
	cancelSend context.CancelFunc
	work       sync.WaitGroup // in-flight attempts and refills
	loopDone   chan struct{}
	quit       chan struct{}
	idle       chan attemptArgs // attempt goroutines waiting for their next one
	disabling  map[string]bool  // subscriptions being disabled (disableAsync)
	disables   sync.WaitGroup
}

// host is one destination: what is polite to it is decided here.
type host struct {
	name       string
	shard      int
	lanes      map[string]*lane // by subscription ID
	inflight   int
	breaker    breaker
	aimd       aimd
	aimdBucket bucket
	ramp       ramp
	pauseUntil time.Time // a Retry-After asked for quiet until then
	wakeAt     time.Time // the wake-up queued for this host, if any
}

// lane is one subscription's work at its host.
type lane struct {
	subID string
	// fresh holds deliveries handed over at ingest; backlog holds due
	// deliveries fetched from the store, oldest first.
	fresh, backlog []*core.Job // pointers: a Job is ~450 bytes, copied per queue step
	inflight       int
	// backlogCredit grows by the backlog floor with every start while both
	// queues hold work; a whole credit buys the backlog a start.
	backlogCredit float64
	// known holds every delivery of the lane in memory, in flight, or
	// awaiting its result write, or reserved: a refill must not fetch it again.
	known map[string]bool
	// reserved are known deliveries this node's ingest is committing: its
	// hand-off (Notify) brings them, however late it comes.
	reserved map[string]bool
	// storeDue is when the store may next hold due work this lane does not
	// know of; zero means never (until a hand-off or resync says otherwise).
	storeDue  time.Time
	refilling bool
	// wokeAt is the last Wake (or resync). A result whose write began
	// before it may belong to a delivery replayed after that write, which
	// the wake's refill skipped as still held.
	wokeAt time.Time
	// recorded holds deliveries whose results were written while a refill
	// ran: its answer may predate them and show them still pending. (A
	// retry's next time is in storeDue, set when its result is written.)
	recorded map[string]bool
	bucket   bucket
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
		kick:      make(chan struct{}, 1),
		resyncNow: make(chan struct{}, 1),
		rebalance: make(chan struct{}, 1),
		leaseQuit: make(chan struct{}),
		loopDone:  make(chan struct{}),
		quit:      make(chan struct{}),
		idle:      make(chan attemptArgs),
		disabling: map[string]bool{},
	}
	if l, ok := cfg.Store.(store.Leaser); ok {
		d.leaser = l
		d.board, _ = cfg.Store.(store.CircuitBoard)
		if d.cfg.Node == "" {
			d.cfg.Node = DefaultNode()
		}
		if d.cfg.LeaseTTL <= 0 {
			d.cfg.LeaseTTL = DefaultLeaseTTL
		}
	}
	d.sendCtx, d.cancelSend = context.WithCancel(context.Background())
	d.results = newResultWriter(cfg.Store, cfg.FlushInterval, cfg.ResultBatch, cfg.Log, d.written)
	return d
}

// Start leases shards (with a Leaser), loads every subscription with
// pending work on them and begins dispatching.
func (d *Dispatcher) Start(ctx context.Context) error {
	if d.leaser != nil {
		if _, err := d.renew(ctx); err != nil {
			return fmt.Errorf("leasing shards: %w", err)
		}
	}
	if err := d.resync(ctx); err != nil {
		return err
	}
	go d.loop()
	if d.leaser != nil {
		d.leaseDone = make(chan struct{})
		go d.leaseLoop()
	}
	return nil
}

// Reserve is told of the deliveries this node's ingest is about to commit.
// Until Notify hands them over (or Release), no refill takes them: a refill
// that found one committed before a slow hand-off (68 ms under load) sent
// it and recorded it, and the hand-off then sent it again.
func (d *Dispatcher) Reserve(batch []store.EventInsert) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := range batch {
		for k := range batch[i].Deliveries {
			dl := &batch[i].Deliveries[k]
			if dl.State != core.DeliveryPending || !d.ownsHost(dl.Host) {
				continue
			}
			_, l := d.lane(dl.Host, dl.SubscriptionID)
			if l.known[dl.ID] {
				continue
			}
			if l.reserved == nil {
				l.reserved = map[string]bool{}
			}
			l.known[dl.ID], l.reserved[dl.ID] = true, true
		}
	}
}

// Release undoes Reserve for deliveries that will not be handed over: a
// repeated idempotency key wrote none, or a failed commit may yet have
// landed, so the store is asked.
func (d *Dispatcher) Release(batch []store.EventInsert) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	touched := map[*host]bool{}
	for i := range batch {
		for k := range batch[i].Deliveries {
			dl := &batch[i].Deliveries[k]
			h := d.hosts[dl.Host]
			if h == nil {
				continue
			}
			if l := h.lanes[dl.SubscriptionID]; l != nil && l.unreserve(dl.ID) {
				l.due(now)
				touched[h] = true
			}
		}
	}
	for h := range touched {
		d.pump(h, now)
	}
}

// unreserve forgets a reservation; it reports whether there was one.
func (l *lane) unreserve(id string) bool {
	if !l.reserved[id] {
		return false
	}
	delete(l.reserved, id)
	delete(l.known, id)
	return true
}

// Notify hands over deliveries just committed, so they go out without
// waiting for a poll. Those that do not fit a window stay in the store and
// are fetched when there is room. Those on shards another node holds are
// its to send: it hears of them from the store.
func (d *Dispatcher) Notify(jobs []core.Job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	touched := map[*host]bool{}
	for i := range jobs {
		j := &jobs[i]
		if !d.ownsHost(j.Delivery.Host) {
			continue
		}
		h, l := d.lane(j.Delivery.Host, j.Delivery.SubscriptionID)
		touched[h] = true
		if !l.unreserve(j.Delivery.ID) && l.known[j.Delivery.ID] {
			continue
		}
		// An ordered delivery may wait on a predecessor: the store decides
		// which ordering key's head is due.
		if size := jobSize(j); j.Delivery.Sequence == 0 && len(l.fresh) < d.freshCap(h, now) &&
			d.freshBytes+size <= d.cfg.FreshBytes {
			// A copy of its own: pointing into jobs would keep the whole
			// batch alive behind one slow lane, out of FreshBytes' sight.
			cp := *j
			l.fresh = append(l.fresh, &cp)
			l.known[j.Delivery.ID] = true
			d.freshBytes += size
		} else {
			l.due(now)
		}
	}
	for h := range touched {
		d.pump(h, now)
	}
}

// Wake tells the dispatcher that a subscription may have new due work in
// the store (a replay, a resumed subscription, another node's write). A
// host on another node's shard is left to that node.
func (d *Dispatcher) Wake(hostName, subID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ownsHost(hostName) {
		return
	}
	now := time.Now()
	h, l := d.lane(hostName, subID)
	l.due(now)
	l.wokeAt = now
	d.pump(h, now)
}

// Stop starts no new attempts, lets those in flight finish or time out
// (until ctx ends, then cancels them), and writes every result. Then it
// gives its shard leases back, so the other nodes take them at once.
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
		<-done
	}
	d.cancelSend()
	d.results.close()
	d.disables.Wait()
	// Renewals ran through the drain so no one else sent meanwhile; the
	// work is now written, so the shards can go.
	if d.leaseDone != nil {
		close(d.leaseQuit)
		<-d.leaseDone
		d.release()
	}
}

func (d *Dispatcher) lane(hostName, subID string) (*host, *lane) {
	h := d.hosts[hostName]
	if h == nil {
		h = &host{name: hostName, shard: core.ShardOf(hostName), lanes: map[string]*lane{}}
		d.hosts[hostName] = h
	}
	l := h.lanes[subID]
	if l == nil {
		l = &lane{subID: subID, known: map[string]bool{}}
		h.lanes[subID] = l
	}
	return h, l
}

// due records that the store may hold due work for the lane from t on.
func (l *lane) due(t time.Time) {
	if l.storeDue.IsZero() || t.Before(l.storeDue) {
		l.storeDue = t
	}
}

func (l *lane) queued() int { return len(l.fresh) + len(l.backlog) }

// freshCap is how many hand-offs a lane of h may hold. Beyond Window only
// while h is taking work: what waits out a breaker or a pause waits in the
// store, so that when h recovers the newest work is what sits in memory.
func (d *Dispatcher) freshCap(h *host, now time.Time) int {
	if h.breaker.state != closed || now.Before(h.pauseUntil) {
		return d.cfg.Window
	}
	return d.cfg.FreshWindow
}

// trimFresh forgets the oldest hand-offs above the lane's cap (the store
// still holds them pending; a refill brings them back in order).
func (d *Dispatcher) trimFresh(h *host, l *lane, now time.Time) {
	over := len(l.fresh) - d.freshCap(h, now)
	if over <= 0 {
		return
	}
	for i := range over {
		delete(l.known, l.fresh[i].Delivery.ID)
		d.freshBytes -= jobSize(l.fresh[i])
	}
	l.fresh = slices.Clone(l.fresh[over:])
	l.due(now)
}

// jobSize is what a held job costs in memory: its payload and about as
// much again as the rest of it.
func jobSize(j *core.Job) int64 { return int64(len(j.Event.Payload)) + 512 }

// pump starts what admission allows, refills lanes that run low, and
// queues the host's next wake-up. Called with d.mu held after anything
// that changes a host.
func (d *Dispatcher) pump(h *host, now time.Time) {
	if d.stopping {
		return
	}
	if !d.owns(h) {
		d.disown(h)
		return
	}
	for d.mayStart(now) && d.hostAdmits(h, now) {
		l, sub := d.pick(h, now)
		if l == nil {
			break
		}
		d.start(h, l, sub, now)
	}
	for _, l := range h.lanes {
		d.trimFresh(h, l, now)
		if len(l.backlog) <= d.cfg.Window/2 && !l.refilling && !l.storeDue.IsZero() && !l.storeDue.After(now) {
			// The refill consumes storeDue; anything due that appears while
			// it runs (a hand-off that overflowed) sets it again.
			l.storeDue = time.Time{}
			l.refilling = true
			d.work.Add(1)
			go d.refill(h, l, now)
		}
	}
	d.schedule(h, now)
	d.forgetIdle(h, now)
	for len(d.moves) > 0 {
		m := d.moves[0]
		d.moves = d.moves[1:]
		if d.ownsHost(m.host) {
			nh, nl := d.lane(m.host, m.subID)
			nl.due(now)
			d.pump(nh, now)
		}
	}
}

// hostAdmits is the host half of admission: breaker, Retry-After pause and
// the (ramped) concurrency cap.
func (d *Dispatcher) hostAdmits(h *host, now time.Time) bool {
	if now.Before(h.pauseUntil) || !h.breaker.admits(now) {
		return false
	}
	return h.inflight < d.hostCap(h, now)
}

func (d *Dispatcher) hostCap(h *host, now time.Time) int {
	f := h.ramp.factor(now, d.healthy(h, now))
	return max(1, int(math.Ceil(float64(d.cfg.HostConcurrency)*f)))
}

// healthy: the recent success rate holds, so a ramp may advance.
func (d *Dispatcher) healthy(h *host, now time.Time) bool {
	ok, fail := h.breaker.counts(now, 10*time.Second)
	return fail == 0 || float64(ok) >= rampHealthyRatio*float64(ok+fail)
}

// pick chooses the lane to send next: among lanes with work that their own
// cap and rate allow, the one with the fewest attempts in flight, so lanes
// share the host's cap fairly. Paused, disabled or deleted subscriptions'
// queued work is dropped from memory (it stays in the store as it should).
func (d *Dispatcher) pick(h *host, now time.Time) (*lane, *core.Subscription) {
	// Asked even with no cut in force, so the bucket owes nothing when one returns.
	if !h.aimdBucket.ready(now, h.aimd.current(now)) {
		return nil, nil
	}
	var best *lane
	var bestSub *core.Subscription
	for id, l := range h.lanes {
		if l.queued() == 0 || (best != nil && l.inflight >= best.inflight) {
			continue
		}
		sub, ok := d.cfg.Subs.Get(id)
		if ok && sub.Host != h.name {
			d.movedFrom(l, sub)
			continue
		}
		if !ok || sub.State != core.SubActive {
			d.drop(l)
			continue
		}
		if l.inflight >= d.laneCap(sub) || !l.bucket.ready(now, d.laneRate(h, sub, now)) {
			continue
		}
		best, bestSub = l, sub
	}
	return best, bestSub
}

func (d *Dispatcher) laneCap(sub *core.Subscription) int {
	if sub.MaxConcurrency > 0 {
		return min(sub.MaxConcurrency, d.cfg.HostConcurrency)
	}
	return d.cfg.HostConcurrency
}

// laneRate is the subscription's rate_limit, scaled by the host's ramp.
func (d *Dispatcher) laneRate(h *host, sub *core.Subscription, now time.Time) float64 {
	if sub.RateLimit <= 0 {
		return 0
	}
	return sub.RateLimit * h.ramp.factor(now, d.healthy(h, now))
}

// movedFrom retires a lane whose subscription moved to another host. The
// store moved its pending deliveries there, where admission must count
// them: what this lane holds would go out a second time, and a refill here
// would fetch them again and again. The new host's lane is told to look.
func (d *Dispatcher) movedFrom(l *lane, sub *core.Subscription) {
	d.drop(l)
	l.storeDue, l.recorded = time.Time{}, nil
	d.moves = append(d.moves, move{host: sub.Host, subID: sub.ID})
}

type move struct{ host, subID string }

// drop forgets a lane's queued work; the store still holds it pending.
func (d *Dispatcher) drop(l *lane) {
	for _, q := range [][]*core.Job{l.fresh, l.backlog} {
		for _, j := range q {
			delete(l.known, j.Delivery.ID)
		}
	}
	for i := range l.fresh {
		d.freshBytes -= jobSize(l.fresh[i])
	}
	l.fresh, l.backlog = nil, nil
}

// start takes the lane's next job, honouring the backlog floor: while both
// new and old work wait, one start in five goes to the oldest, the rest to
// the newest (so the backlog always drains and new work is not starved);
// when one queue is empty the other takes every start.
func (d *Dispatcher) start(h *host, l *lane, sub *core.Subscription, now time.Time) {
	var j *core.Job
	fromBacklog := len(l.fresh) == 0
	if len(l.fresh) > 0 && len(l.backlog) > 0 {
		l.backlogCredit += backlogFloor
		if l.backlogCredit >= 1 {
			l.backlogCredit--
			fromBacklog = true
		}
	}
	// The slot is cleared so the queue's array does not keep the job alive.
	if fromBacklog {
		j, l.backlog[0], l.backlog = l.backlog[0], nil, l.backlog[1:]
	} else {
		j, l.fresh[0], l.fresh = l.fresh[0], nil, l.fresh[1:]
		d.freshBytes -= jobSize(j)
	}
	l.bucket.take(now)
	h.aimdBucket.take(now)
	probe := h.breaker.started()
	h.inflight++
	l.inflight++
	d.work.Add(1)
	a := attemptArgs{h, l, sub, j, probe}
	select {
	case d.idle <- a:
	default:
		go d.attempts(a)
	}
}

type attemptArgs struct {
	h     *host
	l     *lane
	sub   *core.Subscription
	j     *core.Job
	probe bool
}

// idleAttempter is how long a finished attempt's goroutine waits for the
// next one before it exits.
const idleAttempter = 10 * time.Second

// attempts runs a, then whatever start hands it while it waits. Fresh
// goroutines cost more than the attempt's own logic: each grew its stack
// through the HTTP client, copying it three or four times (5% of hookd's
// CPU at fanout 10). Concurrency stays unbounded: with none idle, start
// starts another, so a hanging endpoint never holds up anyone's attempt.
func (d *Dispatcher) attempts(a attemptArgs) {
	t := time.NewTimer(idleAttempter)
	defer t.Stop()
	for {
		d.attempt(a.h, a.l, a.sub, a.j, a.probe)
		t.Reset(idleAttempter)
		select {
		case a = <-d.idle:
		case <-t.C:
			return
		case <-d.quit:
			return
		}
	}
}

// schedule queues the host's next wake-up: the earliest moment something
// could become possible without another event (a lane's store work falls
// due, a breaker lets a probe through, a pause ends, a token arrives).
func (d *Dispatcher) schedule(h *host, now time.Time) {
	var next time.Time
	earliest := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for id, l := range h.lanes {
		earliest(l.storeDue)
		if l.queued() == 0 {
			earliest(l.bucket.quietAt()) // then forgetIdle may let an idle rate-limited lane go
		}
		if l.queued() > 0 {
			if sub, ok := d.cfg.Subs.Get(id); ok && l.inflight < d.laneCap(sub) {
				earliest(l.bucket.nextToken(now))
			}
		}
	}
	if h.breaker.state == open {
		earliest(h.breaker.retryAt)
	}
	earliest(h.pauseUntil)
	if h.aimd.rate > 0 {
		earliest(h.aimdBucket.nextToken(now))
	}
	if next.IsZero() || (h.wakeAt.After(now) && !next.Before(h.wakeAt)) {
		return // nothing to wait for, or an earlier wake-up is queued
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

// forgetIdle drops lanes and hosts with nothing in memory, nothing
// scheduled and nothing to remember, so memory follows active destinations.
func (d *Dispatcher) forgetIdle(h *host, now time.Time) {
	for id, l := range h.lanes {
		// A lane that sent within the rate window keeps its bucket: a fresh
		// one would let the next send exceed the subscription's rate.
		if l.queued() == 0 && l.inflight == 0 && len(l.known) == 0 && !l.refilling && l.storeDue.IsZero() && !l.bucket.recent(now) {
			delete(h.lanes, id)
		}
	}
	if len(h.lanes) == 0 && h.inflight == 0 && h.breaker.state == closed && h.aimd.rate == 0 && h.ramp.level == 0 {
		delete(d.hosts, h.name)
	}
}

func (d *Dispatcher) refill(h *host, l *lane, now time.Time) {
	defer d.work.Done()
	d.mu.Lock()
	exclude := make([]string, 0, len(l.known))
	for id := range l.known {
		exclude = append(exclude, id)
	}
	limit := d.cfg.Window - len(l.backlog)
	d.mu.Unlock()

	ctx, cancel := context.WithTimeout(d.sendCtx, 30*time.Second)
	jobs, next, err := d.cfg.Store.DeliveryDue(ctx, store.DeliveryDueParams{
		SubscriptionID: l.subID, Now: now, Limit: limit, Exclude: exclude,
	})
	cancel()

	d.mu.Lock()
	defer d.mu.Unlock()
	l.refilling = false
	recorded := l.recorded
	l.recorded = nil
	if err != nil {
		if !d.stopping {
			d.cfg.Log.Error("refilling a lane", "subscription", l.subID, "err", err)
		}
		l.due(time.Now().Add(time.Second))
		d.pump(h, time.Now())
		return
	}
	if sub, ok := d.cfg.Subs.Get(l.subID); ok && sub.Host != h.name {
		d.movedFrom(l, sub)
		d.pump(h, time.Now())
		return
	}
	for _, j := range jobs {
		if !l.known[j.Delivery.ID] && !recorded[j.Delivery.ID] {
			l.known[j.Delivery.ID] = true
			l.backlog = append(l.backlog, &j) // a copy: one job in flight keeps only itself
		}
	}
	due := next
	if len(jobs) >= limit {
		due = now // more may be due right now
	}
	if !due.IsZero() {
		l.due(due)
	}
	d.pump(h, time.Now())
}

// attempt sends one delivery and turns the outcome into its next state.
func (d *Dispatcher) attempt(h *host, l *lane, sub *core.Subscription, j *core.Job, probe bool) {
	defer d.work.Done()
	out := d.cfg.Sender.Send(d.sendCtx, sub, j, time.Now())
	r := nextState(sub, &j.Delivery, out)
	r.host = h.name
	if j.Delivery.RoundStart == 0 {
		r.eventAt = j.Event.CreatedAt // a replay's lag would measure the operator, not us
	}
	d.cfg.Metrics.Attempt(r.outcome(), out.Duration)

	d.mu.Lock()
	// A retry's time reaches the lane when its result is written (written):
	// until then the store still has the delivery at its old time, and a
	// refill at the retry time would find nothing and ask again at once.
	d.observe(h, sub.ID, out, probe, time.Now())
	if !d.results.tryAdd(r) {
		// The store is behind: keep this attempt's slot until the writer
		// takes its result, so the host's cap also bounds the results
		// waiting in memory. Freeing it first started an attempt (and a
		// goroutine) per finished one, each then waiting here: 36,000
		// goroutines and 540 MB when ingest kept the writer busy.
		d.mu.Unlock()
		d.results.add(r)
		d.mu.Lock()
	}
	h.inflight--
	l.inflight--
	d.pump(h, time.Now())
	d.mu.Unlock()
}

// observe feeds one outcome to the host's admission state and the
// subscription's health.
func (d *Dispatcher) observe(h *host, subID string, out send.Outcome, probe bool, now time.Time) {
	// A failure, for the breaker, is the endpoint not coping: timeouts,
	// connection errors, 5xx. A 4xx is an answer; a 429 is handled by rate.
	failed := out.Class == send.Retry && out.StatusCode != 429
	if h.breaker.record(now, failed, probe) {
		h.ramp.start(now)
	}
	if out.StatusCode == 429 {
		ok, fail := h.breaker.counts(now, observedRateWindow)
		h.aimd.cut(now, float64(ok+fail)/observedRateWindow.Seconds())
	}
	if out.RetryAfter > 0 && (out.StatusCode == 429 || out.StatusCode == 503) {
		if t := now.Add(out.RetryAfter); t.After(h.pauseUntil) {
			h.pauseUntil = t
		}
	}
	hs := d.health[subID]
	if hs == nil {
		hs = &subHealth{}
		d.health[subID] = hs
	}
	hs.add(now, out)
}

// nextState applies the retry policy to one attempt's outcome.
func nextState(sub *core.Subscription, dl *core.Delivery, out send.Outcome) result {
	n := dl.AttemptCount + 1
	r := result{subID: sub.ID, ordered: dl.Sequence > 0}
	r.Attempt = core.Attempt{
		DeliveryID: dl.ID, N: n, StartedAt: out.StartedAt, Duration: out.Duration,
		StatusCode: out.StatusCode, Error: out.Err, Response: out.Response,
	}
	r.Now = out.StartedAt.Add(out.Duration)
	switch out.Class {
	case send.Delivered:
		r.State = core.DeliveryDelivered
	case send.Gone:
		r.State = core.DeliveryFailed
		r.disable = "endpoint answered 410 Gone"
	case send.Retry:
		schedule := sub.Schedule()
		try := n - dl.RoundStart // tries in this round, the first included
		if try > len(schedule) {
			r.State = core.DeliveryFailed
			break
		}
		wait := core.Jitter(schedule[try-1])
		// Retry-After is the endpoint saying "not before": honour it, capped.
		wait = max(wait, min(out.RetryAfter, core.MaxRetryAfter))
		r.State = core.DeliveryPending
		r.NextAttemptAt = r.Now.Add(wait)
	default:
		r.State = core.DeliveryFailed
	}
	return r
}

// written runs after a batch of results is durable: those deliveries are
// now the store's to report again.
func (d *Dispatcher) written(batch []result, began time.Time) {
	if m := d.cfg.Metrics; m != nil {
		for i := range batch {
			r := &batch[i]
			switch r.State {
			case core.DeliveryDelivered:
				// Lag first: whoever sees the delivery counted sees its lag.
				if !r.eventAt.IsZero() {
					m.Lag(r.Now.Sub(r.eventAt))
				}
				m.Delivered()
			case core.DeliveryFailed:
				m.Failed()
			}
		}
	}
	var disable []result
	d.mu.Lock()
	now := time.Now()
	touched := map[*host]bool{}
	for _, r := range batch {
		if r.disable != "" {
			disable = append(disable, r)
		}
		h := d.hosts[r.host]
		if h == nil {
			continue
		}
		l := h.lanes[r.subID]
		if l == nil {
			continue
		}
		delete(l.known, r.Attempt.DeliveryID)
		if r.State == core.DeliveryPending {
			l.due(r.NextAttemptAt) // pending again, now at its retry time
		} else if !l.wokeAt.Before(began) {
			l.due(now)
		}
		if l.refilling {
			if l.recorded == nil {
				l.recorded = map[string]bool{}
			}
			l.recorded[r.Attempt.DeliveryID] = true
		}
		if r.ordered && r.State != core.DeliveryPending {
			l.due(now) // the next of its ordering key may go now
		}
		touched[h] = true
	}
	for h := range touched {
		d.pump(h, now)
	}
	d.mu.Unlock()
	for _, r := range disable {
		d.disableAsync(r.subID, r.disable)
	}
}

// disableAsync runs disable off the result writer, once per subscription
// at a time: the store skips the whole backlog before it returns (minutes
// for a large one), and while the writer waits, every host's attempts wait
// on it (attempt).
func (d *Dispatcher) disableAsync(subID, reason string) {
	d.mu.Lock()
	if d.disabling[subID] {
		d.mu.Unlock()
		return
	}
	d.disabling[subID] = true
	d.mu.Unlock()
	d.disables.Add(1)
	go func() {
		defer d.disables.Done()
		d.disable(subID, reason)
		d.mu.Lock()
		delete(d.disabling, subID)
		d.mu.Unlock()
	}()
}

// disable turns a subscription off after its endpoint said 410: the store
// skips its pending deliveries, and the registry stops treating it as active.
func (d *Dispatcher) disable(subID, reason string) {
	cur, ok := d.cfg.Subs.Get(subID)
	if !ok || cur.State == core.SubDisabled {
		return
	}
	s := *cur
	s.State = core.SubDisabled
	s.DisabledReason = reason
	s.UpdatedAt = time.Now().UTC()
	// The registry first: once the store says disabled, ingest must already
	// write new deliveries skipped (the store's update skips only those
	// pending at its commit). Undone if the store refuses.
	d.cfg.Subs.Put(s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.cfg.Store.SubscriptionUpdate(ctx, s); err != nil {
		if now, ok := d.cfg.Subs.Get(subID); ok && now.UpdatedAt.Equal(s.UpdatedAt) {
			back := *cur
			back.UpdatedAt = s.UpdatedAt // Put keeps the newest; this is the undo of s
			d.cfg.Subs.Put(back)
		}
		d.cfg.Log.Error("disabling subscription", "subscription", subID, "err", err)
		return
	}
	d.cfg.Log.Warn("subscription disabled", "subscription", subID, "reason", reason)
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
				d.pump(h, now)
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
			d.poll()
		case <-d.resyncNow:
			d.poll()
		}
	}
}

// poll is the loop's periodic safety net: resync, then fail what waited
// out its retry window behind an open breaker.
func (d *Dispatcher) poll() {
	ctx, cancel := context.WithTimeout(d.sendCtx, 30*time.Second)
	if err := d.resync(ctx); err != nil {
		d.cfg.Log.Error("resync with store", "err", err)
	}
	cancel()
	d.expireHeld()
}

// Resync asks for a resync now rather than at the next tick: notifications
// may have been missed (a LISTEN reconnected).
func (d *Dispatcher) Resync() {
	select {
	case d.resyncNow <- struct{}{}:
	default:
	}
}

// resync asks the store for every subscription with pending work on the
// shards this node holds, so nothing pending is forgotten whatever the
// hand-offs missed.
func (d *Dispatcher) resync(ctx context.Context) error {
	var shards []int // nil: all
	if d.leaser != nil {
		if shards = d.Shards(); len(shards) == 0 {
			return nil
		}
	}
	return d.resyncShards(ctx, shards)
}

func (d *Dispatcher) resyncShards(ctx context.Context, shards []int) error {
	due, err := d.cfg.Store.DeliveryPendingSubscriptions(ctx, shards)
	if err != nil {
		return err
	}
	var strays []string
	d.mu.Lock()
	now := time.Now()
	touched := map[*host]bool{}
	for _, sd := range due {
		if !d.ownsHost(sd.Host) {
			// Pending on a shard of ours, yet the subscription's host is
			// another node's: written under a host it has since left, by a
			// node that had not heard (or our lease was lost meanwhile).
			strays = append(strays, sd.SubscriptionID)
			continue
		}
		h, l := d.lane(sd.Host, sd.SubscriptionID)
		l.due(sd.NextAttemptAt)
		l.wokeAt = now // as a Wake: it may stand in for a lost one
		touched[h] = true
	}
	for h := range touched {
		d.pump(h, now)
	}
	d.mu.Unlock()
	// Move them to the current host; the store tells its owner. Left where
	// they are, neither node would send them.
	for _, id := range strays {
		n, err := d.cfg.Store.DeliveryRehost(ctx, id)
		if err != nil {
			// The next resync tries again; the rest of this one stands.
			d.cfg.Log.Error("moving deliveries written under a host their subscription left", "subscription", id, "err", err)
			continue
		}
		if n > 0 {
			d.cfg.Log.Info("moved deliveries written under a host their subscription left", "subscription", id, "n", n)
		}
	}
	return nil
}

// expireReason is the last_error of a delivery failed without an attempt.
const expireReason = "retry window spent while the endpoint was unavailable (circuit open)"

// expireHeld fails deliveries whose retry window ran out while their host's
// breaker held them: held deliveries burn no attempts, so without this they
// would wait forever instead of being failed (and kept for replay) after a day.
func (d *Dispatcher) expireHeld() {
	type lane struct {
		host, sub string
		cutoff    time.Time
	}
	var held []lane
	d.mu.Lock()
	if d.expiring || d.stopping {
		d.mu.Unlock()
		return
	}
	now := time.Now()
	for _, h := range d.hosts {
		if h.breaker.state == closed || !d.owns(h) {
			continue
		}
		for id := range h.lanes {
			if sub, ok := d.cfg.Subs.Get(id); ok {
				held = append(held, lane{h.name, id, now.Add(-retryWindow(sub))})
			}
		}
	}
	if len(held) == 0 {
		d.mu.Unlock()
		return
	}
	d.expiring = true
	d.work.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.work.Done()
		for _, hl := range held {
			ctx, cancel := context.WithTimeout(d.sendCtx, time.Minute)
			n, err := d.cfg.Store.DeliveryExpire(ctx, hl.sub, hl.cutoff, time.Now().UTC(), expireReason)
			cancel()
			d.cfg.Metrics.Expired(n)
			if err != nil {
				d.cfg.Log.Error("expiring held deliveries", "subscription", hl.sub, "err", err)
			}
			if n > 0 {
				d.mu.Lock()
				if h := d.hosts[hl.host]; h != nil {
					if l := h.lanes[hl.sub]; l != nil {
						d.drop(l) // what memory held may have just failed
						l.due(time.Now())
					}
				}
				d.mu.Unlock()
			}
		}
		d.mu.Lock()
		d.expiring = false
		d.mu.Unlock()
	}()
}

// retryWindow is how long a round of retries may last: the schedule plus
// its largest jitter.
func retryWindow(sub *core.Subscription) time.Duration {
	var total time.Duration
	for _, s := range sub.Schedule() {
		total += s
	}
	return total * 6 / 5
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
