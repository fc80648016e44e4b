package dispatch

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

// paced drives a bucket the way the dispatcher does, with every wake-up
// late by up to lateness (timers and scheduling), and returns the send times.
func paced(rate float64, lateness time.Duration, gaps bool, d time.Duration) []time.Time {
	var k bucket
	rng := rand.New(rand.NewPCG(1, 2))
	start := time.Unix(1_000_000, 0)
	var sent []time.Time
	for now := start; now.Before(start.Add(d)); {
		if k.ready(now, rate) {
			k.take(now)
			sent = append(sent, now)
			continue
		}
		now = k.nextToken(now).Add(time.Duration(rng.Int64N(int64(lateness) + 1)))
		if gaps && rng.IntN(500) == 0 {
			now = now.Add(time.Duration(rng.Int64N(int64(2 * time.Second)))) // idle, then catch up
		}
	}
	return sent
}

// maxInAnySecond counts the most sends that started within one second of
// each other (every window [t, t+1s) starting at a send).
func maxInAnySecond(sent []time.Time) int {
	most := 0
	for i, t := range sent {
		j := sort.Search(len(sent), func(j int) bool { return !sent[j].Before(t.Add(time.Second)) })
		most = max(most, j-i)
	}
	return most
}

// The rate is a ceiling in every second, and with late wake-ups it is
// still reached: the burst-one bucket this replaced drained at 40 % of a
// 2000/s limit when each wake-up came 0.7 ms late.
func TestBucketReachesItsRateAndNeverExceedsItInAnySecond(t *testing.T) {
	for _, c := range []struct {
		rate     float64
		lateness time.Duration
		gaps     bool
	}{
		{200, 2 * time.Millisecond, false},
		{2000, 1400 * time.Microsecond, false}, // 0.7 ms late on average
		{5000, time.Millisecond, false},
		{2000, time.Millisecond, true},
		{0.5, 10 * time.Millisecond, false},
	} {
		const d = 20 * time.Second
		sent := paced(c.rate, c.lateness, c.gaps, d)
		if most := maxInAnySecond(sent); float64(most) > max(1, c.rate) {
			t.Errorf("rate %v, lateness ≤%v, gaps %v: %d sends within one second", c.rate, c.lateness, c.gaps, most)
		}
		if c.gaps {
			continue
		}
		if want := 0.95 * c.rate * d.Seconds(); float64(len(sent)) < want {
			t.Errorf("rate %v, lateness ≤%v: %d sends in %v, want at least %.0f (95 %%)", c.rate, c.lateness, len(sent), d, want)
		}
	}
}

// The count of a second's sends follows the rate up (a ramp, a raised
// rate_limit): the record of sends grows and still counts exactly.
func TestBucketFollowsARisingRate(t *testing.T) {
	var k bucket
	now := time.Unix(1_000_000, 0)
	var sent []time.Time
	for i := range 30 {
		rate := float64(10 + 10*i) // 10/s up to 300/s, a second each
		for end := now.Add(time.Second); now.Before(end); {
			if k.ready(now, rate) {
				k.take(now)
				sent = append(sent, now)
				continue
			}
			now = k.nextToken(now)
		}
	}
	if most := maxInAnySecond(sent); most > 300 {
		t.Errorf("%d sends within one second, the highest rate was 300/s", most)
	}
	if len(sent) < 4400 { // 10+20+…+300 = 4650; a little is lost at each step
		t.Errorf("%d sends, want about 4650", len(sent))
	}
}

// With no limit in force the bucket owes nothing: a limit lifted for a
// while (an edited rate_limit, a 429 cut that ended) and set again starts
// fresh, instead of waiting out the sends made meanwhile.
func TestBucketOwesNothingForUnlimitedSends(t *testing.T) {
	var k bucket
	now := time.Unix(1_000_000, 0)
	for range 3 {
		if k.ready(now, 10) {
			k.take(now)
		}
	}
	for range 100_000 { // 100 s at 1000/s with no limit
		now = now.Add(time.Millisecond)
		if !k.ready(now, 0) {
			t.Fatal("not ready with no limit in force")
		}
		k.take(now)
	}
	now = now.Add(time.Millisecond)
	if !k.ready(now, 100) {
		t.Fatalf("limit set again: next send at +%v, want now", k.nextToken(now).Sub(now))
	}
}

// An idle lane that sent within the rate window is kept, bucket and all,
// and let go once the window has passed: forgetting it at once gave a
// rate_limit of 1 four sends in one second.
func TestIdleLaneKeepsItsBucketForTheWindow(t *testing.T) {
	b := setup(t)
	d := New(Config{Store: b.store, Subs: b.subs})
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	h, l := d.laneLocked("limited.example:443", "sub_1")
	l.bucket.ready(now, 1)
	l.bucket.take(now)
	d.forgetIdleLocked(h, now.Add(rateWindow/2))
	if d.hosts[h.name] == nil || h.lanes["sub_1"] != l {
		t.Fatal("a lane that sent half a window ago was forgotten with its bucket")
	}
	if l.bucket.ready(now.Add(rateWindow/2), 1) {
		t.Error("a second send within the window of a rate of 1 is allowed")
	}
	d.forgetIdleLocked(h, now.Add(rateWindow))
	if d.hosts[h.name] != nil {
		t.Error("the idle lane is kept after its window passed")
	}
}

// The breaker's look-back: 20 attempts in a minute judge by rate; slower
// attempts widen it to the last 20 while they all fall within ten minutes,
// so an endpoint held to one slot that times out every 10 s still trips
// (six attempts a minute never reach the volume in one).
func TestWindowWidensForSlowAttempts(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	for _, c := range []struct {
		name     string
		every    time.Duration
		n        int
		failEach int // every failEach-th attempt fails
		trips    bool
	}{
		{"fast, all failing", 100 * time.Millisecond, 20, 1, true},
		{"fast, one in two failing", 100 * time.Millisecond, 40, 2, true},
		{"fast, one in three failing", 100 * time.Millisecond, 40, 3, false},
		{"fast, under the volume", 100 * time.Millisecond, 19, 1, false},
		{"a timeout every 10 s", 10 * time.Second, 20, 1, true},
		{"a timeout every 10 s, not yet 20", 10 * time.Second, 19, 1, false},
		{"a failure every 40 s: 20 span over ten minutes", 40 * time.Second, 30, 1, false},
	} {
		var w window
		now := start
		for i := range c.n {
			w.add(now, i%c.failEach == 0, false)
			now = now.Add(c.every)
		}
		now = now.Add(-c.every) // judged at the last outcome
		if got := w.tripping(now, failures); got != c.trips {
			t.Errorf("%s: tripping %v, want %v", c.name, got, c.trips)
		}
	}
}

// A Retry-After pauses the endpoint that was told. A second endpoint of
// its tenant told within a minute pauses the tenant's endpoints on the
// host, one of another tenant the host; neither while an endpoint in that
// scope is serving.
func TestRetryAfterPausesWhatTheEvidenceCovers(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	type lanes map[string]*lane
	build := func() (*host, lanes) {
		h := &host{name: "discord.example:443", lanes: map[string]*lane{}}
		ls := lanes{}
		for _, n := range []string{"a1", "a2", "a3", "b1", "c1"} {
			l := &lane{subID: "sub_" + n, url: "https://discord.example/" + n, tenant: map[byte]string{'a': "acme", 'b': "beta", 'c': "cargo"}[n[0]]}
			h.lanes[l.subID], ls[n] = l, l
		}
		return h, ls
	}
	until := t0.Add(time.Hour)
	for _, c := range []struct {
		name string
		run  func(h *host, ls lanes)
		// want paused: the lanes held at t0+2s, and the host
		lanesHeld []string
		hostHeld  bool
	}{
		{"one endpoint told twice", func(h *host, ls lanes) {
			h.pause(ls["a1"], until, t0)
			h.pause(ls["a1"], until, t0.Add(time.Second))
		}, []string{"a1"}, false},
		{"two of one tenant: its endpoints wait, no other's", func(h *host, ls lanes) {
			h.pause(ls["a1"], until, t0)
			h.pause(ls["a2"], until, t0.Add(time.Second))
		}, []string{"a1", "a2", "a3"}, false},
		{"two of one tenant over a minute apart", func(h *host, ls lanes) {
			h.pause(ls["a1"], t0.Add(-time.Minute+2*time.Second), t0.Add(-time.Minute))
			h.pause(ls["a2"], until, t0.Add(time.Second))
		}, []string{"a2"}, false},
		{"two of one tenant beside its serving third", func(h *host, ls lanes) {
			ls["a3"].servedAt = t0.Add(-10 * time.Millisecond)
			h.pause(ls["a1"], until, t0)
			h.pause(ls["a2"], until, t0.Add(time.Second))
		}, []string{"a1", "a2"}, false},
		{"two tenants, nothing serving: the host waits", func(h *host, ls lanes) {
			ls["c1"].servedAt = t0.Add(-2 * time.Minute) // long ago
			h.pause(ls["a1"], until, t0)
			h.pause(ls["b1"], until, t0.Add(5*time.Millisecond))
		}, []string{"a1", "b1"}, true},
		{"two tenants just after a third served", func(h *host, ls lanes) {
			ls["c1"].servedAt = t0.Add(-10 * time.Millisecond)
			h.pause(ls["a1"], until, t0)
			h.pause(ls["b1"], until, t0.Add(5*time.Millisecond))
		}, []string{"a1", "b1"}, false},
		{"…until the third is told too", func(h *host, ls lanes) {
			ls["c1"].servedAt = t0.Add(-10 * time.Millisecond)
			h.pause(ls["a1"], until, t0)
			h.pause(ls["b1"], until, t0.Add(5*time.Millisecond))
			h.pause(ls["c1"], until, t0.Add(time.Second))
		}, []string{"a1", "b1", "c1"}, true},
		{"a told endpoint served since counts as serving", func(h *host, ls lanes) {
			h.pause(ls["a1"], t0.Add(time.Second), t0)
			ls["a1"].servedAt = t0.Add(time.Second)
			h.pause(ls["b1"], until, t0.Add(1500*time.Millisecond))
		}, []string{"b1"}, false},
	} {
		h, ls := build()
		c.run(h, ls)
		at := t0.Add(2 * time.Second)
		var held []string
		for _, n := range []string{"a1", "a2", "a3", "b1", "c1"} {
			if at.Before(ls[n].pauseUntil) {
				held = append(held, n)
			}
		}
		if !slices.Equal(held, c.lanesHeld) || at.Before(h.pauseUntil) != c.hostHeld {
			t.Errorf("%s: endpoints held %v, host held %v; want %v and %v", c.name, held, at.Before(h.pauseUntil), c.lanesHeld, c.hostHeld)
		}
	}
}

// Most endpoints failing at once, none of the others being served, is
// host-wide evidence; a few failing among many healthy ones is not, however
// often they fail, and nor is any number beside one the host serves.
func TestMostEndpointsFailing(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	build := func(failing, healthy, quiet int) *host {
		h := &host{name: "gw.example:443", lanes: map[string]*lane{}}
		for i := range failing + healthy + quiet {
			l := &lane{subID: fmt.Sprintf("sub_%d", i), lastStart: now}
			h.lanes[l.subID] = l
			if i >= failing+healthy {
				continue // active, no attempt in the look-back
			}
			fail := i < failing
			for k := range 7 { // three endpoints' worth reach the volume
				at := now.Add(time.Duration(k-7) * time.Second)
				l.outcomes.add(at, fail, false)
				h.outcomes.add(at, fail, false)
			}
		}
		return h
	}
	for _, c := range []struct {
		failing, healthy, quiet int
		want                    bool
	}{
		{3, 0, 0, true},
		{3, 0, 2, true},  // the others sent nothing lately: no evidence the host serves
		{3, 1, 0, false}, // one endpoint succeeding: the host serves
		{2, 0, 0, false}, // fewer than three endpoints
		{3, 0, 3, false}, // not more than half
		{10, 90, 0, false},
		{60, 40, 0, false},
		{60, 0, 40, true},
	} {
		if got := build(c.failing, c.healthy, c.quiet).mostEndpointsFailing(now); got != c.want {
			t.Errorf("%d failing, %d succeeding, %d quiet: %v, want %v", c.failing, c.healthy, c.quiet, got, c.want)
		}
	}
}

// The ramp's peak counts successes only: an endpoint answering 90 of 100
// attempts a second with 429 took 1 a second (the outcomes' non-failures,
// 429s among them, gave it 10, a ramp ten times what it took).
func TestPeakCountsSuccessesOnly(t *testing.T) {
	l := &lane{}
	now := time.Unix(1_700_000_000, 0)
	for i := range 100 {
		at := now.Add(time.Duration(i) * 100 * time.Millisecond)
		l.outcomes.add(at, false, false) // a 429 or a 2xx: neither fails
		if i%10 == 0 {
			l.best.success(at)
		}
	}
	end := now.Add(10 * time.Second)
	if got := l.best.at(end); got < 0.95 || got > 1.0 {
		t.Errorf("peak %.2f successes a second, want 1", got)
	}
	l.noteRate(end)
	if want := 100 / breakerWindow.Seconds(); l.before < want-0.01 || l.before > want+0.01 {
		t.Errorf("rate before %.2f, want its attempts a second over the minute, %.2f (more than the peak)", l.before, want)
	}
}
