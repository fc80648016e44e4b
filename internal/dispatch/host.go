package dispatch

import (
	"math"
	"slices"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// host is one destination server (host:port): what is polite to it is
// decided here. It owns the concurrency cap its active endpoints share,
// and a circuit of its own that opens only on host-wide evidence.
type host struct {
	name     string
	shard    int
	lanes    map[string]*lane // by subscription ID
	inflight int
	// outcomes counts every attempt on the host: fail is any failure, conn
	// a failed connection (the host's own evidence).
	outcomes window
	breaker  breaker
	cause    cause     // why breaker last opened, which decides what its probe must show
	judgedAt time.Time // the last look at whether most endpoints fail (at most one a second)
	ramp     ramp      // after its circuit closes: its cap, and every lane's rate, from 10 %
	// pauseUntil is a Retry-After asked of endpoints of two tenants within
	// a minute while no endpoint of the host was serving (a host-wide
	// limit); told is each tenant's last endpoint told to wait (see pause).
	pauseUntil time.Time
	told       map[string]ask
	wakeAt     time.Time // the wake-up queued for this host, if any
	// served holds endpoints forgotten while idle whose last attempt
	// succeeded, and when: within the breaker's look-back they still show
	// the server works (mostEndpointsFailing).
	served      map[string]time.Time
	servedPrune int // the size of served at which it is next pruned
	// holds is how long each endpoint's attempts keep a slot, averaged, by
	// URL (see quick): one URL is one endpoint, whichever of its lanes
	// sends, and a lane new to a URL a live or forgotten lane knew is known
	// quick or slow from the start. Kept while a lane or a served record
	// names the URL.
	holds      map[string]time.Duration
	holdsPrune int // the size of holds at which it is next pruned
}

// cause is what opened a host's circuit.
type cause int

const (
	byConnections cause = iota // connections failed: any answer shows the host is back
	byEndpoints                // most endpoints failed at once: the probe must succeed
)

// ask is one endpoint told to wait (a Retry-After), and when.
type ask struct {
	endpoint string
	at       time.Time
}

// lane is one endpoint (a subscription) at its host: its queued work and
// everything that judges it alone.
type lane struct {
	subID  string
	url    string // the endpoint, once its subscription was read: one URL may have several subscriptions
	tenant string // its subscription's, read with url
	// fresh holds deliveries handed over at ingest; backlog holds due
	// deliveries fetched from the store, oldest first.
	fresh, backlog []*core.Job // pointers: a Job is ~450 bytes, copied per queue step
	inflight       int
	// backlogCredit grows by the backlog floor with every start while both
	// queues hold work; a whole credit buys the backlog a start.
	backlogCredit float64
	// known holds every delivery of the lane in memory, in flight, or
	// awaiting its result write, or reserved: a refill must not fetch it again.
	known map[string]bool
	// reserved are known deliveries this node's ingest is committing: its
	// hand-off (Notify) brings them, however late it comes. Each holds the
	// lane's epoch when it was reserved.
	reserved map[string]uint64
	// epoch counts the drops of the lane's queue: a refill or a hand-off
	// begun before one may bring what the drop was for (a delivery another
	// node's disable wrote skipped meanwhile), and the store is asked again.
	epoch uint64
	// storeDue is when the store may next hold due work this lane does not
	// know of; zero means never (until a hand-off or resync says otherwise).
	storeDue  time.Time
	refilling bool
	// wokeAt is the last Wake (or resync). A result whose write began
	// before it may belong to a delivery replayed after that write, which
	// the wake's refill skipped as still held.
	wokeAt time.Time
	// recorded holds deliveries whose results were written while a refill
	// ran: its answer may predate them and show them still pending. (A
	// retry's next time is in storeDue, set when its result is written.)
	recorded map[string]bool
	// lastStart is the last attempt's start: sending within activeWindow
	// counts the lane toward its host's fair share even while it is idle.
	lastStart time.Time
	// use is the slot-seconds the lane has held, decaying over useDecay,
	// as of useAt: its recent share of the host's time (see usage).
	use   float64
	useAt time.Time
	// before is the attempts a second it made in the minute before its
	// own or its host's circuit last opened, or what it took at its best
	// lately if more (peak): with no rate_limit, what the recovery ramp's
	// rate is a share of.
	before float64
	// best is its most successes a second lately: a hang's minute before
	// the trip holds only timeouts, under a tenth of what the endpoint took.
	best peakRate
	// catchingUp: its circuit (or its host's) closed and the backlog it
	// left is not yet sent; with no rate_limit it is paced meanwhile, at
	// a rate doubling from catchUpAt (the ramp's end) until then.
	catchingUp bool
	catchUpAt  time.Time

	// The endpoint's own admission: outcomes of its attempts (a failed
	// connection is its host's, not counted here), its breaker and the ramp
	// after it closes, a Retry-After pause, 429 back-off, its rate limit.
	outcomes   window
	breaker    breaker
	ramp       ramp
	pauseUntil time.Time
	// goneAt is its last 410: it sends nothing for goneHold after, while
	// its subscription is being disabled, unless the subscription changes
	// since (re-enabled: see ungone).
	goneAt time.Time
	// toldAt is its last Retry-After, servedAt the start of its last 2xx:
	// whether it is serving, the evidence against pausing others (pause).
	toldAt, servedAt time.Time
	aimd             aimd
	aimdBucket       bucket
	bucket           bucket
}

// laneLocked finds or makes the host and lane of a subscription's work.
func (d *Dispatcher) laneLocked(hostName, subID string) (*host, *lane) {
	h := d.hosts[hostName]
	if h == nil {
		h = &host{name: hostName, shard: core.ShardOf(hostName), lanes: map[string]*lane{}, breaker: breaker{maxOpen: hostMaxOpen}}
		d.hosts[hostName] = h
	}
	l := h.lanes[subID]
	if l == nil {
		l = &lane{subID: subID, known: map[string]bool{}}
		h.lanes[subID] = l
	}
	return h, l
}

// due records that the store may hold due work for the lane from t on.
func (l *lane) due(t time.Time) {
	if l.storeDue.IsZero() || t.Before(l.storeDue) {
		l.storeDue = t
	}
}

func (l *lane) queued() int { return len(l.fresh) + len(l.backlog) }

// active: the lane has work queued or in flight, or sent within
// activeWindow. Its host's cap is shared among its active lanes; a lane
// counted only while it has work would let a hanging one grab a slot
// whenever the others are momentarily idle.
// A lane its own circuit or pause holds is not active: it cannot use a
// share, and counting it would shrink its neighbours'.
func (l *lane) active(now time.Time) bool {
	if l.inflight > 0 {
		return true
	}
	if l.held(now) {
		return false
	}
	return l.queued() > 0 || l.storeHolds(now) || (!l.lastStart.IsZero() && now.Sub(l.lastStart) < activeWindow)
}

// storeHolds: the store holds work due now for the lane that is not in
// memory yet (being read, or to be). Such a lane has work as much as one
// with a queue: after a restart every lane's backlog is read back one lane
// at a time, and counting only the lanes read so far, the first hanging
// one, alone on its host, took 9 of its 10 slots and the next the last.
func (l *lane) storeHolds(now time.Time) bool {
	return l.refilling || (!l.storeDue.IsZero() && !l.storeDue.After(now))
}

// held: the endpoint's own Retry-After or open circuit stops it now.
func (l *lane) held(now time.Time) bool {
	return now.Before(l.pauseUntil) || l.gone(now) || (l.breaker.state == open && now.Before(l.breaker.retryAt))
}

// gone: the endpoint answered 410 within goneHold.
func (l *lane) gone(now time.Time) bool { return now.Before(l.goneUntil()) }

// goneUntil is when its 410's hold ends (zero: none).
func (l *lane) goneUntil() time.Time {
	if l.goneAt.IsZero() {
		return time.Time{}
	}
	return l.goneAt.Add(goneHold)
}

// untried: the lane has no history on this node (no attempt, no circuit,
// no pause), so what was published for it may be taken up (takeUp).
func (l *lane) untried() bool { return untried(&l.outcomes, &l.breaker, l.pauseUntil) }

// untried: as a lane's, for the host's own circuit and pause.
func (h *host) untried() bool { return untried(&h.outcomes, &h.breaker, h.pauseUntil) }

func untried(w *window, b *breaker, pauseUntil time.Time) bool {
	_, tried := w.last()
	return !tried && b.state == closed && pauseUntil.IsZero()
}

// takeUp holds an untried lane as c, its last published circuit, says: open
// until its retry time (half-open at once if that passed: one probe, not
// a burst), paused for what is left of its Retry-After, and held to its
// 429 back-off (a restart sent an endpoint answering 429 its floor at
// once). A pause published without a cut (by a node of the release
// before) starts one from the least rate, or its end sent the whole queue
// at once (an outside run: 9 requests, after a kill -9).
func (l *lane) takeUp(c store.Circuit, now time.Time) {
	if l.untried() {
		takeUp(&l.breaker, &l.pauseUntil, c, now)
		switch {
		case c.CutRate > 0:
			l.aimd.takeUp(c.CutRate, c.CutCeiling, c.Age, now)
		case c.PausedFor > 0:
			l.aimd.cut(now, 0)
		}
		l.aimd.holdUntil(l.pauseUntil)
	}
}

// takeUp: as a lane's, for the host.
func (h *host) takeUp(c store.Circuit, now time.Time) {
	if h.untried() {
		takeUp(&h.breaker, &h.pauseUntil, c, now)
	}
}

func takeUp(b *breaker, pauseUntil *time.Time, c store.Circuit, now time.Time) {
	if c.Open {
		// It opened once at least: a failed probe doubles from there.
		b.state, b.retryAt, b.backoff = open, now.Add(max(0, c.RetryIn)), breakerFirstOpen
	}
	if c.PausedFor > 0 {
		*pauseUntil = now.Add(c.PausedFor)
	}
}

// ungone lifts the 410's hold of a subscription changed since (re-enabled).
func (l *lane) ungone(sub *core.Subscription) {
	if !l.goneAt.IsZero() && sub.UpdatedAt.After(l.goneAt) {
		l.goneAt = time.Time{}
	}
}

// usage is the lane's slot-seconds held, each second's weight decaying
// over useDecay: about the slots it holds on average times useDecay. With
// more active endpoints than slots every floor is one slot, and ties go to
// the lane that has held the least: slow endpoints that always take the
// slot they free would otherwise keep the host to themselves.
func (l *lane) usage(now time.Time) float64 {
	dt := now.Sub(l.useAt).Seconds()
	if dt <= 0 {
		return l.use
	}
	full := float64(l.inflight) * useDecay.Seconds() // where holding inflight slots tends
	return full + (l.use-full)*math.Exp(-dt/useDecay.Seconds())
}

// account brings usage up to now: called before inflight changes.
func (l *lane) account(now time.Time) {
	l.use, l.useAt = l.usage(now), now
}

// heldFor notes how long one of l's attempts kept its slot, in its URL's
// average. What no lane or served record names goes whenever the map has
// doubled since.
func (h *host) heldFor(l *lane, d time.Duration) {
	if h.holds == nil {
		h.holds = map[string]time.Duration{}
	}
	ep := l.endpoint()
	if old := h.holds[ep]; old != 0 {
		d = old + (d-old)/4
	}
	h.holds[ep] = d
	if len(h.holds) < h.holdsPrune {
		return
	}
	named := map[string]bool{}
	for _, o := range h.lanes {
		named[o.endpoint()] = true
	}
	for ep := range h.holds {
		if _, ok := h.served[ep]; !ok && !named[ep] {
			delete(h.holds, ep)
		}
	}
	h.holdsPrune = max(64, 2*len(h.holds))
}

// quick: l's endpoint is known to give its slots back within quickHold.
// One never answered is not known quick: new endpoints that turned out
// slow, joining one after another, each took the slot a quick one gave
// back (counted quick) and held it until its first answer.
func (h *host) quick(l *lane) bool {
	d := h.holds[l.endpoint()]
	return d > 0 && d < quickHold
}

// learn notes the lane's subscription: its endpoint. A new URL is a new
// endpoint: nothing of the old one's measures is kept (its hold is the
// new URL's, if the host knows it).
func (l *lane) learn(sub *core.Subscription) {
	if l.url != sub.URL {
		if l.url != "" {
			// The endpoint's own admission goes with it: a path fixed on
			// the same host kept the old one's open circuit, then its
			// recovery ramp (90 deliveries waited 20 s, then took 90 s).
			l.outcomes, l.breaker, l.ramp, l.pauseUntil = window{}, breaker{}, ramp{}, time.Time{}
			l.aimd, l.catchingUp, l.before, l.best = aimd{}, false, 0, peakRate{}
			l.toldAt, l.servedAt = time.Time{}, time.Time{}
		}
		l.url, l.tenant = sub.URL, sub.TenantID
	}
}

// endpoint is what the host's rules count as one endpoint: the URL, so one
// URL subscribed several times (a type each) is one handler, not several.
func (l *lane) endpoint() string {
	if l.url != "" {
		return l.url
	}
	return l.subID
}

// failing: the endpoint's circuit is not closed, or its last attempt
// (within the look-back) failed.
func (l *lane) failing(now time.Time) bool {
	if l.breaker.state != closed {
		return true
	}
	m, ok := l.outcomes.last()
	return ok && m.fail && now.UnixNano()-m.at <= int64(breakerLookback)
}

// served: the endpoint's last attempt, within the breaker's look-back,
// succeeded.
func (l *lane) served(now time.Time) bool {
	m, ok := l.outcomes.last()
	return ok && !m.fail && now.UnixNano()-m.at <= int64(breakerLookback)
}

// takesWork: neither the endpoint nor its host holds it back.
func (h *host) takesWork(l *lane, now time.Time) bool {
	return h.breaker.state == closed && !now.Before(h.pauseUntil) &&
		l.breaker.state == closed && !now.Before(l.pauseUntil) && !l.gone(now)
}

// freshCap is how many hand-offs a lane may hold. Beyond Window only
// while it takes work: what waits out a breaker or a pause waits in the
// store, so that when it recovers the newest work is what sits in memory.
func (d *Dispatcher) freshCap(h *host, l *lane, now time.Time) int {
	if !h.takesWork(l, now) {
		return d.cfg.Window
	}
	return d.cfg.FreshWindow
}

// trimFreshLocked forgets the oldest hand-offs above the lane's cap (the
// store still holds them pending; a refill brings them back in order).
func (d *Dispatcher) trimFreshLocked(h *host, l *lane, now time.Time) {
	over := len(l.fresh) - d.freshCap(h, l, now)
	if over <= 0 {
		return
	}
	for i := range over {
		delete(l.known, l.fresh[i].Delivery.ID)
		d.freshBytes -= jobSize(l.fresh[i])
	}
	l.fresh = slices.Clone(l.fresh[over:])
	l.due(now)
}

// jobSize is what a held job costs in memory: its payload and about as
// much again as the rest of it.
func jobSize(j *core.Job) int64 { return int64(len(j.Event.Payload)) + 512 }

// dropLocked forgets a lane's queued work; the store still holds it pending.
func (d *Dispatcher) dropLocked(l *lane) {
	l.epoch++
	for _, q := range [][]*core.Job{l.fresh, l.backlog} {
		for _, j := range q {
			delete(l.known, j.Delivery.ID)
		}
	}
	for i := range l.fresh {
		d.freshBytes -= jobSize(l.fresh[i])
	}
	l.fresh, l.backlog = nil, nil
}

// movedFromLocked retires a lane whose subscription moved to another host.
// The store moved its pending deliveries there, where admission must count
// them: what this lane holds would go out a second time, and a refill here
// would fetch them again and again. The new host's lane is told to look.
// Nothing of the old URL's admission is kept: the lane no longer counts
// toward the old host's share, and the new URL starts afresh.
func (d *Dispatcher) movedFromLocked(l *lane, sub *core.Subscription) {
	d.dropLocked(l)
	l.storeDue, l.recorded, l.lastStart = time.Time{}, nil, time.Time{}
	l.breaker, l.ramp, l.pauseUntil, l.aimd, l.goneAt = breaker{}, ramp{}, time.Time{}, aimd{}, time.Time{}
	l.toldAt, l.servedAt = time.Time{}, time.Time{}
	l.use, l.useAt, l.before, l.catchingUp, l.catchUpAt, l.best = 0, time.Time{}, 0, false, time.Time{}, peakRate{}
	d.moves = append(d.moves, move{host: sub.Host, subID: sub.ID})
}

type move struct{ host, subID string }

// admits is the host half of admission: its pause, its circuit (one
// probe at a time for the whole host while half-open) and its ramped cap.
func (h *host) admits(hostCap int, now time.Time) bool {
	return !now.Before(h.pauseUntil) && h.breaker.admits(now) && h.inflight < hostCap
}

// capOf is the host's concurrency cap, ramped after its circuit closed
// (rounded down: a ramp at 10 % of 10 is one attempt, not two).
func (d *Dispatcher) capOf(h *host, now time.Time) int {
	return ramped(d.cfg.HostConcurrency, h.rampFactor(now))
}

// ramped is n scaled by a ramp's factor, rounded down, at least 1.
func ramped(n int, factor float64) int {
	return max(1, int(math.Floor(float64(n)*factor)))
}

// rampFactor is the share of the host's cap its ramp admits (1: none in
// progress; health is read only while one is).
func (h *host) rampFactor(now time.Time) float64 {
	if h.ramp.level == 0 {
		return 1
	}
	return h.ramp.factor(now, h.healthy(now))
}

// rampFactor is the share of the endpoint's limit and rate its ramp admits.
func (l *lane) rampFactor(now time.Time) float64 {
	if l.ramp.level == 0 {
		return 1
	}
	return l.ramp.factor(now, l.healthy(now))
}

// healthy: few enough connections fail that the host's ramp may advance.
// Its endpoints' own failures do not hold back the others' ramp.
func (h *host) healthy(now time.Time) bool {
	t := h.outcomes.sum(now, rampLookback)
	return t.conn == 0 || float64(t.n-t.conn) >= rampHealthyRatio*float64(t.n)
}

// healthy: the endpoint's recent attempts succeed, so its ramp may advance.
func (l *lane) healthy(now time.Time) bool {
	t := l.outcomes.sum(now, rampLookback)
	return t.fail == 0 || float64(t.n-t.fail) >= rampHealthyRatio*float64(t.n)
}

// share is the host's cap split evenly among its active endpoints: each
// is sure of floor (cap / active, at least one) and may hold up to ceil
// while the slots left over still cover what the other active endpoints'
// floors claim (claimed). The ceilings alone add up past the cap: five
// endpoints that hang would hold all ten slots and a sixth, healthy one
// would wait for their timeouts. An idle host's cap goes to its one busy
// endpoint.
//
// With more active endpoints than slots, the slots the quick endpoints use
// (no more than their share of the cap), less what they hold, are kept
// back from the slow ones (attempts that hold a slot for quickHold or
// more) while quick ones have nothing in flight (reserve): slow endpoints
// free their slots seldom, and a slot a quick one gave back a moment ago
// would go to them, so that the quick ones would wait behind them for
// seconds.
type share struct{ floor, ceil, active, claimed, reserve int }

func (h *host) share(hostCap int, now time.Time) share {
	active := 0
	for _, l := range h.lanes {
		if l.active(now) {
			active++
		}
	}
	n := max(1, active)
	return share{floor: max(1, hostCap/n), ceil: max(1, (hostCap+n-1)/n), active: active}
}

// claimLocked sets sh.claimed: the slots the active endpoints' floors still
// need beyond what they hold, each floor no more than the endpoint may use
// (its max_concurrency, its ramp): a slot set aside for one that cannot
// take it would sit idle.
func (d *Dispatcher) claimLocked(h *host, sh share, hostCap int, now time.Time) share {
	sh.claimed, sh.reserve = 0, 0
	quick, quickIdle, quickHeld, quickUse := 0, 0, 0, 0.0
	for id, l := range h.lanes {
		if !l.active(now) {
			continue
		}
		sub, ok := d.cfg.Subs.Get(id)
		if ok {
			l.learn(sub)
		}
		if h.quick(l) {
			quick, quickHeld, quickUse = quick+1, quickHeld+l.inflight, quickUse+l.usage(now)
			if l.inflight == 0 {
				quickIdle++
			}
		}
		n := sh.floor
		if ok {
			n = l.limit(sub, n, now)
		}
		sh.claimed += max(0, n-l.inflight)
	}
	// A reserve out of one slot would keep the slow endpoints out entirely.
	if sh.active > hostCap && hostCap > 1 && quickIdle > 0 {
		fair := max(1, quick*hostCap/sh.active) // the quick endpoints' share of the cap
		// What they use: twice the slots they held on average lately (the
		// average lags a rise by up to its minute: once 1 for 2.2 in use)
		// and one to spare, rounded up. Kept at their share, 30 quick
		// paths using 1.2 slots left five slow ones 2 of the 10 and 8 idle.
		used := int(math.Ceil(2*quickUse/useDecay.Seconds() + 1))
		sh.reserve = min(quickIdle, max(0, min(fair, used)-quickHeld))
	}
	return sh
}

// of is how many attempts l may hold now: its floor, or its ceiling when
// starting one more leaves the others' claims free, and, for l not known
// quick, the next endpoint's slot too (see reserved): lent past their
// floors, four hanging paths' backlogs read back after a restart held 3,
// 2, 3 and 2 of 10, and the quick paths waited 9 s for their timeouts.
func (sh share) of(l *lane, h *host, hostCap int) int {
	spare := 0
	if hostCap >= spareMinCap && !h.quick(l) {
		spare = 1
	}
	if l.inflight >= sh.floor && hostCap-h.inflight-1-spare >= sh.claimed {
		return sh.ceil
	}
	return sh.floor
}

// reserved: starting l would take the slot kept back for quick endpoints,
// or the host's last free slot while l, not known quick, already holds one
// and is alone on the host or past its floor. That last slot is the next
// endpoint's to try: an endpoint alone on its host has the whole cap for
// its share, and a new one that hangs took all ten slots before its first
// answer (or after a restart, which forgets who is quick), holding a quick
// one that came a moment later for their timeouts. A floor is never cut:
// kept from any endpoint not known quick, two slow ones had 5 and 4 of 10,
// one slot idle for good. Hosts of under spareMinCap slots keep none.
func (sh share) reserved(l *lane, h *host, hostCap int) bool {
	if h.quick(l) {
		return false
	}
	free := hostCap - h.inflight - 1 // after starting l
	if sh.reserve > 0 && free < sh.reserve {
		return true
	}
	return free < 1 && hostCap >= spareMinCap && l.inflight > 0 && (sh.active <= 1 || l.inflight >= sh.floor)
}

// spareMinCap is the least host cap that keeps a slot for the next
// endpoint: out of two or three it would cost a lone slow endpoint a half
// or a third of its host.
const spareMinCap = 4

// limit is how many attempts the endpoint may hold: its fair share, or
// its max_concurrency if lower, ramped after its circuit closed.
func (l *lane) limit(sub *core.Subscription, share int, now time.Time) int {
	n := share
	if sub.MaxConcurrency > 0 {
		n = min(n, sub.MaxConcurrency)
	}
	return ramped(n, l.rampFactor(now))
}

// rate is the endpoint's rate_limit, ramped after its own or its host's
// circuit closed (0: unlimited). With no rate_limit the ramp is a share of
// what the endpoint took before the circuit opened (at least rampMinBase),
// and after it the rate doubles every rampDuration while a backlog is left
// (a catch-up budget): a ramp of concurrency alone let one attempt in
// flight send a recovered endpoint 3,000 deliveries a second of its
// backlog, and the ramp's end with nothing after it 218 a second to one
// that took 20. Doubling, it overtakes any inflow soon, so the backlog
// ends: a fixed pace (or a linear rise, from a low rate) ends only if the
// rate before was measured right, and a hanging endpoint's was its
// timeouts (under 1 a second for 50 events a second).
func (h *host) rate(l *lane, sub *core.Subscription, now time.Time) float64 {
	factor := l.rampFactor(now) * h.rampFactor(now)
	if sub.RateLimit > 0 {
		return sub.RateLimit * factor
	}
	base := max(l.before, rampMinBase)
	switch {
	case factor < 1:
		return base * factor
	case l.catchingUp:
		if l.catchUpAt.IsZero() {
			l.catchUpAt = now // the first look after the ramp ended
		}
		// Capped at a million times base (unpaced in effect): never +Inf.
		return base * math.Pow(2, min(20, now.Sub(l.catchUpAt).Seconds()/rampDuration.Seconds()))
	}
	return 0
}

// catchUp starts the lane's catch-up as its circuit or its host's closes.
func (l *lane) catchUp() { l.catchingUp, l.catchUpAt = true, time.Time{} }

// caughtUp ends the lane's catch-up once nothing of its backlog is left:
// nothing queued, and nothing the store holds due now.
func (l *lane) caughtUp(now time.Time) {
	if l.catchingUp && l.queued() == 0 && !l.refilling && (l.storeDue.IsZero() || l.storeDue.After(now)) {
		l.catchingUp = false
	}
}

// catchUp starts every lane's catch-up as the host's circuit closes.
func (h *host) catchUp() {
	for _, l := range h.lanes {
		l.catchUp()
	}
}

// noteRate keeps the endpoint's attempts a second over the last minute,
// or its recent peak if more, as its circuit (or its host's) opens.
func (l *lane) noteRate(now time.Time) {
	l.before = max(float64(l.outcomes.sum(now, breakerWindow).n)/breakerWindow.Seconds(), l.best.at(now))
}

// peakRate is the most successes a second (over observedRateWindow) seen
// lately, as of when, decaying over peakDecay.
type peakRate struct {
	rate float64
	when time.Time
	secs [int(observedRateWindow / time.Second)]tally // successes by second (n only)
}

// at is the peak decayed to now.
func (p *peakRate) at(now time.Time) float64 {
	return p.rate * math.Exp(-now.Sub(p.when).Seconds()/peakDecay.Seconds())
}

// success counts one 2xx (the outcomes' non-failures include 429s and 4xx
// given up on): the successes a second of the last observedRateWindow
// raise the peak.
func (p *peakRate) success(now time.Time) {
	sec := now.Unix()
	s := &p.secs[sec%int64(len(p.secs))]
	if s.at != sec {
		*s = tally{at: sec}
	}
	s.n++
	n := 0
	for _, o := range p.secs {
		if o.at > sec-int64(len(p.secs)) {
			n += int(o.n)
		}
	}
	p.rate, p.when = max(float64(n)/observedRateWindow.Seconds(), p.at(now)), now
}

// noteRates is noteRate for every endpoint of a host whose circuit opens.
func (h *host) noteRates(now time.Time) {
	for _, l := range h.lanes {
		l.noteRate(now)
	}
}

// admits is the endpoint half of admission: its pause, its circuit, its
// share of the host, its 429 back-off and its rate limit.
func (l *lane) admits(limit int, rate float64, now time.Time) bool {
	if now.Before(l.pauseUntil) || l.gone(now) || !l.breaker.admits(now) || l.inflight >= limit {
		return false
	}
	// Asked even with no cut in force, so the bucket owes nothing when one returns.
	return l.aimdBucket.ready(now, l.aimd.current(now, l.queued() > 1)) && l.bucket.ready(now, rate)
}

// pickLocked chooses the lane to send next: among lanes with work that
// admission allows, the one with the fewest attempts in flight, and of
// those, for a slot lent beyond the floor, one not failing. The one probe of a
// half-open host goes to an endpoint that was not failing when there is
// one: a probe to a broken path would keep the host closed to the healthy
// ones. Paused, disabled or deleted subscriptions' queued work is dropped
// from memory (it stays in the store as it should).
func (d *Dispatcher) pickLocked(h *host, hostCap int, sh share, now time.Time) (*lane, *core.Subscription) {
	probe := h.breaker.state == halfOpen
	sh = d.claimLocked(h, sh, hostCap, now)
	var best, healthy *lane
	var bestSub, healthySub *core.Subscription
	bestFailing, bestUse := false, 0.0
	for id, l := range h.lanes {
		if l.queued() == 0 {
			continue
		}
		use := l.usage(now)
		if !probe && best != nil && (l.inflight > best.inflight || l.inflight == best.inflight && !bestFailing && use >= bestUse) {
			continue
		}
		sub, ok := d.cfg.Subs.Get(id)
		if ok && sub.Host != h.name {
			d.movedFromLocked(l, sub)
			continue
		}
		if !ok || sub.State != core.SubActive {
			d.dropLocked(l)
			continue
		}
		l.learn(sub)
		if sh.reserved(l, h, hostCap) || !l.admits(l.limit(sub, sh.of(l, h, hostCap), now), h.rate(l, sub, now), now) {
			continue
		}
		// Only for a lent slot: among lanes at their floor (ties at none in
		// flight, on a host with more active endpoints than slots) a lane
		// that failed once would never be picked again, and stay failing.
		failing := l.inflight >= sh.floor && l.failing(now)
		if best == nil || l.inflight < best.inflight ||
			l.inflight == best.inflight && (bestFailing && !failing || bestFailing == failing && use < bestUse) {
			best, bestSub, bestFailing, bestUse = l, sub, failing, use
		}
		if probe && !l.failing(now) && (healthy == nil || l.inflight < healthy.inflight) {
			healthy, healthySub = l, sub
		}
	}
	if healthy != nil {
		return healthy, healthySub
	}
	return best, bestSub
}

// pause honours a Retry-After: the endpoint waits until then. A limit
// wider than one endpoint needs wider evidence, and only holds what it
// covers:
//   - another endpoint of the same tenant told within hostPauseWindow is
//     that tenant's quota at the service (Slack and gateways keep them per
//     account): every endpoint of the tenant on the host waits;
//   - an endpoint of another tenant told within it is a host-wide limit:
//     the host waits.
//
// Neither applies while an endpoint in its scope is serving (a 2xx within
// the window, after its last Retry-After): the server still takes that work, and
// holding it would be holding one customer for another's limit. Under a
// limit that is really host-wide, such an endpoint's next attempt is told
// too, and the pause follows.
func (h *host) pause(l *lane, until, now time.Time) {
	l.pauseUntil = maxTime(l.pauseUntil, until)
	l.toldAt = now
	ep := l.endpoint()
	own, wide := false, false
	for tenant, a := range h.told {
		switch {
		case now.Sub(a.at) >= hostPauseWindow:
			delete(h.told, tenant)
		case tenant == l.tenant:
			own = a.endpoint != ep
		default:
			wide = true
		}
	}
	if h.told == nil {
		h.told = map[string]ask{}
	}
	h.told[l.tenant] = ask{endpoint: ep, at: now}
	if own && !h.serving(l.tenant, now) {
		for _, o := range h.lanes {
			if o.tenant == l.tenant {
				o.pauseUntil = maxTime(o.pauseUntil, until)
			}
		}
	}
	if wide && !h.serving("", now) {
		h.pauseUntil = maxTime(h.pauseUntil, until)
	}
}

// serving: an endpoint of the host (of tenant, unless "") had a 2xx within
// hostPauseWindow, after its last Retry-After.
func (h *host) serving(tenant string, now time.Time) bool {
	for _, o := range h.lanes {
		if (tenant == "" || o.tenant == tenant) && o.servedAt.After(o.toldAt) && now.Sub(o.servedAt) < hostPauseWindow {
			return true
		}
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// mostEndpointsFailing is the host's second kind of evidence, for a
// server whose connections succeed but whose every path fails (it hangs,
// or a gateway answers 502 for all): at least hostMinFailing of its active
// endpoints failing, more than half of them, none of the others serving
// (its last attempt, within the breaker's look-back, succeeded: then the
// server works, and holding that endpoint for the others' failures is what
// per-endpoint circuits exist to prevent), and most of the host's attempts
// failing over the look-back. An endpoint serving counts however long it
// has been idle within the look-back, forgotten or not: one that sends
// every few minutes was held by a circuit three paths of another tenant
// opened while it was not counted. Its lanes are counted no more than once a
// second: that walks every one.
func (h *host) mostEndpointsFailing(now time.Time) bool {
	if !h.outcomes.tripping(now, failures) || now.Sub(h.judgedAt) < time.Second {
		return false
	}
	h.judgedAt = now
	seen := map[string]bool{} // endpoint → failing
	serving := map[string]bool{}
	present := map[string]bool{}
	for _, l := range h.lanes {
		if _, ok := l.outcomes.last(); ok { // else what the host remembers of it stands
			present[l.endpoint()] = true
		}
		bad := l.failing(now)
		works := !bad && l.served(now)
		if bad || works || l.active(now) {
			seen[l.endpoint()] = seen[l.endpoint()] || bad
		}
		if works {
			serving[l.endpoint()] = true
		}
	}
	for ep, at := range h.served {
		switch {
		case now.Sub(at) > breakerLookback:
			delete(h.served, ep)
		case !present[ep]:
			seen[ep], serving[ep] = false, true
		}
	}
	failing, active, working := 0, len(seen), 0
	for ep, bad := range seen {
		if bad {
			failing++
		} else if serving[ep] {
			working++
		}
	}
	return failing >= hostMinFailing && 2*failing > active && working == 0
}

// settleEndpoints runs when a probe closes a circuit most endpoints'
// failures opened. A probe that was failing too says the whole host is
// back: what its endpoints saw was the host's, so their counts start
// afresh. A probe that was healthy says the host works and the failing
// endpoints fail on their own: their own circuits open, so they neither
// reopen the host's nor keep its healthy endpoints waiting.
func (h *host) settleEndpoints(probe *lane, probeWasFailing bool, now time.Time) {
	for _, l := range h.lanes {
		switch {
		case probeWasFailing:
			l.outcomes = window{}
		case l != probe && l.breaker.state == closed && l.failing(now):
			l.noteRate(now)
			l.breaker.trip(now)
		}
	}
}

// nextWake is the earliest moment something on h could become possible
// without another event: a lane's store work falls due, a circuit lets a
// probe through, a pause ends, a token arrives for a lane that could
// otherwise start, an idle lane or host may be forgotten. Zero: nothing to
// wait for. A token is never waited for on a lane that something else
// holds (its host's cap, its share, a circuit, a pause): an attempt's end
// or that hold's own wake-up pumps the host, and a token computed from a
// bucket admission has not looked at since would wake it for nothing.
func (d *Dispatcher) nextWake(h *host, hostCap int, sh share, now time.Time) time.Time {
	var next time.Time
	earliest := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	hostFree := h.inflight < hostCap && !now.Before(h.pauseUntil) &&
		(h.breaker.state == closed || (h.breaker.state == halfOpen && !h.breaker.probing))
	for id, l := range h.lanes {
		earliest(d.refillAt(l))
		if l.breaker.state == open {
			earliest(l.breaker.retryAt)
		}
		earliest(l.pauseUntil)
		earliest(l.goneUntil())
		if l.queued() == 0 {
			if l.inflight == 0 {
				earliest(l.rememberUntil()) // then forgetIdleLocked may let it go
			}
			continue
		}
		if !hostFree || l.held(now) {
			continue
		}
		if sub, ok := d.cfg.Subs.Get(id); !ok || l.inflight >= l.limit(sub, sh.ceil, now) {
			continue
		}
		earliest(l.bucket.nextToken(now))
		if l.aimd.rate > 0 {
			earliest(l.aimdBucket.nextToken(now))
		}
	}
	if h.breaker.state == open {
		earliest(h.breaker.retryAt)
	}
	earliest(h.pauseUntil)
	if len(h.lanes) == 0 {
		earliest(h.rememberUntil())
	}
	return next
}

// forgetIdleLocked drops lanes and hosts with nothing in memory, nothing
// scheduled and nothing to remember, so memory follows active destinations.
func (d *Dispatcher) forgetIdleLocked(h *host, now time.Time) {
	for id, l := range h.lanes {
		if l.queued() > 0 || l.inflight > 0 || len(l.known) > 0 || l.refilling || !l.storeDue.IsZero() ||
			now.Before(l.rememberUntil()) {
			continue
		}
		if m, ok := l.outcomes.last(); ok && m.fail {
			delete(h.served, l.endpoint()) // an older success no longer says it works
		} else if ok {
			h.remember(l.endpoint(), time.Unix(0, m.at), now)
		}
		delete(h.lanes, id)
	}
	if len(h.lanes) == 0 && h.inflight == 0 && !now.Before(h.rememberUntil()) {
		delete(d.hosts, h.name)
	}
}

// remember notes that a forgotten endpoint's last attempt succeeded at at.
// What has left the look-back goes whenever the record has doubled since.
func (h *host) remember(endpoint string, at, now time.Time) {
	if h.served == nil {
		h.served = map[string]time.Time{}
	}
	h.served[endpoint] = at
	if len(h.served) < h.servedPrune {
		return
	}
	for ep, t := range h.served {
		if now.Sub(t) > breakerLookback {
			delete(h.served, ep)
		}
	}
	h.servedPrune = max(64, 2*len(h.served))
}

// rememberUntil is when an idle lane's admission state stops mattering: its
// last send leaves the rate window (a fresh bucket would let the next send
// exceed the rate) and the fair share's look-back, its open circuit would
// let a probe through, its pause ends, its 429 cut lifts, its ramp has not
// been looked at for a ramp's length. An endpoint with no work left then
// starts afresh with its next delivery.
func (l *lane) rememberUntil() time.Time {
	until := l.bucket.quietAt()
	later := func(t time.Time) {
		if t.After(until) {
			until = t
		}
	}
	if !l.lastStart.IsZero() {
		later(l.lastStart.Add(activeWindow))
	}
	if l.breaker.state == open {
		later(l.breaker.retryAt)
	}
	later(l.pauseUntil)
	later(l.goneUntil())
	later(l.aimd.liftAt())
	later(l.ramp.staleAt())
	return until
}

// rememberUntil is when an idle host's own state stops mattering: its
// newest served record counts too, or a host forgotten with its one idle
// endpoint would come back without the evidence that it works.
func (h *host) rememberUntil() time.Time {
	until := h.pauseUntil
	for _, at := range h.served {
		if t := at.Add(breakerLookback); t.After(until) {
			until = t
		}
	}
	if h.breaker.state == open && h.breaker.retryAt.After(until) {
		until = h.breaker.retryAt
	}
	if t := h.ramp.staleAt(); t.After(until) {
		until = t
	}
	return until
}
