package dispatch

import (
	"time"

	"hookd/internal/send"
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
	if h := d.hosts[hostName]; h != nil {
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
