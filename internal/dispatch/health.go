package dispatch

import (
	"context"
	"time"

	"hookd/internal/send"
	"hookd/internal/store"
)

// healthWindow is how far back "recent" reaches for a subscription's
// success rate and configuration-error hint; healthRing bounds the memory.
const (
	healthWindow = time.Hour
	healthRing   = 200
	// likely_configuration_error needs this many recent failures, 95 % of
	// them one 4xx code: a rate over a minimum volume, never a lone answer.
	configErrorMinFailures = 5
	configErrorShare       = 0.95
)

type outcome struct {
	at     time.Time
	ok     bool
	status int
}

// subHealth keeps a subscription's recent attempt outcomes.
type subHealth struct {
	ring [healthRing]outcome
	n    int // outcomes recorded ever; ring holds the last healthRing
}

func (s *subHealth) add(now time.Time, out send.Outcome) {
	s.ring[s.n%healthRing] = outcome{at: now, ok: out.Class == send.Delivered, status: out.StatusCode}
	s.n++
}

// Health is what the dispatcher knows of a subscription right now.
type Health struct {
	Circuit string // closed, open or half_open: the breaker of its host
	// SuccessRate is the delivered share of attempts in the last hour; nil
	// when there were none.
	SuccessRate *float64
	// ConfigError is set when at least 95 % of recent failures are one 4xx
	// status: the endpoint answers, but rejects us (a signature check, auth).
	ConfigError bool
	ConfigCode  int
}

// Health reports a subscription's circuit and recent outcomes. Advisory:
// nothing here changes how deliveries are sent.
func (d *Dispatcher) Health(hostName, subID string) Health {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	hl := Health{Circuit: closed.String()}
	if d.board != nil && !d.ownsHost(hostName) {
		hl.Circuit = d.boardCircuit(hostName) // another node's to say
	} else if h := d.hosts[hostName]; h != nil {
		h.breaker.admits(now) // an expired open period reads as half-open
		hl.Circuit = h.breaker.state.String()
	}
	s := d.health[subID]
	if s == nil {
		return hl
	}
	var ok, total int
	failsBy := map[int]int{}
	fails := 0
	for i := 0; i < min(s.n, healthRing); i++ {
		o := s.ring[i]
		if now.Sub(o.at) > healthWindow {
			continue
		}
		total++
		if o.ok {
			ok++
			continue
		}
		fails++
		failsBy[o.status]++
	}
	if total > 0 {
		r := float64(ok) / float64(total)
		hl.SuccessRate = &r
	}
	for code, n := range failsBy {
		if code >= 400 && code < 500 && fails >= configErrorMinFailures && float64(n) >= configErrorShare*float64(fails) {
			hl.ConfigError, hl.ConfigCode = true, code
		}
	}
	return hl
}

// Stats counts what the dispatcher holds in memory right now.
type Stats struct {
	Hosts        int // destination hosts
	Lanes        int // (host, subscription) lanes
	Window       int // deliveries queued, not yet started
	Inflight     int // attempts in flight
	BreakersOpen int // hosts whose circuit is open or half-open
	RateLimited  int // hosts with a 429 rate cut in force
}

// Stats takes the lock once and counts; it reads admission state without
// moving it. Cost is linear in hosts and lanes held, which follow active
// destinations (idle ones are forgotten).
func (d *Dispatcher) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	s := Stats{Hosts: len(d.hosts)}
	for _, h := range d.hosts {
		s.Lanes += len(h.lanes)
		s.Inflight += h.inflight
		for _, l := range h.lanes {
			s.Window += l.queued()
		}
		if h.breaker.state != closed {
			s.BreakersOpen++
		}
		if h.aimd.limiting(now) {
			s.RateLimited++
		}
	}
	return s
}

// boardCircuit reads the breaker the owner of host published. Called with
// d.mu held, which it lets go of while it asks the store.
func (d *Dispatcher) boardCircuit(host string) string {
	d.mu.Unlock()
	defer d.mu.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, ok, err := d.board.CircuitGet(ctx, host)
	switch {
	case err != nil:
		d.cfg.Log.Warn("reading a host's published circuit", "host", host, "err", err)
		return closed.String()
	case !ok || !c.Open || c.Age > staleCircuit:
		return closed.String()
	case c.RetryIn > 0:
		return open.String()
	}
	return halfOpen.String()
}

const (
	// publishInterval is how often the breakers of owned hosts that
	// changed are published; open ones go again every republishOpen, and
	// a published open breaker older than staleCircuit is read as closed
	// (its host moved to a node that has it closed, or its owner died).
	publishInterval = time.Second
	republishOpen   = 10 * time.Second
	staleCircuit    = 3 * republishOpen
)

// published is what the board last got for an open breaker.
type published struct {
	retryAt, at time.Time
}

// publishCircuits publishes the breakers of owned hosts that changed since
// the last time: open ones, and those that closed or left memory since. A
// node whose leases may have lapsed publishes nothing: the host may be
// another node's by now.
func (d *Dispatcher) publishCircuits(ctx context.Context) {
	d.mu.Lock()
	now := time.Now()
	if !d.mayStart(now) {
		d.mu.Unlock()
		return
	}
	var changed []store.HostCircuit
	var retryAts []time.Time
	seen := map[string]bool{}
	for name, h := range d.hosts {
		if !d.owns(h) {
			continue
		}
		seen[name] = true
		isOpen := h.breaker.state != closed
		was, ok := d.published[name]
		if isOpen != ok || (ok && (!was.retryAt.Equal(h.breaker.retryAt) || now.Sub(was.at) > republishOpen)) {
			c := store.HostCircuit{Host: name, Open: isOpen}
			if isOpen {
				c.RetryIn = h.breaker.retryAt.Sub(now)
			}
			changed = append(changed, c)
			retryAts = append(retryAts, h.breaker.retryAt)
		}
	}
	for name := range d.published {
		switch {
		case !d.ownsHost(name):
			delete(d.published, name) // its new owner publishes it now
		case !seen[name]:
			changed = append(changed, store.HostCircuit{Host: name}) // forgotten while open: closed now
			retryAts = append(retryAts, time.Time{})
		}
	}
	d.mu.Unlock()
	if len(changed) == 0 {
		return
	}
	if err := d.board.CircuitsPublish(ctx, changed); err != nil {
		d.cfg.Log.Error("publishing circuits", "node", d.cfg.Node, "err", err)
		return
	}
	d.mu.Lock()
	if d.published == nil {
		d.published = map[string]published{}
	}
	for i, c := range changed {
		if c.Open {
			d.published[c.Host] = published{retryAt: retryAts[i], at: now}
		} else {
			delete(d.published, c.Host)
		}
	}
	d.mu.Unlock()
}
