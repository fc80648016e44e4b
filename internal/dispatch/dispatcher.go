// Package dispatch decides what is sent when. Deliveries wait in per-host
// queues that hold a bounded window of due work, refilled from the store in
// order of next_attempt_at; admission (for now the per-host concurrency cap)
// decides when each may start; results go back to the store in batches.
package dispatch

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"hookd/internal/core"
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
	// Window caps the due deliveries held in memory per host (default 64).
	Window int
	// FlushInterval bounds how long a result waits to be written (default 20ms).
	FlushInterval time.Duration
	// Resync is how often the store is asked for every host with pending work,
	// a safety net behind the hand-off and the per-host wake-ups (default 30s).
	Resync time.Duration
}

type Dispatcher struct {
	cfg     Config
	results *resultWriter

	mu       sync.Mutex
	hosts    map[string]*hostQueue
	wakes    wakeHeap
	stopping bool
	kick     chan struct{} // the earliest wake-up changed

	sendCtx    context.Context
	cancelSend context.CancelFunc
	sends      sync.WaitGroup // in-flight attempts and refills
	loopDone   chan struct{}
	quit       chan struct{}
}

// hostQueue is one destination host's share of the dispatcher.
type hostQueue struct {
	name     string
	window   []core.Job // due now, oldest first
	inflight int
	// known holds every delivery of this host that is in the window, in
	// flight, or awaiting its result write: a refill must not fetch it again.
	known map[string]bool
	// retries are known deliveries whose retry time is not yet in the store.
	retries map[string]time.Time
	// storeDue is when the store may next hold due work this queue does not
	// know of; zero means never (until a hand-off or resync says otherwise).
	storeDue  time.Time
	wakeAt    time.Time // the wake-up scheduled for storeDue, if any
	refilling bool
}

func New(cfg Config) *Dispatcher {
	if cfg.HostConcurrency <= 0 {
		cfg.HostConcurrency = core.DefaultHostConcurrency
	}
	if cfg.Window <= 0 {
		cfg.Window = 64
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
		cfg:      cfg,
		hosts:    map[string]*hostQueue{},
		kick:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
		quit:     make(chan struct{}),
	}
	d.sendCtx, d.cancelSend = context.WithCancel(context.Background())
	d.results = newResultWriter(cfg.Store, cfg.FlushInterval, cfg.Log, d.written)
	return d
}

// Start loads every host with pending work and begins dispatching.
func (d *Dispatcher) Start(ctx context.Context) error {
	if err := d.resync(ctx); err != nil {
		return err
	}
	go d.loop()
	return nil
}

// Notify hands over deliveries just committed, so they go out without
// waiting for a poll. Those that do not fit a window stay in the store and
// are fetched when there is room.
func (d *Dispatcher) Notify(jobs []core.Job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	touched := map[*hostQueue]bool{}
	for _, j := range jobs {
		h := d.host(j.Delivery.Host)
		touched[h] = true
		if h.known[j.Delivery.ID] {
			continue
		}
		// Straight into the window only when nothing older is due in the
		// store, so the queue keeps next_attempt_at order.
		if len(h.window) < d.cfg.Window && !h.refilling && (h.storeDue.IsZero() || h.storeDue.After(now)) {
			h.window = append(h.window, j)
			h.known[j.Delivery.ID] = true
		} else {
			// Older work may be waiting in the store: keep the order, fetch it.
			d.setStoreDue(h, now)
		}
	}
	for h := range touched {
		d.pump(h, now)
	}
}

// Wake tells the dispatcher that host may have new due work in the store
// (a replay, a resumed subscription).
func (d *Dispatcher) Wake(host string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	h := d.host(host)
	d.setStoreDue(h, now)
	d.pump(h, now)
}

// Stop starts no new attempts, lets those in flight finish or time out
// (until ctx ends, then cancels them), and writes every result.
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
	go func() { d.sends.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.cancelSend()
		<-done
	}
	d.cancelSend()
	d.results.close()
}

func (d *Dispatcher) host(name string) *hostQueue {
	h := d.hosts[name]
	if h == nil {
		h = &hostQueue{name: name, known: map[string]bool{}, retries: map[string]time.Time{}}
		d.hosts[name] = h
	}
	return h
}

// pump starts what admission allows and refills the window when it runs
// low. Called with d.mu held after anything that changes a host's queue.
func (d *Dispatcher) pump(h *hostQueue, now time.Time) {
	if d.stopping {
		return
	}
	for len(h.window) > 0 && d.admit(h) {
		j := h.window[0]
		h.window = h.window[1:]
		sub, ok := d.cfg.Subs.Get(j.Delivery.SubscriptionID)
		if !ok || sub.State != core.SubActive {
			// Paused: it stays pending in the store and comes back on resume.
			// Disabled or deleted: the store has skipped it.
			delete(h.known, j.Delivery.ID)
			continue
		}
		h.inflight++
		d.sends.Add(1)
		go d.attempt(h, sub, j)
	}
	if len(h.window) <= d.cfg.Window/2 && !h.refilling && !h.storeDue.IsZero() && !h.storeDue.After(now) {
		h.refilling = true
		d.sends.Add(1)
		go d.refill(h, now)
	}
	d.forgetIfIdle(h)
}

// admit is the admission seam: whether h may start another attempt now.
// Today it is the per-host concurrency cap.
func (d *Dispatcher) admit(h *hostQueue) bool {
	return h.inflight < d.cfg.HostConcurrency
}

// forgetIfIdle drops a host with nothing in memory and nothing scheduled,
// so memory follows active hosts, not every host ever seen.
func (d *Dispatcher) forgetIfIdle(h *hostQueue) {
	if len(h.window) == 0 && h.inflight == 0 && len(h.known) == 0 && !h.refilling && h.storeDue.IsZero() {
		delete(d.hosts, h.name)
	}
}

// setStoreDue records that the store may hold due work for h at t and
// schedules a wake-up for it.
func (d *Dispatcher) setStoreDue(h *hostQueue, t time.Time) {
	if h.storeDue.IsZero() || t.Before(h.storeDue) {
		h.storeDue = t
	}
	d.schedule(h)
}

// schedule makes sure a wake-up is queued at or before h.storeDue.
func (d *Dispatcher) schedule(h *hostQueue) {
	if h.storeDue.IsZero() {
		return
	}
	if h.wakeAt.IsZero() || h.storeDue.Before(h.wakeAt) {
		h.wakeAt = h.storeDue
		heap.Push(&d.wakes, wake{at: h.wakeAt, host: h.name})
		if d.wakes[0].host == h.name {
			select {
			case d.kick <- struct{}{}:
			default:
			}
		}
	}
}

func (d *Dispatcher) refill(h *hostQueue, now time.Time) {
	defer d.sends.Done()
	d.mu.Lock()
	exclude := make([]string, 0, len(h.known))
	for id := range h.known {
		exclude = append(exclude, id)
	}
	// Retry times not yet written: the store cannot report them yet.
	var pendingRetry time.Time
	for _, t := range h.retries {
		if pendingRetry.IsZero() || t.Before(pendingRetry) {
			pendingRetry = t
		}
	}
	limit := d.cfg.Window - len(h.window)
	d.mu.Unlock()

	ctx, cancel := context.WithTimeout(d.sendCtx, 30*time.Second)
	jobs, next, err := d.cfg.Store.DeliveryDue(ctx, store.DeliveryDueParams{
		Host: h.name, Now: now, Limit: limit, Exclude: exclude,
	})
	cancel()

	d.mu.Lock()
	defer d.mu.Unlock()
	h.refilling = false
	if err != nil {
		if !d.stopping {
			d.cfg.Log.Error("refilling host queue", "host", h.name, "err", err)
		}
		h.storeDue = time.Time{}
		d.setStoreDue(h, time.Now().Add(time.Second))
		return
	}
	for _, j := range jobs {
		if !h.known[j.Delivery.ID] {
			h.known[j.Delivery.ID] = true
			h.window = append(h.window, j)
		}
	}
	due := next
	if len(jobs) >= limit {
		due = now // more may be due right now
	}
	if !pendingRetry.IsZero() && (due.IsZero() || pendingRetry.Before(due)) {
		due = pendingRetry
	}
	h.storeDue = time.Time{}
	if !due.IsZero() {
		d.setStoreDue(h, due)
	}
	d.pump(h, time.Now())
}

// attempt sends one delivery and turns the outcome into its next state.
func (d *Dispatcher) attempt(h *hostQueue, sub *core.Subscription, j core.Job) {
	defer d.sends.Done()
	start := time.Now()
	out := d.cfg.Sender.Send(d.sendCtx, sub, &j, start)
	r := nextState(sub, &j.Delivery, out)
	r.host = h.name
	if r.State == core.DeliveryPending {
		d.mu.Lock()
		h.retries[j.Delivery.ID] = r.NextAttemptAt
		d.mu.Unlock()
	}
	d.results.add(r)

	d.mu.Lock()
	defer d.mu.Unlock()
	h.inflight--
	if r.State == core.DeliveryPending {
		d.setStoreDue(h, r.NextAttemptAt)
	}
	d.pump(h, time.Now())
}

// nextState applies the retry policy to one attempt's outcome.
func nextState(sub *core.Subscription, dl *core.Delivery, out send.Outcome) result {
	n := dl.AttemptCount + 1
	r := result{subID: sub.ID}
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
func (d *Dispatcher) written(batch []result) {
	var disable []result
	d.mu.Lock()
	for _, r := range batch {
		if r.disable != "" {
			disable = append(disable, r)
		}
		h := d.hosts[r.host]
		if h == nil {
			continue
		}
		delete(h.known, r.Attempt.DeliveryID)
		delete(h.retries, r.Attempt.DeliveryID)
		d.pump(h, time.Now())
	}
	d.mu.Unlock()
	for _, r := range disable {
		d.disable(r.subID, r.disable)
	}
}

// disable turns a subscription off after its endpoint said 410: the store
// skips its pending deliveries, and the registry stops matching it as active.
func (d *Dispatcher) disable(subID, reason string) {
	cur, ok := d.cfg.Subs.Get(subID)
	if !ok || cur.State == core.SubDisabled {
		return
	}
	s := *cur
	s.State = core.SubDisabled
	s.DisabledReason = reason
	s.UpdatedAt = time.Now().UTC()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.cfg.Store.SubscriptionUpdate(ctx, s); err != nil {
		d.cfg.Log.Error("disabling subscription", "subscription", subID, "err", err)
		return
	}
	d.cfg.Subs.Put(s)
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
				if h.storeDue.After(now) {
					d.schedule(h) // storeDue moved later than this wake-up
				}
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
			ctx, cancel := context.WithTimeout(d.sendCtx, 30*time.Second)
			if err := d.resync(ctx); err != nil {
				d.cfg.Log.Error("resync with store", "err", err)
			}
			cancel()
		}
	}
}

// resync asks the store for every host with pending work, so nothing
// pending is forgotten whatever the hand-offs missed.
func (d *Dispatcher) resync(ctx context.Context) error {
	due, err := d.cfg.Store.DeliveryPendingHosts(ctx, nil)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, hd := range due {
		d.setStoreDue(d.host(hd.Host), hd.NextAttemptAt)
	}
	return nil
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
