package dispatch

import (
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// Intake: how work reaches the lanes without waiting for a poll. Ingest
// reserves a batch's deliveries before its commit and hands them over
// after it; anything else that makes work due in the store wakes the lane.

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
			if dl.State != core.DeliveryPending || !d.ownsHostLocked(dl.Host) {
				continue
			}
			_, l := d.laneLocked(dl.Host, dl.SubscriptionID)
			if l.known[dl.ID] {
				continue
			}
			if l.reserved == nil {
				l.reserved = map[string]uint64{}
			}
			l.known[dl.ID], l.reserved[dl.ID] = true, l.epoch
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
			if l := h.lanes[dl.SubscriptionID]; l != nil {
				if was, _ := l.unreserve(dl.ID); !was {
					continue
				}
				l.due(now)
				touched[h] = true
			}
		}
	}
	for h := range touched {
		d.pumpLocked(h, now)
	}
}

// unreserve forgets a reservation; it reports whether there was one.
func (l *lane) unreserve(id string) (was, stale bool) {
	epoch, ok := l.reserved[id]
	if !ok {
		return false, false
	}
	delete(l.reserved, id)
	delete(l.known, id)
	return true, epoch != l.epoch
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
		if !d.ownsHostLocked(j.Delivery.Host) {
			continue
		}
		h, l := d.laneLocked(j.Delivery.Host, j.Delivery.SubscriptionID)
		touched[h] = true
		was, stale := l.unreserve(j.Delivery.ID)
		if stale {
			// Its lane was dropped since the reservation: the store says
			// whether it is still to be sent.
			l.due(now)
			continue
		}
		if !was && l.known[j.Delivery.ID] {
			continue
		}
		// An ordered delivery may wait on a predecessor: the store decides
		// which ordering key's head is due.
		if size := jobSize(j); j.Delivery.Sequence == 0 && len(l.fresh) < d.freshCap(h, l, now) &&
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
		d.pumpLocked(h, now)
	}
}

// Wake tells the dispatcher that a subscription may have new due work in
// the store (a replay, a resumed subscription, another node's write). A
// host on another node's shard is left to that node.
func (d *Dispatcher) Wake(hostName, subID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ownsHostLocked(hostName) {
		return
	}
	sub, ok := d.cfg.Subs.Get(subID)
	if !ok || sub.State != core.SubActive {
		// Disabled (its pending deliveries written skipped), paused or
		// deleted: what its lane holds, if it has one, must not go out
		// should the subscription be active again before it is next picked.
		if h := d.hosts[hostName]; h != nil && h.lanes[subID] != nil {
			d.dropLocked(h.lanes[subID])
		}
		return
	}
	now := time.Now()
	h, l := d.laneLocked(hostName, subID)
	l.learn(sub) // a new URL's lane shows none of the old one's circuit at once
	l.ungone(sub)
	l.due(now)
	l.wokeAt = now
	d.pumpLocked(h, now)
}

// Reloaded is told, after a reload of the registry, which subscriptions
// another node changed or removed. What their lanes queued goes, and so
// does what a refill or a hand-off still brings (see lane.epoch): a
// subscription no longer active must send none of it (its pending
// deliveries were written skipped, or it is paused), and one active again
// may have been disabled and re-enabled in between, its skipped
// deliveries still in the queue. An active one refills from the store,
// which holds only what is still pending. Any other lane whose
// subscription is not active drops its queue, as Wake does.
func (d *Dispatcher) Reloaded(changed map[string]bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	var woken []*host
	for _, h := range d.hosts {
		wake := false
		for id, l := range h.lanes {
			if !changed[id] && l.queued() == 0 {
				continue
			}
			sub, ok := d.cfg.Subs.Get(id)
			active := ok && sub.State == core.SubActive
			if active && !changed[id] {
				continue
			}
			d.dropLocked(l)
			if active {
				l.ungone(sub)
				l.due(now)
				l.wokeAt = now
				wake = true
			}
		}
		if wake {
			woken = append(woken, h)
		}
	}
	for _, h := range woken {
		d.pumpLocked(h, now)
	}
}
