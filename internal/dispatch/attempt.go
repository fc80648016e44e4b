package dispatch

import (
	"context"
	"time"

	"hookd/internal/core"
	"hookd/internal/send"
)

// Starting and finishing attempts: pumpLocked starts what admission allows,
// attempt sends and judges, written hands the store's verdict back to the
// lanes.

// pumpLocked starts what admission allows on h, refills its lanes that run
// low and queues its next wake-up; then the same for the new hosts of
// subscriptions found to have moved. Called after anything changes h.
func (d *Dispatcher) pumpLocked(h *host, now time.Time) {
	d.stepLocked(h, now)
	for len(d.moves) > 0 {
		m := d.moves[0]
		d.moves = d.moves[1:]
		if d.ownsHostLocked(m.host) {
			nh, nl := d.laneLocked(m.host, m.subID)
			nl.due(now)
			d.stepLocked(nh, now)
		}
	}
}

func (d *Dispatcher) stepLocked(h *host, now time.Time) {
	if d.stopping {
		return
	}
	if !d.ownsLocked(h) {
		d.disownLocked(h)
		return
	}
	hostCap := d.capOf(h, now)
	share := h.share(hostCap, now) // starting changes no lane's activity: work was queued
	if d.mayStartLocked(now) {
		for h.admits(hostCap, now) {
			l, sub := d.pickLocked(h, hostCap, share, now)
			if l == nil {
				break
			}
			d.startLocked(h, l, sub, now)
		}
	}
	for _, l := range h.lanes {
		d.trimFreshLocked(h, l, now)
		l.caughtUp(now)
		if at := d.refillAt(l); len(l.backlog) <= d.cfg.Window/2 && !l.refilling && !at.IsZero() && !at.After(now) {
			// The refill consumes storeDue; anything due that appears while
			// it runs (a hand-off that overflowed) sets it again.
			l.storeDue = time.Time{}
			l.refilling = true
			d.work.Add(1)
			go d.refill(h, l, now)
		}
	}
	d.scheduleLocked(h, d.nextWake(h, hostCap, share, now), now)
	d.forgetIdleLocked(h, now)
}

// startLocked takes the lane's next job, honouring the backlog floor:
// while both new and old work wait, one start in five goes to the oldest,
// the rest to the newest (so the backlog always drains and new work is not
// starved); when one queue is empty the other takes every start.
func (d *Dispatcher) startLocked(h *host, l *lane, sub *core.Subscription, now time.Time) {
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
	l.aimdBucket.take(now)
	l.lastStart = now
	a := attemptArgs{h: h, l: l, sub: sub, j: j, hostProbe: h.breaker.started(), laneProbe: l.breaker.started()}
	h.inflight++
	l.account(now)
	l.inflight++
	if d.sent[l.subID] == nil {
		d.sent[l.subID] = map[string]*lane{}
	}
	d.sent[l.subID][j.Delivery.ID] = l
	d.work.Add(1)
	select {
	case d.idle <- a:
	default:
		go d.attempts(a)
	}
}

type attemptArgs struct {
	h                    *host
	l                    *lane
	sub                  *core.Subscription
	j                    *core.Job
	hostProbe, laneProbe bool // the one attempt a half-open circuit let through
}

// idleAttempter is how long a finished attempt's goroutine waits for the
// next one before it exits.
const idleAttempter = 10 * time.Second

// attempts runs a, then whatever startLocked hands it while it waits. Fresh
// goroutines cost more than the attempt's own logic: each grew its stack
// through the HTTP client, copying it three or four times (5% of hookd's
// CPU at fanout 10). Concurrency stays unbounded: with none idle, start
// starts another, so a hanging endpoint never holds up anyone's attempt.
func (d *Dispatcher) attempts(a attemptArgs) {
	t := time.NewTimer(idleAttempter)
	defer t.Stop()
	for {
		d.attempt(a)
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

// attempt sends one delivery and turns the outcome into its next state.
func (d *Dispatcher) attempt(a attemptArgs) {
	defer d.work.Done()
	out := d.cfg.Sender.Send(d.sendCtx, a.sub, a.j, time.Now())
	r := nextState(a.sub, &a.j.Delivery, out)
	r.host = a.h.name
	if a.j.Delivery.RoundStart == 0 {
		r.eventAt = a.j.Event.CreatedAt // a replay's lag would measure the operator, not us
	}
	d.cfg.Metrics.Attempt(r.outcome(), out.Duration)

	d.mu.Lock()
	// A retry's time reaches the lane when its result is written (written):
	// until then the store still has the delivery at its old time, and a
	// refill at the retry time would find nothing and ask again at once.
	d.observeLocked(a, out, time.Now())
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
	now := time.Now()
	a.h.inflight--
	a.l.account(now)
	a.h.heldFor(a.l, out.Duration)
	a.l.inflight--
	d.pumpLocked(a.h, now)
	d.mu.Unlock()
}

// observeLocked feeds one outcome to admission: the host judges its
// connections (and whether most of its endpoints fail at once), the
// endpoint everything else; then 429 back-off, Retry-After, and the
// subscription's health.
func (d *Dispatcher) observeLocked(a attemptArgs, out send.Outcome, now time.Time) {
	h, l := a.h, a.l
	// A failure is the endpoint not coping: timeouts, connection errors,
	// 5xx. A 4xx is an answer; a 429 is handled by the rate.
	failed := out.Class == send.Retry && out.StatusCode != 429

	h.outcomes.add(now, failed, out.Conn)
	switch {
	case a.hostProbe:
		// Opened on connections, any answer shows the host is back (its
		// endpoints' own circuits judge the rest); opened because most
		// endpoints failed, the probe must succeed.
		ok := !failed
		if h.cause == byConnections {
			ok = !out.Conn && out.StatusCode != 0
		}
		wasFailing := l.failing(now) // before this outcome is added below
		if h.breaker.probed(now, ok) {
			h.outcomes = window{} // a fresh start: old failures do not reopen it
			h.ramp.start(now)
			h.catchUp()
			d.keepHostRampAsync(h, now)
			if h.cause == byEndpoints {
				h.settleEndpoints(l, wasFailing, now)
			}
		}
	case h.breaker.state != closed:
	case out.Conn && h.outcomes.tripping(now, connections):
		h.noteRates(now)
		h.breaker.trip(now)
		h.cause = byConnections
		d.hostFailingLocked(h, out, now)
	case failed && h.mostEndpointsFailing(now):
		h.noteRates(now)
		h.breaker.trip(now)
		h.cause = byEndpoints
		d.hostFailingLocked(h, out, now)
	}

	if a.sub.URL != l.url {
		return // sent to the URL the subscription left: it says nothing of the new one
	}
	// A failed connection says nothing of the endpoint behind it.
	if out.Conn {
		if a.laneProbe {
			l.breaker.abandon()
		}
	} else {
		l.outcomes.add(now, failed, false)
		switch {
		case a.laneProbe:
			if l.breaker.probed(now, !failed) {
				l.outcomes = window{}
				l.ramp.start(now)
				l.catchUp()
				d.keepRampAsync(keptRamp{subID: l.subID, at: now, base: max(l.before, rampMinBase)})
			}
		case l.breaker.state == closed && failed && l.outcomes.tripping(now, failures):
			l.noteRate(now)
			l.breaker.trip(now)
			d.failingLocked(l.subID, "endpoint_circuit_open", out.StatusCode, out.Err, now)
		}
	}

	if out.Class == send.Gone {
		// Its subscription is being disabled (once the result is written):
		// what the lane holds must not go meanwhile. goneHold bounds the
		// wait should the disable fail; the next 410 tries again.
		l.goneAt = now
	}
	if out.StatusCode == 429 || out.StatusCode == 503 && out.RetryAfter > 0 {
		// Told to slow down (a 503 with Retry-After is an overload or a
		// maintenance window): without the cut, the whole queue went at
		// once when a 503's pause ended.
		t := l.outcomes.sum(now, observedRateWindow)
		l.aimd.cut(now, float64(t.n)/observedRateWindow.Seconds())
	}
	if out.Class == send.Delivered {
		l.best.success(now)
		if out.StartedAt.After(l.servedAt) {
			l.servedAt = out.StartedAt
		}
	}
	if out.RetryAfter > 0 && (out.StatusCode == 429 || out.StatusCode == 503) {
		h.pause(l, now.Add(out.RetryAfter), now)
		l.aimd.holdUntil(l.pauseUntil)
	}
	hs := d.health[l.subID]
	if hs == nil {
		hs = &subHealth{}
		d.health[l.subID] = hs
	}
	hs.add(now, out)
}

// goneReason is why a subscription whose endpoint answered 410 is disabled.
const goneReason = "endpoint answered 410 Gone"

// nextState applies the retry policy to one attempt's outcome.
func nextState(sub *core.Subscription, dl *core.Delivery, out send.Outcome) result {
	n := dl.AttemptCount + 1
	r := result{ordered: dl.Sequence > 0}
	r.SubscriptionID = sub.ID
	r.Attempt = core.Attempt{
		DeliveryID: dl.ID, N: n, StartedAt: out.StartedAt, Duration: out.Duration,
		StatusCode: out.StatusCode, Error: out.Err, Response: out.Response, ResponseHeaders: out.ResponseHeaders,
	}
	r.Now = out.StartedAt.Add(out.Duration)
	switch out.Class {
	case send.Delivered:
		r.State = core.DeliveryDelivered
	case send.Gone:
		r.State = core.DeliveryFailed
		r.disable = goneReason
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
		d.settledLocked(r)
		h := d.hosts[r.host]
		if h == nil {
			continue
		}
		l := h.lanes[r.SubscriptionID]
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
		if r.State == core.DeliveryFailed {
			d.failingLocked(r.SubscriptionID, "delivery_failed", r.Attempt.StatusCode, r.Attempt.Error, r.Attempt.StartedAt)
		}
		touched[h] = true
	}
	for h := range touched {
		d.pumpLocked(h, now)
	}
	d.mu.Unlock()
	for _, r := range disable {
		d.disableAsync(r.SubscriptionID, r.disable)
	}
}

// settledLocked forgets a recorded delivery among those sent. (A retry of
// one whose subscription moved host meanwhile reaches the new host's lane
// through the old one: its refill at the retry time finds the move.)
func (d *Dispatcher) settledLocked(r result) {
	id := r.Attempt.DeliveryID
	if _, ok := d.sent[r.SubscriptionID][id]; !ok {
		return
	}
	delete(d.sent[r.SubscriptionID], id)
	if len(d.sent[r.SubscriptionID]) == 0 {
		delete(d.sent, r.SubscriptionID)
	}
}

// disableAsync runs disable off the result writer, once per subscription
// at a time: the store skips the whole backlog before it returns (minutes
// for a large one), and while the writer waits, every host's attempts wait
// on it (attempt).
func (d *Dispatcher) disableAsync(subID, reason string) {
	d.mu.Lock()
	// A 410 whose result was written after the disable landed needs none.
	if sub, ok := d.cfg.Subs.Get(subID); d.disabling[subID] || ok && sub.State == core.SubDisabled {
		d.mu.Unlock()
		return
	}
	d.disabling[subID] = true
	d.mu.Unlock()
	d.async.Add(1)
	go func() {
		defer d.async.Done()
		d.disable(subID, reason)
		d.mu.Lock()
		delete(d.disabling, subID)
		d.mu.Unlock()
	}()
}

// keptRamp is a ramp's start and base, for its subscription.
type keptRamp struct {
	subID string
	at    time.Time
	base  float64
}

// keepRampAsync writes a ramp's start and base with its subscription, for a
// node that takes the shard over (or this one, restarted) to go on with
// it: in memory alone, a new owner sent a recovering endpoint's backlog at
// 1,000-3,800 a second where its ramp had it at 1-3. A failed write costs
// only that.
func (d *Dispatcher) keepRampAsync(ramps ...keptRamp) {
	d.async.Add(1)
	go func() {
		defer d.async.Done()
		for _, r := range ramps {
			began := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := d.cfg.Store.SubscriptionRampSet(ctx, r.subID, r.at, r.base)
			cancel()
			if err != nil {
				d.report("keeping a recovery ramp", began, err, "subscription", r.subID)
			}
		}
	}()
}

// keepHostRampAsync keeps the ramp of a host whose circuit closed as a ramp
// of each of its endpoints, which is what a node taking the host over (or
// this one, restarted) takes up: the host's own was in memory only, and a
// restart into it sent an outside run's whole backlog of 10,303 in 3 s.
// Their ramps admit what the host's does, a share of each one's rate
// before and of its share of the cap.
func (d *Dispatcher) keepHostRampAsync(h *host, now time.Time) {
	ramps := make([]keptRamp, 0, len(h.lanes))
	for id, l := range h.lanes {
		ramps = append(ramps, keptRamp{subID: id, at: now, base: max(l.before, rampMinBase)})
	}
	if len(ramps) > 0 {
		d.keepRampAsync(ramps...)
	}
}

// goOnRamp takes up a ramp another node (or this one before a restart)
// began for l, if l has no history here and the ramp may still run: it
// goes on from where it is, with the base it had, then the catch-up.
func (l *lane) goOnRamp(at time.Time, base float64, now time.Time) {
	if at.IsZero() || l.ramp.level != 0 || l.catchingUp || now.Sub(at) >= rampDuration*rampSlow {
		return
	}
	if _, ok := l.outcomes.last(); ok {
		return // it has attempts here: this node's own admission knows it
	}
	l.ramp.start(at)
	l.before = base
	l.catchUp()
}

// disable turns a subscription off after its endpoint said 410, through
// the subscription service: the store skips its pending deliveries, then
// the registry stops treating it as active.
func (d *Dispatcher) disable(subID, reason string) {
	if d.cfg.Disable == nil {
		return
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.cfg.Disable(ctx, subID, reason); err != nil {
		d.report("disabling subscription", began, err, "subscription", subID)
		return
	}
	d.cfg.Log.Warn("subscription disabled", "subscription", subID, "reason", reason)
}

// failureQueue bounds the failure reports waiting for Config.Failing; a
// report that does not fit is dropped and made again at the next sign.
const failureQueue = 1024

// failingLocked reports that a subscription fails, at most once an hour on
// this node (the store's alert state bounds it across nodes).
func (d *Dispatcher) failingLocked(subID, reason string, status int, errText string, now time.Time) {
	if d.cfg.Failing == nil || d.failuresClosed {
		return
	}
	hs := d.health[subID]
	if hs == nil {
		hs = &subHealth{}
		d.health[subID] = hs
	}
	if !hs.reportedAt.IsZero() && now.Sub(hs.reportedAt) < failureReportEvery {
		return
	}
	select {
	case d.failures <- Failure{SubscriptionID: subID, Reason: reason, Status: status, Error: errText, At: now}:
		hs.reportedAt = now
	default:
	}
}

// failureReportEvery is how often one subscription's failing is reported.
const failureReportEvery = time.Hour

// hostFailingLocked reports every endpoint with work on a host whose own
// circuit just opened: their owners' deliveries wait on it.
func (d *Dispatcher) hostFailingLocked(h *host, out send.Outcome, now time.Time) {
	for id, l := range h.lanes {
		if l.queued() > 0 || l.inflight > 0 {
			d.failingLocked(id, "host_circuit_open", out.StatusCode, out.Err, now)
		}
	}
}

// reportFailures hands the queued reports to Config.Failing, one at a time.
func (d *Dispatcher) reportFailures() {
	defer close(d.failuresDone)
	for f := range d.failures {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		d.cfg.Failing(ctx, f)
		cancel()
	}
}
