package replay

import (
	"math"
	"time"
)

const (
	// StepEvery is how often a job puts a batch back in line at most: a
	// batch is its rate × StepEvery (at least one delivery), so a fast job
	// costs ten transactions a second and a slow one fewer.
	StepEvery = 100 * time.Millisecond
	// Window is the span in which a job's deliveries reach the endpoint at
	// most its rate.
	Window = time.Second
)

// pace is one job's budget on this node. Tokens accrue at the job's rate
// and a step waits for a batch's worth, which spreads the job over the
// second (and spaces a job under 1/s). The bound is the window: a batch
// counts from when it is put back until a Window after every delivery in
// it was tried (its results written, so it has reached the endpoint or
// failed to), and never more than the rate (at least one) count at once.
// A send late by any amount still counts until a second after it, so the
// endpoint sees at most the rate in any second however unevenly sends
// leave; and an endpoint that is not taking what was put back (circuit
// open, paused) is handed no more.
type pace struct {
	rate   float64
	tokens float64
	last   time.Time
	tried  []batch // tried within the last Window, oldest first
}

// batch is n deliveries, all tried by at.
type batch struct {
	at time.Time
	n  int
}

func newPace(rate float64) *pace { return &pace{rate: rate} }

// size is what one step puts back at most.
func (p *pace) size() int { return max(1, int(p.rate*StepEvery.Seconds())) }

// allow is how many deliveries may be put back at now, with waiting of
// those put back not yet tried: 0 until a batch's worth of tokens has
// accrued, then a batch or what the window has room for, if less.
func (p *pace) allow(now time.Time, waiting int) int {
	b := float64(p.size())
	if p.last.IsZero() {
		p.tokens = b // a new job starts at once
	} else if d := now.Sub(p.last); d > 0 {
		// Up to two ticks' worth over a batch carries over, or each step
		// due a hair after a tick would lose the rest of that tick.
		p.tokens = math.Min(b+2*tick.Seconds()*p.rate, p.tokens+d.Seconds()*p.rate)
	}
	if now.After(p.last) {
		p.last = now
	}
	if p.tokens < b-1e-9 {
		return 0
	}
	in := waiting
	keep := p.tried[:0]
	for _, t := range p.tried {
		if now.Sub(t.at) < Window {
			keep = append(keep, t)
			in += t.n
		}
	}
	p.tried = keep
	return max(0, min(p.size(), int(p.tokens+1e-9), max(1, int(p.rate))-in))
}

// took spends the tokens of n deliveries put back.
func (p *pace) took(n int) { p.tokens -= float64(n) }

// triedBy records n deliveries put back earlier as tried by at.
func (p *pace) triedBy(at time.Time, n int) {
	if n > 0 {
		p.tried = append(p.tried, batch{at: at, n: n})
	}
}
