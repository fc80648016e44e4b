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
	// minutes counts every outcome of the last hour by minute (slot: unix
	// minute mod 60), however many: the ring holds only the last 200.
	minutes [60]minuteCount
	// reportedAt is when the subscription was last reported failing
	// (Config.Failing).
	reportedAt time.Time
}

type minuteCount struct {
	minute     int64 // unix minute the counts are of
	ok, failed uint32
}

func (s *subHealth) add(now time.Time, out send.Outcome) {
	s.ring[s.n%healthRing] = outcome{at: now, ok: out.Class == send.Delivered, status: out.StatusCode}
	s.n++
	m := now.Unix() / 60
	c := &s.minutes[m%60]
	if c.minute != m {
		*c = minuteCount{minute: m}
	}
	if out.Class == send.Delivered {
		c.ok++
	} else {
		c.failed++
	}
}

// latest is when the newest outcome was recorded.
func (s *subHealth) latest() time.Time {
	if s.n == 0 {
		return time.Time{}
	}
	return s.ring[(s.n-1)%healthRing].at
}

// Health is what the dispatcher knows of a subscription right now.
type Health struct {
	// Circuit is what holds the endpoint back: its own circuit, or its
	// host's when that is worse (open, then half_open, then closed).
	Circuit         string
	EndpointCircuit string
	HostCircuit     string
	// PausedUntil is the end of a Retry-After pause in force, the
	// endpoint's or its host's (the later); zero when there is none.
	PausedUntil time.Time
	// SuccessRate is the delivered share of attempts in the last hour; nil
	// when there were none.
	SuccessRate *float64
	// ConfigError is set when at least 95 % of recent failures are one 4xx
	// status: the endpoint answers, but rejects us (a signature check, auth).
	ConfigError bool
	ConfigCode  int
	// EndpointRetryAt and HostRetryAt are when an open circuit lets its
	// probe through; zero unless that circuit is open.
	EndpointRetryAt, HostRetryAt time.Time
	// Minutes are this node's attempts of the last hour, a minute each,
	// oldest first; nil when it made none.
	Minutes []Minute
	// Recovering is set while the endpoint (or its host) ramps up after
	// its circuit closed, or catches up its backlog after the ramp: its
	// work goes, but paced. RampEndsAt is when the ramp reaches full at
	// the latest pace (zero in the catch-up, which ends with the backlog).
	Recovering bool
	RampEndsAt time.Time
}

// Minute counts one minute's attempts.
type Minute struct {
	Start             time.Time
	Delivered, Failed int
}

// Health reports a subscription's circuits, pause and recent outcomes.
// Advisory: nothing here changes how deliveries are sent. On a node that
// does not own the host the circuits are read from the board.
func (d *Dispatcher) Health(hostName, subID string) Health {
	d.mu.Lock()
	now := time.Now()
	hl := Health{EndpointCircuit: closed.String(), HostCircuit: closed.String()}
	remote := d.board != nil && !d.ownsHostLocked(hostName)
	if h := d.hosts[hostName]; h != nil && !remote {
		h.breaker.admits(now) // an expired open period reads as half-open
		hl.HostCircuit = h.breaker.state.String()
		if h.breaker.state == open {
			hl.HostRetryAt = h.breaker.retryAt
		}
		paused := h.pauseUntil
		if l := h.lanes[subID]; l != nil {
			l.breaker.admits(now)
			hl.EndpointCircuit = l.breaker.state.String()
			if l.breaker.state == open {
				hl.EndpointRetryAt = l.breaker.retryAt
			}
			if l.pauseUntil.After(paused) {
				paused = l.pauseUntil
			}
			hl.Recovering = l.ramp.level != 0 || h.ramp.level != 0 || l.catchingUp
			hl.RampEndsAt = maxTime(l.ramp.endsAt(now), h.ramp.endsAt(now))
		}
		if paused.After(now) {
			hl.PausedUntil = paused
		}
	}
	d.recentLocked(&hl, subID, now)
	d.mu.Unlock()
	if remote {
		d.boardHealth(&hl, hostName, subID, now)
	}
	hl.Circuit = hl.HostCircuit
	if rank(hl.EndpointCircuit) > rank(hl.Circuit) {
		hl.Circuit = hl.EndpointCircuit
	}
	return hl
}

// rank orders circuits by how much they hold back.
func rank(c string) int {
	switch c {
	case open.String():
		return 2
	case halfOpen.String():
		return 1
	}
	return 0
}

// recentLocked fills in the subscription's recent success rate and
// configuration-error hint.
func (d *Dispatcher) recentLocked(hl *Health, subID string, now time.Time) {
	s := d.health[subID]
	if s == nil {
		return
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
	if last := s.latest(); now.Sub(last) <= healthWindow {
		m := now.Unix() / 60
		hl.Minutes = make([]Minute, 60)
		for i := range hl.Minutes {
			at := m - 59 + int64(i)
			hl.Minutes[i].Start = time.Unix(at*60, 0)
			if c := s.minutes[at%60]; c.minute == at {
				hl.Minutes[i].Delivered, hl.Minutes[i].Failed = int(c.ok), int(c.failed)
			}
		}
	}
	for code, n := range failsBy {
		if code >= 400 && code < 500 && fails >= configErrorMinFailures && float64(n) >= configErrorShare*float64(fails) {
			hl.ConfigError, hl.ConfigCode = true, code
		}
	}
}

// Stats counts what the dispatcher holds in memory right now.
type Stats struct {
	Hosts                int // destination hosts
	Lanes                int // (host, subscription) lanes: endpoints
	Window               int // deliveries queued, not yet started
	Inflight             int // attempts in flight
	BreakersOpen         int // hosts whose circuit is open or half-open
	EndpointBreakersOpen int // endpoints whose own circuit is open or half-open
	RateLimited          int // endpoints with a 429 rate cut in force
	HostsPaused          int // hosts held by a Retry-After (two tenants' endpoints told to wait)
	EndpointsPaused      int // endpoints held by a Retry-After of their own or their tenant's there
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
		if h.breaker.state != closed {
			s.BreakersOpen++
		}
		if now.Before(h.pauseUntil) {
			s.HostsPaused++
		}
		for _, l := range h.lanes {
			s.Window += l.queued()
			if l.breaker.state != closed {
				s.EndpointBreakersOpen++
			}
			if l.aimd.limiting(now) {
				s.RateLimited++
			}
			if now.Before(l.pauseUntil) {
				s.EndpointsPaused++
			}
		}
	}
	return s
}

// boardHealth reads the circuits and pauses the owner of host published
// for it and the endpoint.
func (d *Dispatcher) boardHealth(hl *Health, host, subID string, now time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs, err := d.board.CircuitsGet(ctx, []string{host, subID})
	if err != nil {
		d.cfg.Log.Warn("reading published circuits", "host", host, "subscription", subID, "err", err)
		return
	}
	for _, c := range cs {
		if c.Age > staleCircuit {
			continue // its host moved, or its owner died: closed
		}
		state := closed
		switch {
		case c.Open && c.RetryIn > 0:
			state = open
		case c.Open:
			state = halfOpen
		}
		var retryAt time.Time
		if state == open {
			retryAt = now.Add(c.RetryIn)
		}
		if c.Key == host {
			hl.HostCircuit, hl.HostRetryAt = state.String(), retryAt
		} else {
			hl.EndpointCircuit, hl.EndpointRetryAt = state.String(), retryAt
		}
		if until := now.Add(c.PausedFor); c.PausedFor > 0 && until.After(hl.PausedUntil) {
			hl.PausedUntil = until
		}
	}
}

const (
	// publishInterval is how often the circuits of owned hosts and their
	// endpoints that changed are published; open or paused ones go again
	// every republishOpen, and one older than staleCircuit is read as
	// closed (its host moved to a node that has it closed, or its owner died).
	publishInterval = time.Second
	republishOpen   = 10 * time.Second
	staleCircuit    = 3 * republishOpen
)

// publishLoop publishes circuits every publishInterval until leaseQuit
// closes, on a node without leases (with them, leaseLoop does).
func (d *Dispatcher) publishLoop() {
	defer close(d.publishDone)
	t := time.NewTicker(publishInterval)
	defer t.Stop()
	for {
		select {
		case <-d.leaseQuit:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*publishInterval)
			d.publishCircuits(ctx)
			cancel()
		}
	}
}

// published is what the board last got for a key held back (an open
// circuit, a pause or a 429 back-off).
type published struct {
	host                      string
	retryAt, pauseUntil, sent time.Time
	cut                       float64
}

// publishCircuits publishes the circuits of owned hosts and their
// endpoints that changed since the last time: open or paused ones, and
// those that closed, resumed or left memory since. A node whose leases may
// have lapsed publishes nothing: the host may be another node's by now.
func (d *Dispatcher) publishCircuits(ctx context.Context) {
	d.mu.Lock()
	now := time.Now()
	if !d.mayStartLocked(now) {
		d.mu.Unlock()
		return
	}
	var changed []store.Circuit
	var sent []published
	seen := map[string]bool{}
	// a is the endpoint's 429 back-off (nil for a host): republished when
	// it was cut again, else with the rest every republishOpen.
	consider := func(key, host string, b *breaker, pause time.Time, a *aimd) {
		if seen[key] {
			return
		}
		seen[key] = true
		var cut float64
		if a != nil {
			cut = a.at(now)
		}
		held := b.state != closed || pause.After(now) || cut > 0
		was, ok := d.published[key]
		if held == ok && (!ok || (was.retryAt.Equal(b.retryAt) && was.pauseUntil.Equal(pause) && cut >= was.cut &&
			now.Sub(was.sent) <= republishOpen)) {
			return
		}
		c := store.Circuit{Key: key}
		if held {
			c.Open = b.state != closed
			if c.Open {
				c.RetryIn = b.retryAt.Sub(now)
			}
			if pause.After(now) {
				c.PausedFor = pause.Sub(now)
			}
			if cut > 0 {
				c.CutRate, c.CutCeiling = cut, a.ceiling
			}
		}
		changed = append(changed, c)
		sent = append(sent, published{host: host, retryAt: b.retryAt, pauseUntil: pause, sent: now, cut: cut})
	}
	for name, h := range d.hosts {
		if !d.ownsLocked(h) {
			continue
		}
		consider(name, name, &h.breaker, h.pauseUntil, nil)
		for id, l := range h.lanes {
			// A subscription that moved keeps a lane at its old host while
			// an attempt there finishes: its current host's lane speaks for it.
			if sub, ok := d.cfg.Subs.Get(id); ok && sub.Host != name {
				continue
			}
			consider(id, name, &l.breaker, l.pauseUntil, &l.aimd)
		}
	}
	for key, was := range d.published {
		switch {
		case !d.ownsHostLocked(was.host):
			delete(d.published, key) // its new owner publishes it now
		case !seen[key]:
			changed = append(changed, store.Circuit{Key: key}) // forgotten while held: closed now
			sent = append(sent, published{host: was.host})
		}
	}
	d.mu.Unlock()
	if len(changed) == 0 {
		return
	}
	began := time.Now()
	if err := d.board.CircuitsPublish(ctx, changed); err != nil {
		d.report("publishing circuits", began, err, "node", d.cfg.Node)
		return
	}
	d.mu.Lock()
	if d.published == nil {
		d.published = map[string]published{}
	}
	for i, c := range changed {
		if c.Open || c.PausedFor > 0 || c.CutRate > 0 {
			d.published[c.Key] = sent[i]
		} else {
			delete(d.published, c.Key)
		}
	}
	d.mu.Unlock()
}
