package dispatch

import (
	"context"
	"net/http"
	"slices"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// Reconciling memory with the store: lanes refill their windows from it,
// a periodic resync finds whatever the hand-offs missed, deliveries written
// under a host their subscription left are moved, and deliveries held past
// their retry window are failed.

func (d *Dispatcher) refill(h *host, l *lane, now time.Time) {
	defer d.work.Done()
	d.mu.Lock()
	exclude := make([]string, 0, len(l.known))
	for id := range l.known {
		exclude = append(exclude, id)
	}
	// Sent from the lane of the host it left, not yet recorded: it is
	// pending in the store, and fetching it here would send it twice.
	for id, from := range d.sent[l.subID] {
		if from != l && from.known[id] {
			exclude = append(exclude, id)
		}
	}
	limit := d.cfg.Window - len(l.backlog)
	epoch := l.epoch
	d.mu.Unlock()

	began := time.Now()
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
		if !d.stopping && d.report("refilling a lane", began, err, "subscription", l.subID) {
			d.holdRefillsLocked(time.Now())
		}
		l.due(time.Now().Add(time.Second))
		d.pumpLocked(h, time.Now())
		return
	}
	d.refillHold = 0
	if sub, ok := d.cfg.Subs.Get(l.subID); ok && sub.Host != h.name {
		d.movedFromLocked(l, sub)
		d.pumpLocked(h, time.Now())
		return
	}
	if l.epoch != epoch {
		// The lane was dropped while this read ran, which may predate the
		// write that made it drop (another node's disable): read again.
		l.due(time.Now())
		d.pumpLocked(h, time.Now())
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
	d.pumpLocked(h, time.Now())
}

// maxRefillHold bounds how long refills wait on a store that was down:
// how late due work may go out after it is back.
const maxRefillHold = 5 * time.Second

// holdRefillsLocked holds every lane's refills back after one found the
// store down (see refillsAfter). Refills that began before the hold and
// fail after it do not lengthen it: the hold doubles once per round.
func (d *Dispatcher) holdRefillsLocked(now time.Time) {
	if now.Before(d.refillsAfter) {
		return
	}
	d.refillHold = min(max(2*d.refillHold, time.Second), maxRefillHold)
	d.refillsAfter = now.Add(d.refillHold)
}

// refillAt is when a lane's refill may start: when the store may hold due
// work for it, or once the hold on refills lifts.
func (d *Dispatcher) refillAt(l *lane) time.Time {
	if l.storeDue.IsZero() || l.storeDue.After(d.refillsAfter) {
		return l.storeDue
	}
	return d.refillsAfter
}

// poll is the loop's periodic safety net: resync (taking up published
// circuits if takeUp), fail what waited out its retry window behind an
// open circuit, and forget stale health.
func (d *Dispatcher) poll(takeUp bool) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(d.sendCtx, 30*time.Second)
	if err := d.resync(ctx, takeUp); err != nil {
		d.report("resync with store", began, err)
	}
	cancel()
	d.expireHeld()
	d.forgetHealth()
}

// forgetHealth drops the outcome rings of subscriptions with no attempt
// within healthWindow: they have no recent success rate to tell.
func (d *Dispatcher) forgetHealth() {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for id, hs := range d.health {
		if now.Sub(hs.latest()) > healthWindow {
			delete(d.health, id)
		}
	}
}

// resync asks the store for every subscription with pending work on the
// shards this node holds, so nothing pending is forgotten whatever the
// hand-offs missed. With takeUp (at start, for shards gained) it also
// takes up what was published for the hosts and endpoints it has no
// history of (lastPublished): the periodic resync has nothing to take up,
// and would read the board every time for lanes still waiting on a retry.
func (d *Dispatcher) resync(ctx context.Context, takeUp bool) error {
	var shards []int // nil: all
	if d.leaser != nil {
		if shards = d.Shards(); len(shards) == 0 {
			return nil
		}
	}
	return d.resyncShards(ctx, shards, takeUp)
}

func (d *Dispatcher) resyncShards(ctx context.Context, shards []int, takeUp bool) error {
	due, err := d.cfg.Store.DeliveryPendingSubscriptions(ctx, shards)
	if err != nil {
		return err
	}
	var last map[string]store.Circuit
	if takeUp {
		last = d.lastPublished(ctx, due)
	}
	var strays, gone []string
	d.mu.Lock()
	now := time.Now()
	touched := map[*host]bool{}
	for _, sd := range due {
		if !d.ownsHostLocked(sd.Host) {
			// Pending on a shard of ours, yet the subscription's host is
			// another node's: written under a host it has since left, by a
			// node that had not heard (or our lease was lost meanwhile).
			strays = append(strays, sd.SubscriptionID)
			continue
		}
		h, l := d.laneLocked(sd.Host, sd.SubscriptionID)
		if c, ok := last[sd.Host]; ok {
			h.takeUp(c, now)
		}
		if c, ok := last[sd.SubscriptionID]; ok {
			l.takeUp(c, now)
		}
		l.goOnRamp(sd.RampAt, sd.RampBase, now)
		if d.goneBeforeLocked(l, sd.SubscriptionID, sd.GoneAt, now) {
			gone = append(gone, sd.SubscriptionID)
		}
		l.due(sd.NextAttemptAt)
		l.wokeAt = now // as a Wake: it may stand in for a lost one
		touched[h] = true
	}
	for h := range touched {
		d.pumpLocked(h, now)
	}
	d.mu.Unlock()
	for _, id := range gone {
		d.disableAsync(id, goneReason)
	}
	// Move them to the current host; the store tells its owner. Left where
	// they are, neither node would send them.
	for _, id := range strays {
		began := time.Now()
		n, err := d.cfg.Store.DeliveryRehost(ctx, id)
		if err != nil {
			// The next resync tries again; the rest of this one stands.
			d.report("moving deliveries written under a host their subscription left", began, err, "subscription", id)
			continue
		}
		if n > 0 {
			d.cfg.Log.Info("moved deliveries written under a host their subscription left", "subscription", id, "n", n)
		}
	}
	return nil
}

// lastPublished reads the circuits and pauses last published (by this
// node before a restart, or by the node that sent to them before) for the
// hosts and endpoints of due this node has no history of, by key. Held in
// memory alone, a restart or a shard's move sent every endpoint whose
// circuit was open 20 attempts again before it opened, and one told to
// wait by Retry-After its whole queue. None if the store keeps no board,
// or it cannot be read (then they start closed, as before).
func (d *Dispatcher) lastPublished(ctx context.Context, due []store.SubscriptionDue) map[string]store.Circuit {
	if d.board == nil || len(due) == 0 {
		return nil
	}
	var keys []string
	seen := map[string]bool{}
	d.mu.Lock()
	for _, sd := range due {
		h := d.hosts[sd.Host]
		if !seen[sd.Host] && (h == nil || h.untried()) {
			keys = append(keys, sd.Host)
		}
		seen[sd.Host] = true
		if h == nil || h.lanes[sd.SubscriptionID] == nil || h.lanes[sd.SubscriptionID].untried() {
			keys = append(keys, sd.SubscriptionID)
		}
	}
	d.mu.Unlock()
	if len(keys) == 0 {
		return nil
	}
	began := time.Now()
	cs, err := d.board.CircuitsGet(ctx, keys)
	if err != nil {
		d.report("reading the circuits last published", began, err)
		return nil
	}
	out := make(map[string]store.Circuit, len(cs))
	for _, c := range cs {
		out[c.Key] = c
	}
	return out
}

// goneBeforeLocked holds l, and says its subscription is to be disabled,
// if its endpoint answered 410 (at goneAt) with nothing delivered since and
// the subscription still stands as it was then: the disable that follows
// the result did not land (its node died between the two writes). Sent,
// its backlog went to the endpoint up to the host's cap first.
func (d *Dispatcher) goneBeforeLocked(l *lane, subID string, goneAt, now time.Time) bool {
	if goneAt.IsZero() {
		return false
	}
	sub, ok := d.cfg.Subs.Get(subID)
	if !ok || sub.State != core.SubActive || !sub.UpdatedAt.Before(goneAt) {
		return false // changed since: re-enabled, or its disable landed
	}
	if slices.Contains(sub.RetryStatusCodes, http.StatusGone) {
		return false // a 410 it asked to have retried: a failure, not a goodbye
	}
	l.goneAt = maxTime(l.goneAt, now)
	return true
}

// expireReason is the last_error of a delivery failed without an attempt.
const expireReason = "retry window spent while the endpoint was unavailable (circuit open)"

// expireHeld fails deliveries whose retry window ran out while a circuit
// (the endpoint's or its host's) held them: held deliveries burn no
// attempts, so without this they would wait forever instead of being
// failed (and kept for replay) after a day. A window is spent only once
// a probe after its end failed: a schedule shorter than the circuit's 30 s
// (["5s","5s","5s"]) had every held delivery of a 2 s outage failed
// untried before the probe, which would have found the endpoint back.
func (d *Dispatcher) expireHeld() {
	type held struct {
		host, sub string
		cutoff    time.Time
	}
	var lanes []held
	d.mu.Lock()
	if d.expiring || d.stopping {
		d.mu.Unlock()
		return
	}
	for _, h := range d.hosts {
		if !d.ownsLocked(h) {
			continue
		}
		for id, l := range h.lanes {
			var failed time.Time // the last failed probe of a circuit that holds l
			if h.breaker.state != closed {
				failed = h.breaker.probeFailed
			}
			if l.breaker.state != closed {
				failed = maxTime(failed, l.breaker.probeFailed)
			}
			if failed.IsZero() {
				continue
			}
			// A paused subscription's backlog is held by its owner's
			// choice, not by the circuit: it waits, however long.
			if sub, ok := d.cfg.Subs.Get(id); ok && sub.State == core.SubActive {
				lanes = append(lanes, held{h.name, id, failed.Add(-retryWindow(sub))})
			}
		}
	}
	if len(lanes) == 0 {
		d.mu.Unlock()
		return
	}
	d.expiring = true
	d.work.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.work.Done()
		for _, hl := range lanes {
			began := time.Now()
			ctx, cancel := context.WithTimeout(d.sendCtx, time.Minute)
			n, err := d.cfg.Store.DeliveryExpire(ctx, hl.sub, hl.cutoff, time.Now().UTC(), expireReason)
			cancel()
			d.cfg.Metrics.Expired(n)
			if err != nil {
				d.report("expiring held deliveries", began, err, "subscription", hl.sub)
			}
			if n > 0 {
				d.mu.Lock()
				if h := d.hosts[hl.host]; h != nil {
					if l := h.lanes[hl.sub]; l != nil {
						d.dropLocked(l) // what memory held may have just failed
						l.due(time.Now())
						d.pumpLocked(h, time.Now())
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
