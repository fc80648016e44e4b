package dispatch

import (
	"math"
	"time"

	"hookd/internal/core"
)

// Admission defaults (DESIGN.md "Dispatch").
const (
	breakerWindow      = 60 * time.Second // failure rate is measured over this
	breakerMinVolume   = 20               // attempts in the window before the rate counts
	breakerFailRatio   = 0.5
	breakerFirstOpen   = 30 * time.Second
	breakerMaxOpen     = 30 * time.Minute
	rampStart          = 0.10 // share of the destination's rate admitted when it recovers
	rampDuration       = 5 * time.Minute
	rampHealthyRatio   = 0.9 // the ramp advances only while this share of attempts succeed
	backlogFloor       = 0.2 // share of a lane's starts kept for its oldest work
	aimdCut            = 0.5 // a 429 halves the destination's rate
	aimdRecoverPerSec  = 0.05
	aimdMinRate        = 0.5 // deliveries/s: a cut never stops a destination entirely
	observedRateWindow = 10 * time.Second
)

type circuit int

const (
	closed circuit = iota
	open
	halfOpen
)

func (c circuit) String() string {
	return [...]string{"closed", "open", "half_open"}[c]
}

// breaker is a host's circuit breaker: it opens on a failure rate over a
// minimum volume (never a bare count), waits, lets exactly one probe through,
// and closes only on that probe's success.
type breaker struct {
	state   circuit
	secs    [int(breakerWindow / time.Second)]second // ring of per-second counts
	retryAt time.Time                                // when an open breaker lets a probe through
	backoff time.Duration                            // the last open period (before jitter)
	probing bool                                     // the half-open probe is in flight
}

type second struct {
	at       int64 // unix second this slot counts
	ok, fail int
}

func (b *breaker) slot(now time.Time) *second {
	s := &b.secs[now.Unix()%int64(len(b.secs))]
	if s.at != now.Unix() {
		*s = second{at: now.Unix()}
	}
	return s
}

// counts sums the window ending at now.
func (b *breaker) counts(now time.Time, window time.Duration) (ok, fail int) {
	from := now.Add(-window).Unix()
	for _, s := range b.secs {
		if s.at > from && s.at <= now.Unix() {
			ok, fail = ok+s.ok, fail+s.fail
		}
	}
	return ok, fail
}

// admits reports whether an attempt may start; it moves an open breaker
// whose wait is over to half-open.
func (b *breaker) admits(now time.Time) bool {
	if b.state == open && !now.Before(b.retryAt) {
		b.state, b.probing = halfOpen, false
	}
	switch b.state {
	case open:
		return false
	case halfOpen:
		return !b.probing
	}
	return true
}

// started notes an admitted attempt; in half-open it is the one probe.
func (b *breaker) started() bool {
	if b.state == halfOpen {
		b.probing = true
		return true
	}
	return false
}

// record counts an outcome and moves the state. It reports whether the
// breaker just closed (the caller starts the recovery ramp).
func (b *breaker) record(now time.Time, failed, probe bool) (closedNow bool) {
	s := b.slot(now)
	if failed {
		s.fail++
	} else {
		s.ok++
	}
	switch {
	case probe && !failed:
		b.state, b.probing, b.backoff = closed, false, 0
		b.secs = [len(b.secs)]second{} // a fresh start: old failures do not reopen it
		return true
	case probe && failed:
		b.trip(now)
	case b.state == closed:
		ok, fail := b.counts(now, breakerWindow)
		if n := ok + fail; n >= breakerMinVolume && float64(fail) >= breakerFailRatio*float64(n) {
			b.trip(now)
		}
	}
	return false
}

// trip opens the breaker for 30 s, doubling on each failed probe to 30 min, jittered.
func (b *breaker) trip(now time.Time) {
	if b.backoff == 0 {
		b.backoff = breakerFirstOpen
	} else {
		b.backoff = min(2*b.backoff, breakerMaxOpen)
	}
	b.state, b.probing = open, false
	b.retryAt = now.Add(core.Jitter(b.backoff))
}

// bucket paces sends at rate per second: never more than rate sends in
// any rateWindow (by start time, counted exactly in sent), and evenly, except
// that it makes up for timer lateness of up to catchUp. A bucket of one
// lost every wake-up's lateness: a 60,000-delivery backlog at rate_limit
// 5000 drained at 1,450/s, at 2000 at 800/s, at 200 at 182/s.
type bucket struct {
	rate   float64 // tokens per second; 0 means unlimited
	tokens float64
	last   time.Time
	// sent holds the start times (monotonic, see mono) of the sends of the
	// last rateWindow, oldest first from head: at most rate of them.
	sent []time.Duration
	head int
}

// catchUp is how much lateness of the dispatcher's wake-ups a bucket makes
// up for, as a burst of at most rate×catchUp sends (still within the
// window's rate).
const catchUp = 20 * time.Millisecond

// rateWindow is the span in which a bucket starts at most rate sends: a
// little over a second, for the endpoint's second, as sends are delayed
// between their start and the wire by different amounts. With 20 ms, a
// receiver counted 2,003 and 2,008 in its busiest second over 514 s drains
// at 2000/s; 50 ms trades 3 % of the rate for that margin.
const rateWindow = time.Second + 50*time.Millisecond

// monoBase anchors send times on the monotonic clock: a wall clock stepped
// back must not stall sending.
var monoBase = time.Now()

func mono(t time.Time) time.Duration { return t.Sub(monoBase) }

// refill accrues tokens at the rate in force since the last look; the rate
// may change between looks (a ramp, an edited rate_limit).
func (k *bucket) refill(now time.Time, rate float64) {
	if k.last.IsZero() {
		k.tokens = 1 // a fresh bucket lets the first send go at once
	} else {
		k.tokens = math.Min(max(1, k.rate*catchUp.Seconds()), k.tokens+now.Sub(k.last).Seconds()*k.rate)
	}
	k.rate, k.last = rate, now
}

// ready reports whether a send may start now at rate. With no limit in
// force (rate <= 0) the bucket forgets its tokens, so none are owed when a
// limit returns; its record of recent sends stays.
func (k *bucket) ready(now time.Time, rate float64) bool {
	if rate <= 0 {
		k.rate, k.tokens, k.last = 0, 0, time.Time{}
		return true
	}
	k.refill(now, rate)
	return k.tokens >= 1 && k.windowFree(now).IsZero()
}

// prune forgets sends older than the window.
func (k *bucket) prune(now time.Time) {
	cut := mono(now) - rateWindow
	for k.head < len(k.sent) && k.sent[k.head] <= cut {
		k.head++
	}
	if k.head > 0 && k.head >= len(k.sent)/2 {
		k.sent = append(k.sent[:0], k.sent[k.head:]...)
		k.head = 0
	}
}

// windowFree is when the window's sends fall under the rate: zero if they
// are under it now.
func (k *bucket) windowFree(now time.Time) time.Time {
	k.prune(now)
	limit := max(1, int(k.rate))
	if n := len(k.sent) - k.head; n >= limit {
		// The limit-th latest send: another may start a window after it.
		return monoBase.Add(k.sent[len(k.sent)-limit] + rateWindow)
	}
	return time.Time{}
}

// recent: a send started within the window, so forgetting the bucket
// would let the next one exceed the rate.
func (k *bucket) recent(now time.Time) bool {
	k.prune(now)
	return k.head < len(k.sent)
}

// quietAt is when the last send leaves the window (zero: none in it).
func (k *bucket) quietAt() time.Time {
	if k.head == len(k.sent) {
		return time.Time{}
	}
	return monoBase.Add(k.sent[len(k.sent)-1] + rateWindow)
}

// take spends a token for a send starting now and notes its start; without
// a limit in force it does nothing.
func (k *bucket) take(now time.Time) {
	if k.rate <= 0 {
		return
	}
	k.tokens--
	k.prune(now)
	k.sent = append(k.sent, mono(now))
}

// nextToken is when ready will next be true.
func (k *bucket) nextToken(now time.Time) time.Time {
	if k.rate <= 0 {
		return now
	}
	at := now
	if k.tokens < 1 {
		// Rounded up: a wait that rounds to 0 ns would find the token short again.
		at = now.Add(time.Duration(math.Ceil((1 - k.tokens) / k.rate * float64(time.Second))))
	}
	if free := k.windowFree(now); free.After(at) {
		at = free
	}
	return at
}

// aimd is the destination's adaptive rate after 429s: each 429 halves it,
// and it grows back additively until it reaches where it was, then lifts.
type aimd struct {
	rate    float64 // deliveries/s; 0 means not limited
	ceiling float64 // the rate at the first cut: recovery ends there
	last    time.Time
}

func (a *aimd) cut(now time.Time, observed float64) {
	if a.rate == 0 {
		a.ceiling = math.Max(observed, 1)
		a.rate = a.ceiling
	}
	a.rate = math.Max(a.rate*aimdCut, aimdMinRate)
	a.last = now
}

// current grows the rate by 5 % of its ceiling per second since the last look.
func (a *aimd) current(now time.Time) float64 {
	if a.rate == 0 {
		return 0
	}
	a.rate += a.ceiling * aimdRecoverPerSec * now.Sub(a.last).Seconds()
	a.last = now
	if a.rate >= a.ceiling {
		a.rate = 0
	}
	return a.rate
}

// limiting reports whether a cut is still in force at now, as current
// would find it, without moving the state.
func (a *aimd) limiting(now time.Time) bool {
	return a.rate > 0 && a.rate+a.ceiling*aimdRecoverPerSec*now.Sub(a.last).Seconds() < a.ceiling
}

// ramp is the slow start after a breaker closes: the share of the
// destination's concurrency and rate admitted, from 10 % to 100 % over five
// minutes, advancing only while attempts succeed.
type ramp struct {
	level float64 // 0 or 1: no ramp
	last  time.Time
}

func (r *ramp) start(now time.Time) { r.level, r.last = rampStart, now }

func (r *ramp) factor(now time.Time, healthy bool) float64 {
	if r.level == 0 || r.level >= 1 {
		return 1
	}
	if healthy {
		r.level += (1 - rampStart) * now.Sub(r.last).Seconds() / rampDuration.Seconds()
	}
	r.last = now
	if r.level >= 1 {
		r.level = 0
		return 1
	}
	return r.level
}
