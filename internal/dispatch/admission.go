package dispatch

import (
	"math"
	"time"

	"hookd/internal/core"
)

// Admission defaults (DESIGN.md "Dispatch").
const (
	breakerWindow    = 60 * time.Second // failure rate is measured over this
	breakerMinVolume = 20               // attempts in the window before the rate counts
	// breakerLookback is how far the window widens, to the last
	// breakerMinVolume attempts, when attempts are too slow to reach the
	// volume in a minute: a hanging endpoint held to one slot makes six.
	breakerLookback  = 10 * time.Minute
	breakerFailRatio = 0.5
	breakerFirstOpen = 30 * time.Second
	breakerMaxOpen   = 30 * time.Minute
	// hostMaxOpen is a host circuit's longest open period: its probe is one
	// request for the whole host, most often a refused connection, which
	// costs the host nothing; doubling to 30 min, a host back after a
	// 9-minute outage waited 7.5 more for its probe.
	hostMaxOpen        = 2 * time.Minute
	hostMinFailing     = 3           // endpoints failing at once before it is the host's failure
	activeWindow       = time.Minute // an endpoint that sent this recently shares its host's cap
	useDecay           = time.Minute // how long a lane's holding of slots weighs on its turn (usage)
	quickHold          = time.Second // attempts that keep a slot longer make an endpoint slow (share)
	hostPauseWindow    = time.Minute // two endpoints told to wait within this may pause their tenant's endpoints or their host (pause)
	rampStart          = 0.10        // share of the destination's rate admitted when it recovers
	rampDuration       = 5 * time.Minute
	rampHealthyRatio   = 0.9 // the ramp advances at full speed while this share of attempts succeed
	rampSlow           = 3   // and this many times slower otherwise
	rampLookback       = 10 * time.Second
	rampMinBase        = 10.0        // deliveries/s: the least rate a ramp without rate_limit is a share of
	goneHold           = time.Minute // an endpoint that answered 410 sends nothing more while its disable runs, up to this
	backlogFloor       = 0.2         // share of a lane's starts kept for its oldest work
	aimdCut            = 0.5         // a 429 halves the endpoint's rate
	aimdRecoverPerSec  = 0.05
	aimdMinRate        = 0.5 // deliveries/s: a cut never stops an endpoint entirely
	observedRateWindow = 10 * time.Second
	peakDecay          = 10 * time.Minute // how long what an endpoint took at its best weighs on its ramp's rate after a trip
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

// tally is the outcomes of one second (or a sum of seconds): attempts,
// failures, and failed connections.
type tally struct {
	at            int64 // the unix second counted
	n, fail, conn uint32
}

// mark is one recent outcome.
type mark struct {
	at         int64 // unix nanoseconds
	fail, conn bool
}

// window keeps the outcomes a breaker judges: per-second tallies over
// breakerWindow, and the last breakerMinVolume outcomes, to which the
// look-back widens (up to breakerLookback) when a minute holds fewer.
type window struct {
	secs   [int(breakerWindow / time.Second)]tally
	recent [breakerMinVolume]mark
	next   int // the slot of recent the next outcome takes: the oldest once full
	seen   int // outcomes in recent
}

func (w *window) add(now time.Time, fail, conn bool) {
	s := &w.secs[now.Unix()%int64(len(w.secs))]
	if s.at != now.Unix() {
		*s = tally{at: now.Unix()}
	}
	s.n++
	if fail {
		s.fail++
	}
	if conn {
		s.conn++
	}
	w.recent[w.next] = mark{at: now.UnixNano(), fail: fail, conn: conn}
	w.next = (w.next + 1) % len(w.recent)
	w.seen = min(w.seen+1, len(w.recent))
}

// sum totals the seconds of the span ending at now (at most breakerWindow).
func (w *window) sum(now time.Time, span time.Duration) tally {
	var t tally
	from, to := now.Add(-span).Unix(), now.Unix()
	for _, s := range w.secs {
		if s.at > from && s.at <= to {
			t.n, t.fail, t.conn = t.n+s.n, t.fail+s.fail, t.conn+s.conn
		}
	}
	return t
}

// lookback totals what the breaker judges: the last minute when it holds
// the minimum volume, else the last breakerMinVolume outcomes if they all
// came within breakerLookback. ok is false when neither has the volume.
func (w *window) lookback(now time.Time) (tally, bool) {
	if t := w.sum(now, breakerWindow); t.n >= breakerMinVolume {
		return t, true
	}
	return w.lastFew(now)
}

// lastFew totals the last breakerMinVolume outcomes, if there are as many
// within breakerLookback.
func (w *window) lastFew(now time.Time) (tally, bool) {
	if w.seen < len(w.recent) || now.UnixNano()-w.recent[w.next].at > int64(breakerLookback) {
		return tally{}, false
	}
	t := tally{n: uint32(len(w.recent))}
	for _, m := range w.recent {
		if m.fail {
			t.fail++
		}
		if m.conn {
			t.conn++
		}
	}
	return t, true
}

// last is the newest outcome.
func (w *window) last() (mark, bool) {
	if w.seen == 0 {
		return mark{}, false
	}
	return w.recent[(w.next+len(w.recent)-1)%len(w.recent)], true
}

// tripping: at least breakerFailRatio of what lookback judges, counted by
// of (failures, or failed connections), went wrong.
//
// Or the last breakerMinVolume all went wrong, whatever the minute held:
// an endpoint taking 20 a second that began answering 500 had a minute of
// successes to outweigh, and its retries on top of new events doubled
// what it was sent for 18 s (595 attempts) before the ratio tripped it.
func (w *window) tripping(now time.Time, of func(tally) uint32) bool {
	if t, ok := w.lookback(now); ok && float64(of(t)) >= breakerFailRatio*float64(t.n) {
		return true
	}
	t, ok := w.lastFew(now)
	return ok && of(t) == t.n
}

func failures(t tally) uint32    { return t.fail }
func connections(t tally) uint32 { return t.conn }

// breaker is a circuit breaker's state: open for 30 s, doubling on each
// failed probe to 30 min, jittered; then half-open, letting exactly one
// probe through; closed again only by that probe's success. What trips it
// and what counts as the probe's success is its owner's to judge.
type breaker struct {
	state   circuit
	retryAt time.Time     // when an open breaker lets a probe through
	backoff time.Duration // the last open period (before jitter)
	maxOpen time.Duration // the longest open period; 0: breakerMaxOpen
	probing bool          // the half-open probe is in flight
	// probeFailed is when a probe last failed since it opened (zero:
	// none yet): what it holds is failed untried only once a probe after
	// its retry window found the endpoint still down (expireHeld).
	probeFailed time.Time
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

// probed settles the probe: success closes the breaker (it reports true:
// the caller starts the recovery ramp), failure opens it for longer.
func (b *breaker) probed(now time.Time, success bool) bool {
	if !success {
		b.trip(now)
		b.probeFailed = now
		return false
	}
	b.state, b.probing, b.backoff, b.probeFailed = closed, false, 0, time.Time{}
	return true
}

// abandon: the probe told nothing of what this breaker judges (an
// endpoint's probe whose connection failed); another may go.
func (b *breaker) abandon() { b.probing = false }

// trip opens the breaker for 30 s, doubling on each failed probe to 30 min
// (or its maxOpen), jittered.
func (b *breaker) trip(now time.Time) {
	longest := breakerMaxOpen
	if b.maxOpen > 0 {
		longest = b.maxOpen
	}
	if b.state == closed {
		b.probeFailed = time.Time{}
	}
	if b.backoff == 0 {
		b.backoff = breakerFirstOpen
	} else {
		b.backoff = min(2*b.backoff, longest)
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

// tokenSlack forgives floating-point sums a hair short of a whole token: a
// wait computed from one rounds up to a nanosecond, again and again.
const tokenSlack = 1e-9

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
	return k.tokens >= 1-tokenSlack && k.windowFree(now).IsZero()
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
	if k.tokens < 1-tokenSlack {
		// Rounded up: a wait that rounds to 0 ns would find the token short again.
		at = now.Add(time.Duration(math.Ceil((1 - k.tokens) / k.rate * float64(time.Second))))
	}
	if free := k.windowFree(now); free.After(at) {
		at = free
	}
	return at
}

// aimd is the endpoint's adaptive rate after 429s: each 429 halves it,
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

// holdUntil starts a cut's recovery at t, the end of the Retry-After that
// came with it: a pause's time is not recovery, or a cut made at a slow
// observed rate lifts during the pause and everything waiting goes at once.
func (a *aimd) holdUntil(t time.Time) {
	if a.rate > 0 && t.After(a.last) {
		a.last = t
	}
}

// current grows the rate by 5 % of its ceiling per second since the last
// look (none before a hold ends). At the ceiling the cut lifts, unless
// work is still queued (backlogged): the ceiling is the rate seen before
// the cut, and what queued under it went at once when it lifted (12
// within 8 ms, 10 s after a 503's pause), so the ceiling doubles instead,
// until the queue is empty.
func (a *aimd) current(now time.Time, backlogged bool) float64 {
	if a.rate == 0 {
		return 0
	}
	if now.Before(a.last) {
		return a.rate
	}
	a.rate += a.ceiling * aimdRecoverPerSec * now.Sub(a.last).Seconds()
	a.last = now
	for a.rate >= a.ceiling {
		if !backlogged {
			a.rate = 0
			break
		}
		a.ceiling *= 2
	}
	return a.rate
}

// liftAt is when a cut grows back to its ceiling and lifts; zero with none.
func (a *aimd) liftAt() time.Time {
	if a.rate == 0 {
		return time.Time{}
	}
	return a.last.Add(time.Duration((a.ceiling - a.rate) / (a.ceiling * aimdRecoverPerSec) * float64(time.Second)))
}

// limiting reports whether a cut is still in force at now, as current
// would find it, without moving the state.
func (a *aimd) limiting(now time.Time) bool { return a.at(now) > 0 }

// at is the cut's rate at now, as current would find it without a
// backlog, without moving the state; 0 when none is in force.
func (a *aimd) at(now time.Time) float64 {
	if a.rate == 0 {
		return 0
	}
	r := a.rate + a.ceiling*aimdRecoverPerSec*max(0, now.Sub(a.last).Seconds())
	if r >= a.ceiling {
		return 0
	}
	return r
}

// takeUp starts the cut an owner published age ago, grown since as it
// would have: the owner's rate, and where its recovery ends.
func (a *aimd) takeUp(rate, ceiling float64, age time.Duration, now time.Time) {
	a.rate, a.ceiling, a.last = rate, max(ceiling, rate), now.Add(-max(0, age))
	if a.at(now) == 0 {
		*a = aimd{} // it lifted since
		return
	}
	a.current(now, false)
}

// ramp is the slow start after a breaker closes: the share of the
// endpoint's (or the host's) concurrency and rate admitted, from 10 % to
// 100 % over five minutes while attempts succeed, three times slower while
// more than a tenth fail, so it always ends (within 15 minutes): judging a
// failing endpoint is its breaker's work, not the ramp's.
type ramp struct {
	level float64 // 0 or 1: no ramp
	last  time.Time
}

func (r *ramp) start(now time.Time) { r.level, r.last = rampStart, now }

func (r *ramp) factor(now time.Time, healthy bool) float64 {
	if r.level == 0 || r.level >= 1 {
		return 1
	}
	step := (1 - rampStart) * now.Sub(r.last).Seconds() / rampDuration.Seconds()
	if !healthy {
		step /= rampSlow
	}
	r.level += step
	r.last = now
	if r.level >= 1 {
		r.level = 0
		return 1
	}
	return r.level
}

// endsAt is when the ramp reaches full at its full pace, as of its last
// look (zero with no ramp).
func (r *ramp) endsAt(now time.Time) time.Time {
	if r.level == 0 {
		return time.Time{}
	}
	left := time.Duration((1 - r.level) / (1 - rampStart) * float64(rampDuration))
	return maxTime(r.last, now).Add(left)
}

// staleAt is when a ramp nobody has looked at (its owner idle) is
// forgotten; zero with no ramp.
func (r *ramp) staleAt() time.Time {
	if r.level == 0 {
		return time.Time{}
	}
	return r.last.Add(rampDuration)
}
