package dispatch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"time"

	"hookd/internal/core"
)

// Shard ownership. With a store.Leaser (PostgreSQL, several nodes) this node
// dispatches only hosts whose shard it holds a lease on, so each host's
// admission state lives on one node. Without one (SQLite) it owns every
// shard for ever, and none of this runs.

// DefaultLeaseTTL is how long a shard lease lasts unrenewed.
const DefaultLeaseTTL = 15 * time.Second

// DefaultNode names this process to the other nodes: the hostname and a
// random suffix, so two processes on one machine (or a restart) never share
// a name.
func DefaultNode() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "hookd"
	}
	var b [4]byte
	rand.Read(b[:])
	return h + "-" + hex.EncodeToString(b[:])
}

// Node is the name this dispatcher leases shards under.
func (d *Dispatcher) Node() string { return d.cfg.Node }

// Shards lists the shards this node holds, ascending (all of them without
// a Leaser).
func (d *Dispatcher) Shards() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ownedList()
}

func (d *Dispatcher) ownedList() []int {
	var out []int
	for s := range core.NumShards {
		if d.leaser == nil || d.owned[s] {
			out = append(out, s)
		}
	}
	return out
}

// OwnsShard reports whether this node holds shard.
func (d *Dispatcher) OwnsShard(shard int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leaser == nil || (shard >= 0 && shard < core.NumShards && d.owned[shard])
}

// Rebalance asks for a lease renewal now rather than at the next tick:
// another node joined, gave shards back or left.
func (d *Dispatcher) Rebalance() {
	select {
	case d.rebalance <- struct{}{}:
	default:
	}
}

// ownsHostLocked: the host's shard is held.
func (d *Dispatcher) ownsHostLocked(name string) bool {
	return d.leaser == nil || d.owned[core.ShardOf(name)]
}

// ownsLocked: h is the host in memory for its name and its shard is held; a host
// let go of (disown) is no longer in d.hosts.
func (d *Dispatcher) ownsLocked(h *host) bool {
	return d.leaser == nil || (d.owned[h.shard] && d.hosts[h.name] == h)
}

// mayStartLocked: the leases are not within a third of their TTL of lapsing. A
// node whose renewals fail stops starting sends before another node can
// take its shards, so two nodes never send to one host at once.
func (d *Dispatcher) mayStartLocked(now time.Time) bool {
	return d.leaser == nil || now.Before(d.heldUntil.Add(-d.cfg.LeaseTTL/3))
}

// disownLocked lets go of a host whose shard this node no longer holds: queued
// work is dropped (the store keeps it pending for the new owner); attempts
// in flight finish and their results are written. The host and its
// admission state go once nothing of it is in flight, being fetched or
// awaiting its result write (busyLocked).
func (d *Dispatcher) disownLocked(h *host) {
	for _, l := range h.lanes {
		d.dropLocked(l)
		for id := range l.reserved { // their hand-off will find the host not ours
			l.unreserve(id)
		}
		l.storeDue = time.Time{}
	}
	if !d.busyLocked(h) && d.hosts[h.name] == h {
		delete(d.hosts, h.name)
	}
}

// renew renews this node's leases and applies the answer: lost shards'
// hosts are let go of, and if sends had stopped for want of a renewal they
// start again. It returns the shards gained.
func (d *Dispatcher) renew(ctx context.Context) ([]int, error) {
	now := time.Now()
	shards, leaving, err := d.leaser.ShardLeases(ctx, d.cfg.Node, d.cfg.LeaseTTL, now)
	if err != nil {
		return nil, err
	}
	var next [core.NumShards]bool
	for _, s := range shards {
		if s >= 0 && s < core.NumShards {
			next[s] = true
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var gained []int
	lost := 0
	for s := range core.NumShards {
		switch {
		case next[s] && !d.owned[s]:
			gained = append(gained, s)
		case !next[s] && d.owned[s]:
			lost++
		}
	}
	// What the store says this node is leaving is what it must hand over,
	// whether or not it knew (a restart under the same name, a lost reply).
	was := d.leaving
	d.leaving = make(map[int]time.Time, len(leaving))
	for _, s := range leaving {
		if since, ok := was[s]; ok {
			d.leaving[s] = since
		} else {
			d.leaving[s] = now
		}
	}
	at := time.Now()
	wasBlocked := !d.mayStartLocked(at)
	d.owned, d.heldUntil = next, now.Add(d.cfg.LeaseTTL)
	for _, h := range d.hosts {
		switch {
		case !d.owned[h.shard]:
			d.disownLocked(h)
		case wasBlocked:
			d.pumpLocked(h, at)
		}
	}
	if len(gained) > 0 || lost > 0 {
		d.cfg.Log.Info("shard leases changed", "node", d.cfg.Node, "held", len(shards), "gained", len(gained), "lost", lost)
	}
	return gained, nil
}

// maxDrain bounds how long a shard given back waits for its attempts in
// flight: the longest send timeout, and time to write the results.
const maxDrain = core.MaxTimeout + 15*time.Second

// drainCheck is how often shards given back are checked for hand-over.
const drainCheck = 50 * time.Millisecond

// handOver hands over the shards given back that have nothing left in
// flight or unrecorded (or waited maxDrain): until then no other node may
// take them, so nothing this node sent is sent again by the taker.
func (d *Dispatcher) handOver(ctx context.Context) {
	d.mu.Lock()
	now := time.Now()
	if now.Before(d.handAfter) {
		d.mu.Unlock()
		return
	}
	busy := map[int]bool{}
	for _, h := range d.hosts {
		if _, ok := d.leaving[h.shard]; ok && d.busyLocked(h) {
			busy[h.shard] = true
		}
	}
	var ready []int
	for s, since := range d.leaving {
		if !busy[s] || now.Sub(since) > maxDrain {
			ready = append(ready, s)
		}
	}
	d.mu.Unlock()
	if len(ready) == 0 {
		return
	}
	slices.Sort(ready)
	began := time.Now()
	if err := d.leaser.ShardHandOver(ctx, d.cfg.Node, ready); err != nil {
		d.report("handing shards over; will retry", began, err, "node", d.cfg.Node)
		d.mu.Lock()
		d.handAfter = time.Now().Add(time.Second) // not every 50 ms while the database is away
		d.mu.Unlock()
		return
	}
	d.mu.Lock()
	for _, s := range ready {
		delete(d.leaving, s)
	}
	d.mu.Unlock()
}

// drainTimer fires after drainCheck while shards wait to be handed over.
func (d *Dispatcher) drainTimer() <-chan time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.leaving) == 0 {
		return nil
	}
	return time.After(drainCheck)
}

// busyLocked: something of h is in flight, being fetched or awaiting its result
// write.
func (d *Dispatcher) busyLocked(h *host) bool {
	if h.inflight > 0 {
		return true
	}
	for _, l := range h.lanes {
		if l.refilling || len(l.known) > 0 {
			return true
		}
	}
	return false
}

// leaseLoop renews every LeaseTTL/3 (sooner after a failure, or when asked
// to rebalance), resyncs the shards it gains at once and hands over those
// it gave back once drained, until Stop.
func (d *Dispatcher) leaseLoop() {
	defer close(d.leaseDone)
	every := d.cfg.LeaseTTL / 3
	t := time.NewTimer(every)
	defer t.Stop()
	var drain <-chan time.Time // armed while shards wait to be handed over
	var publish <-chan time.Time
	if d.board != nil {
		pt := time.NewTicker(publishInterval)
		defer pt.Stop()
		publish = pt.C
	}
	for {
		select {
		case <-d.leaseQuit:
			return
		case <-publish:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			d.publishCircuits(ctx)
			cancel()
			continue
		case <-drain:
			ctx, cancel := context.WithTimeout(context.Background(), every)
			d.handOver(ctx)
			cancel()
			drain = d.drainTimer()
			continue
		case <-t.C:
		case <-d.rebalance:
		}
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), every)
		gained, err := d.renew(ctx)
		wait := every
		if err != nil {
			d.mu.Lock()
			stopAt := d.heldUntil.Add(-d.cfg.LeaseTTL / 3)
			d.mu.Unlock()
			d.report("renewing shard leases", began, err, "node", d.cfg.Node, "sends_stop_at", stopAt)
			wait = min(every, time.Second)
		} else {
			if len(gained) > 0 {
				began = time.Now()
				if err := d.resyncShards(ctx, gained, true); err != nil {
					// This renewal's budget is spent: the loop's own resync,
					// with a longer one, takes them now rather than at its tick.
					d.report("resync of gained shards; resyncing all", began, err)
					d.Resync()
				}
			}
			d.handOver(ctx)
		}
		cancel()
		drain = d.drainTimer()
		t.Reset(wait)
	}
}

// release gives every shard back for the other nodes to take at once.
func (d *Dispatcher) release() {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.leaser.ShardRelease(ctx, d.cfg.Node); err != nil {
		d.report("releasing shard leases", began, err, "node", d.cfg.Node)
	}
}
