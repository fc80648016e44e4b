//go:build !race

package dispatch

// Simulations of what a hostile review of the two-key admission found:
// each asserts a promise of docs/architecture.md "Admission: two keys" and
// failed on the first two-key build.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"hookd/internal/core"
	"hookd/internal/send"
)

// inflightOver is the mean and peak number of attempts of sub in flight
// on ep between from and to.
func inflightOver(ep *endpoint, subID string, from, to time.Time) (mean float64, peak int) {
	var busy time.Duration
	at := ep.snapshot()
	for _, a := range at {
		if a.sub != subID || !a.end.After(from) || !a.start.Before(to) {
			continue
		}
		s, e := a.start, a.end
		if s.Before(from) {
			s = from
		}
		if e.After(to) {
			e = to
		}
		busy += e.Sub(s)
	}
	for t := from; t.Before(to); t = t.Add(100 * time.Millisecond) {
		n := 0
		for _, a := range at {
			if a.sub == subID && !a.start.After(t) && a.end.After(t) {
				n++
			}
		}
		peak = max(peak, n)
	}
	return busy.Seconds() / to.Sub(from).Seconds(), peak
}

// blockedShare runs one busy healthy path (2 s answers, 10 events/s: it
// could use the whole cap of 10) on a host beside paths that answer with
// bad (one event a second each). It returns the healthy path's mean and
// peak in flight from minute 3 to minute 8, when the bad paths are held by
// their own circuit or pause and send nothing but a probe now and then.
func blockedShare(t *testing.T, bad []behaviour) (mean float64, peak int, st Stats) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, busy := s.path(gateway, "busy", "sim.busy", ok(2*time.Second))
		for i, b := range bad {
			s.path(gateway, fmt.Sprintf("b%d", i), fmt.Sprintf("sim.b%d", i), b)
		}
		s.start()
		start := time.Now()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.busy", 100*time.Millisecond, 8*time.Minute)
		for i := range bad {
			s.traffic(&wg, fmt.Sprintf("sim.b%d", i), time.Second, 8*time.Minute)
		}
		time.Sleep(3 * time.Minute)
		st = s.d.Stats()
		wg.Wait()
		mean, peak = inflightOver(ep, busy.ID, start.Add(3*time.Minute), start.Add(8*time.Minute))
		s.stop()
	})
	return mean, peak, st
}

// Endpoints held by their own open circuit or Retry-After are not active
// for the fair share, though new work keeps queueing for them: counted,
// they held a healthy neighbour to a fraction of the cap while the rest sat
// idle. Two failing paths stay under the host circuit's three, so only the
// share is at work here.
func TestSimHeldEndpointsLeaveTheirShareToOthers(t *testing.T) {
	five00 := func(time.Time, int, string) reply { return reply{status: 500, latency: 5 * time.Millisecond} }
	wait := func(time.Time, int, string) reply {
		return reply{status: 503, retryAfter: time.Hour, latency: 5 * time.Millisecond}
	}
	aloneMean, alonePeak, _ := blockedShare(t, nil)
	t.Logf("healthy busy path alone: mean %.2f, peak %d in flight", aloneMean, alonePeak)
	for _, c := range []struct {
		name string
		bad  []behaviour
	}{
		{"two paths answering 500 (own circuits open)", []behaviour{five00, five00}},
		{"one path told Retry-After: 3600 (paused)", []behaviour{wait}},
	} {
		mean, peak, st := blockedShare(t, c.bad)
		t.Logf("beside %s: mean %.2f, peak %d in flight (at 3 min: %d endpoint circuits open, %d endpoints paused, host circuits open %d)",
			c.name, mean, peak, st.EndpointBreakersOpen, st.EndpointsPaused, st.BreakersOpen)
		if mean < aloneMean*0.8 {
			t.Errorf("beside %s the healthy path used %.2f slots on average, %.2f alone: held-back paths that send nothing kept part of its share", c.name, mean, aloneMean)
		}
	}
}

// Nine paths of ten failing open the host circuit (most of its endpoints
// failing). Its probe goes to the path that was not failing, whose
// success shows the host works: the failing paths' own circuits open and
// the healthy one is free. When the probe went to any path, the host
// stayed open for as long as the nine failed.
func TestSimHostOpenedByMostEndpointsFreesTheHealthyOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		gep, good := s.path(gateway, "good", "sim.good", ok(20*time.Millisecond))
		for i := range 9 {
			s.path(gateway, fmt.Sprintf("b%d", i), fmt.Sprintf("sim.b%d", i),
				func(time.Time, int, string) reply { return reply{status: 500, latency: 5 * time.Millisecond} })
		}
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.good", time.Second, time.Hour)
		for i := range 9 {
			s.traffic(&wg, fmt.Sprintf("sim.b%d", i), time.Second, time.Hour)
		}
		stop := make(chan struct{})
		held := heldSeconds(s, good, stop)
		time.Sleep(30 * time.Minute)
		st := s.d.Stats()
		wg.Wait()
		close(stop)
		n := <-held
		lags := s.lags(gep)
		s.stop()
		t.Logf("after 30 min: %d endpoint circuits open, host circuits open %d", st.EndpointBreakersOpen, st.BreakersOpen)
		t.Logf("healthy path: held by its host %d s of 3600; %d of 3600 delivered within the hour", n, len(lags))
		if n > 600 {
			t.Errorf("the healthy path was held by its host's circuit for %d s of an hour", n)
		}
	})
}

// stubborn wraps the fleet: attempts on url fail as send reports a
// connection reset after the request went out (the endpoint's failure).
type stubborn struct {
	fleet
	url string
}

func (f stubborn) Send(ctx context.Context, sub *core.Subscription, job *core.Job, now time.Time) send.Outcome {
	if sub.URL != f.url {
		return f.fleet.Send(ctx, sub, job, now)
	}
	out := f.fleet.Send(ctx, sub, job, now)
	return send.Outcome{Class: send.Retry, Err: "connection reset", StartedAt: out.StartedAt, Duration: out.Duration}
}

// heldSeconds samples sub's health every second until stop and counts the
// seconds something other than its own circuit held it back (its host's
// circuit or a host pause).
func heldSeconds(s *sim, sub core.Subscription, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		held := 0
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- held
				return
			case <-tick.C:
			}
			h := s.d.Health(sub.Host, sub.ID)
			if h.HostCircuit != "closed" || (!h.PausedUntil.IsZero() && h.EndpointCircuit == "closed") {
				held++
			}
		}
	}()
	return out
}

// Two subscriptions on one URL are one endpoint (DESIGN.md: "the endpoint
// (a subscription's URL)"): one URL answering 503 Retry-After for its two
// subscriptions is one endpoint told to wait, and its host is not paused.
func TestSimOneURLToldToWaitTwiceIsOneEndpoint(t *testing.T) {
	for _, subsOnURL := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d subscriptions on the URL", subsOnURL), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t)
				maint := func(time.Time, int, string) reply {
					return reply{status: 503, retryAfter: time.Hour, latency: 5 * time.Millisecond}
				}
				if subsOnURL == 1 {
					s.path(gateway, "maint", "sim.m0", maint, types("sim.m0", "sim.m1"))
				} else {
					s.path(gateway, "maint", "sim.m0", maint)
					s.path(gateway, "maint", "sim.m1", maint)
				}
				gep, good := s.path(gateway, "good", "sim.good", ok(20*time.Millisecond))
				s.start()
				var wg sync.WaitGroup
				s.traffic(&wg, "sim.good", time.Second, 10*time.Minute)
				stop := make(chan struct{})
				held := heldSeconds(s, good, stop)
				time.Sleep(10 * time.Second)
				s.post("sim.m0", "")
				time.Sleep(10 * time.Second)
				s.post("sim.m1", "")
				wg.Wait()
				time.Sleep(time.Minute)
				close(stop)
				n := <-held
				lags := s.lags(gep)
				hs := s.d.Stats()
				s.stop()
				t.Logf("healthy path: held %d s of 660, %d of 600 delivered, p99 lag %s; hosts paused %d",
					n, len(lags), pct(lags, 0.99), hs.HostsPaused)
				if n > 0 {
					t.Errorf("one URL told to wait (on %d subscriptions) held a healthy path on its host for %d s", subsOnURL, n)
				}
			})
		})
	}
}

// One broken URL subscribed three times (one subscription per event type,
// a common set-up) is one failing endpoint, not the three the host circuit
// needs: it does not open over two healthy paths.
func TestSimOneBrokenURLWithThreeSubscriptionsIsOneEndpoint(t *testing.T) {
	for _, subsOnURL := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d subscriptions on the URL", subsOnURL), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t)
				bad := func(time.Time, int, string) reply { return reply{status: 502, latency: 5 * time.Millisecond} }
				if subsOnURL == 1 {
					s.path(gateway, "bad", "sim.x0", bad, types("sim.x0", "sim.x1", "sim.x2"))
				} else {
					for i := range 3 {
						s.path(gateway, "bad", fmt.Sprintf("sim.x%d", i), bad)
					}
				}
				g1ep, g1 := s.path(gateway, "g1", "sim.g1", ok(20*time.Millisecond))
				s.path(gateway, "g2", "sim.g2", ok(20*time.Millisecond))
				s.start()
				var wg sync.WaitGroup
				for _, typ := range []string{"sim.x0", "sim.x1", "sim.x2", "sim.g1", "sim.g2"} {
					s.traffic(&wg, typ, time.Second, 10*time.Minute)
				}
				stop := make(chan struct{})
				held := heldSeconds(s, g1, stop)
				wg.Wait()
				time.Sleep(time.Minute)
				close(stop)
				n := <-held
				lags := s.lags(g1ep)
				s.stop()
				t.Logf("healthy path: held by the host %d s of 660, %d of 600 delivered, p99 lag %s, max %s",
					n, len(lags), pct(lags, 0.99), pct(lags, 1))
				if n > 0 {
					t.Errorf("one broken URL (%d subscriptions) opened the host circuit over two healthy paths for %d s", subsOnURL, n)
				}
			})
		})
	}
}

// laneState is what memory holds of one subscription's lane, read under mu.
func (s *sim) laneState(sub core.Subscription) (present bool, breaker circuit, ramp, aimdRate float64) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	h := s.d.hosts[sub.Host]
	if h == nil {
		return false, closed, 0, 0
	}
	l := h.lanes[sub.ID]
	if l == nil {
		return false, closed, 0, 0
	}
	return true, l.breaker.state, l.ramp.level, l.aimd.rate
}

// Memory follows active destinations: a lane whose circuit is open, whose
// ramp began, or which had a 429, and which then goes idle, is forgotten
// once that state stops mattering (its probe would be due, its ramp unseen
// for a ramp's length, its cut lifted). Kept for ever, each also cost a
// DeliveryExpire query at every resync.
func TestSimIdleLanesAreForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		start := time.Now()
		// dead: answers 500 for good; its subscription is paused by the
		// operator once its circuit is open.
		_, dead := s.path("dead.example:443", "", "sim.dead",
			func(time.Time, int, string) reply { return reply{status: 500, latency: 5 * time.Millisecond} })
		// back: 500 for two minutes, then fine; its traffic stops just
		// after its circuit closes (inside the five-minute ramp).
		_, back := s.path("back.example:443", "", "sim.back", func(now time.Time, _ int, _ string) reply {
			if now.Sub(start) < 2*time.Minute {
				return reply{status: 500, latency: 5 * time.Millisecond}
			}
			return reply{status: 200, latency: 5 * time.Millisecond}
		})
		// once: 200s, but its tenth attempt gets a 429 (no Retry-After);
		// the retry goes 5 s later and is delivered, then nothing more.
		_, once := s.path("once.example:443", "", "sim.once", func(_ time.Time, n int, _ string) reply {
			if n == 9 {
				return reply{status: 429, latency: 5 * time.Millisecond}
			}
			return reply{status: 200, latency: 5 * time.Millisecond}
		})
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.dead", 500*time.Millisecond, time.Minute)
		s.traffic(&wg, "sim.back", 500*time.Millisecond, 3*time.Minute)
		s.traffic(&wg, "sim.once", time.Second, 10*time.Second)
		wg.Wait()
		paused := dead
		paused.State = core.SubPaused
		paused.UpdatedAt = time.Now().UTC()
		s.subs.Put(paused)
		if err := s.store.SubscriptionUpdate(context.Background(), paused); err != nil {
			t.Fatal(err)
		}
		time.Sleep(6 * time.Hour)
		st := s.d.Stats()
		for _, c := range []struct {
			name string
			sub  core.Subscription
		}{{"dead (circuit open, subscription paused)", dead}, {"back (ramping when it went idle)", back}, {"once (one 429)", once}} {
			present, b, r, a := s.laneState(c.sub)
			t.Logf("%s, six hours idle: in memory %v, circuit %s, ramp level %.2f, aimd rate %.2f; states %v",
				c.name, present, b, r, a, s.states(c.sub))
			if present {
				t.Errorf("%s: its lane is still in memory after six idle hours", c.name)
			}
		}
		t.Logf("stats after six idle hours: %+v", st)
		s.stop()
	})
}

// Retired endpoints whose circuits were open are not counted as failing
// endpoints of their host hours later: kept, three of them plus any one
// failing now met the host circuit's "at least 3 failing at once" and
// opened it over a healthy endpoint.
func TestSimRetiredOpenEndpointsDoNotOpenTheirHost(t *testing.T) {
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale=%v", stale), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t)
				const host = "api.customer.example:443"
				five00 := func(time.Time, int, string) reply { return reply{status: 500, latency: 5 * time.Millisecond} }
				var deads []core.Subscription
				if stale {
					for i := range 3 {
						_, d := s.path(host, fmt.Sprintf("old%d", i), fmt.Sprintf("sim.old%d", i), five00)
						deads = append(deads, d)
					}
				}
				gep, good := s.path(host, "good", "sim.good", ok(20*time.Millisecond))
				s.path(host, "flaky", "sim.flaky", five00)
				s.start()
				var wg sync.WaitGroup
				if stale {
					// The old paths fail beside a busy healthy one (so under
					// half the host's attempts fail): each opens its own circuit.
					s.path(host, "busy", "sim.busy", ok(20*time.Millisecond))
					s.traffic(&wg, "sim.busy", 100*time.Millisecond, time.Minute)
				}
				for i := range deads {
					s.traffic(&wg, fmt.Sprintf("sim.old%d", i), 500*time.Millisecond, time.Minute)
				}
				wg.Wait()
				mid := s.d.Stats()
				t.Logf("after the old paths' minute: %d endpoint circuits open, host circuits open %d", mid.EndpointBreakersOpen, mid.BreakersOpen)
				for _, d := range deads { // retired by the operator
					d.State, d.UpdatedAt = core.SubPaused, time.Now().UTC()
					s.subs.Put(d)
					if err := s.store.SubscriptionUpdate(context.Background(), d); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(2 * time.Hour)
				before := s.d.Stats()
				s.traffic(&wg, "sim.good", time.Second, 10*time.Minute)
				s.traffic(&wg, "sim.flaky", time.Second, 10*time.Minute)
				stop := make(chan struct{})
				held := heldSeconds(s, good, stop)
				wg.Wait()
				time.Sleep(time.Minute)
				close(stop)
				n := <-held
				lags := s.lags(gep)
				s.stop()
				t.Logf("two hours after the old paths were retired: %d lanes, %d endpoint circuits open", before.Lanes, before.EndpointBreakersOpen)
				t.Logf("healthy path beside one failing path: held by its host %d s of 660; %d of 600 delivered, max lag %s", n, len(lags), pct(lags, 1))
				if n > 0 {
					t.Errorf("one failing endpoint beside a healthy one opened their host's circuit (%d s held) with %d stale lanes counted as failing", n, len(deads))
				}
			})
		})
	}
}

// busyWakes runs one endpoint for an hour at one event a second and
// samples every 0.997 s (fake) how far ahead its host's next wake-up is.
// It returns the share of samples with a wake-up due within 50 ms (one
// token at rate_limit 20), the attempts made, and the real time taken.
func busyWakes(t *testing.T, behave func(start time.Time) behaviour, edit func(*core.Subscription)) (soon float64, attempts int, took time.Duration) {
	began := time.Now()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, sub := s.endpoint("limited", behave(time.Now()), edit)
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.limited", time.Second, time.Hour)
		n, near := 0, 0
		for end := time.Now().Add(time.Hour); time.Now().Before(end); {
			time.Sleep(997 * time.Millisecond)
			s.d.mu.Lock()
			if h := s.d.hosts[sub.Host]; h != nil {
				n++
				if !h.wakeAt.IsZero() && h.wakeAt.Sub(time.Now()) <= 50*time.Millisecond {
					near++
				}
			}
			s.d.mu.Unlock()
		}
		wg.Wait()
		attempts = len(ep.snapshot())
		s.stop()
		if n > 0 {
			soon = float64(near) / float64(n)
		}
	})
	return soon, attempts, time.Since(began)
}

// A rate-limited lane that cannot start (its circuit is open, or it holds
// its limit) does not wake its host for its next token: its bucket is
// refilled only when admission reaches it, so a token computed from it is
// stale, and waking for it woke the host every (1-tokens)/rate (or every
// nanosecond, a float ulp short of a token) for as long as the lane was
// held. The endpoint gets one event a second, far under its limit of 20.
func TestSimHeldRateLimitedLaneDoesNotWakeItsHost(t *testing.T) {
	// 200s for a minute, then 500s: its circuit opens and stays open.
	failing := func(start time.Time) behaviour {
		return func(now time.Time, _ int, _ string) reply {
			if now.Sub(start) < time.Minute {
				return reply{status: 200, latency: 5 * time.Millisecond}
			}
			return reply{status: 500, latency: 5 * time.Millisecond}
		}
	}
	slow := func(time.Time) behaviour { return ok(1500 * time.Millisecond) } // slower than its traffic: always queued
	for _, c := range []struct {
		name   string
		behave func(time.Time) behaviour
		edit   func(*core.Subscription)
	}{
		{"circuit open, no rate limit", failing, func(*core.Subscription) {}},
		{"circuit open, rate_limit 20", failing, func(s *core.Subscription) { s.RateLimit = 20 }},
		{"1.5 s answers, max_concurrency 1, no rate limit", slow, func(s *core.Subscription) { s.MaxConcurrency = 1 }},
		{"1.5 s answers, max_concurrency 1, rate_limit 20", slow, func(s *core.Subscription) { s.MaxConcurrency, s.RateLimit = 1, 20 }},
	} {
		soon, attempts, took := busyWakes(t, c.behave, c.edit)
		t.Logf("%-48s %3.0f%% of samples with a wake-up due within 50 ms; %5d attempts; the hour took %s",
			c.name+":", 100*soon, attempts, took.Round(time.Millisecond))
		if soon > 0.5 {
			t.Errorf("%s: the host had a wake-up due within 50 ms at %.0f%% of samples", c.name, 100*soon)
		}
	}
}

// A ramp always ends: an endpoint failing one attempt in five (under the
// breaker's 50 %, so its circuit stays closed) advances three times slower
// than a healthy one, not never. When it advanced only while 90 % of its
// attempts succeeded, such an endpoint was held at 10 % of its rate for
// ever after any outage.
func TestSimRampEndsForAnEndpointWithSomeFailures(t *testing.T) {
	for _, flaky := range []bool{false, true} {
		t.Run(fmt.Sprintf("fails one in five after recovery=%v", flaky), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t)
				start := time.Now()
				upAt := start.Add(3 * time.Minute)
				ep, sub := s.endpoint("ramp", func(now time.Time, n int, _ string) reply {
					if now.Before(upAt) || (flaky && n%5 == 0) {
						return reply{status: 500, latency: 5 * time.Millisecond}
					}
					return reply{status: 200, latency: 5 * time.Millisecond}
				}, func(sub *core.Subscription) {
					sub.RateLimit = 10
					sub.RetrySchedule = []time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second}
				})
				s.start()
				var wg sync.WaitGroup
				s.traffic(&wg, "sim.ramp", 200*time.Millisecond, 70*time.Minute) // 5/s, half the limit
				time.Sleep(time.Hour)
				_, b, level, _ := s.laneState(sub)
				var lastTen int
				for _, a := range ep.snapshot() {
					if a.start.After(time.Now().Add(-10 * time.Minute)) {
						lastTen++
					}
				}
				wg.Wait()
				s.stop()
				t.Logf("an hour in (57 min after recovery): circuit %s, ramp level %.2f, %.2f attempts/s over the last 10 min (traffic 5/s, rate_limit 10)",
					b, level, float64(lastTen)/600)
				if level > 0 && level < 0.5 {
					t.Errorf("ramp still at %.2f of the rate 57 minutes after the circuit closed", level)
				}
			})
		})
	}
}

// A subscription's health ring (200 outcomes, ~8 KB) goes once it holds
// nothing from the last hour, as its lane goes when idle.
func TestSimHealthRingsAreForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		const n = 300
		for i := range n {
			s.endpoint(fmt.Sprintf("e%d", i), ok(5*time.Millisecond))
		}
		s.start()
		for i := range n {
			s.post(fmt.Sprintf("sim.e%d", i), "")
		}
		time.Sleep(48 * time.Hour)
		st := s.d.Stats()
		s.d.mu.Lock()
		rings := len(s.d.health)
		s.d.mu.Unlock()
		s.stop()
		t.Logf("two days after one delivery each to %d subscriptions: %d hosts, %d lanes, %d health rings",
			n, st.Hosts, st.Lanes, rings)
		if rings > st.Lanes {
			t.Errorf("%d health rings kept for %d lanes in memory", rings, st.Lanes)
		}
	})
}

// hostRamp is the host's ramp level and cap, read under mu.
func (s *sim) hostRamp(name string) (level float64, hostCap int, state circuit) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	h := s.d.hosts[name]
	if h == nil {
		return 0, s.d.cfg.HostConcurrency, closed
	}
	return h.ramp.level, ramped(s.d.cfg.HostConcurrency, h.ramp.level), h.breaker.state
}

// After a host outage its ramp follows its connections: one path whose
// handler resets its connections (a quarter of the host's traffic; the
// endpoint's failure, not the host's) neither holds the host's ramp nor
// opens its circuit, and three healthy paths that need three slots get
// them.
func TestSimOneResettingPathLeavesItsHostsRampAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		upAt := time.Now().Add(2 * time.Minute)
		refusedUntil := func(lat time.Duration) behaviour {
			return func(now time.Time, _ int, _ string) reply {
				if now.Before(upAt) {
					return reply{refused: true}
				}
				return reply{status: 200, latency: lat}
			}
		}
		s.path(gateway, "waf", "sim.waf", refusedUntil(5*time.Millisecond))
		var goods []*endpoint
		for i := range 3 {
			ep, _ := s.path(gateway, fmt.Sprintf("g%d", i), fmt.Sprintf("sim.g%d", i), refusedUntil(500*time.Millisecond))
			goods = append(goods, ep)
		}
		s.start(func(c *Config) { c.Sender = stubborn{s.fleet, "https://" + gateway + "/waf"} })
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.waf", 500*time.Millisecond, time.Hour)
		for i := range 3 {
			s.traffic(&wg, fmt.Sprintf("sim.g%d", i), 500*time.Millisecond, time.Hour)
		}
		time.Sleep(time.Hour)
		level, hostCap, state := s.hostRamp(gateway)
		var lags []time.Duration
		for _, ep := range goods {
			lags = append(lags, s.lags(ep)...)
		}
		wg.Wait()
		s.stop()
		t.Logf("an hour in (58 min after the host came back): host circuit %s, ramp level %.2f, cap %d; healthy paths: %d of %d delivered, p50 lag %s",
			state, level, hostCap, len(lags), 3*7200, pct(lags, 0.5))
		if level != 0 || state != closed {
			t.Errorf("the host's ramp is at %.2f (cap %d), its circuit %s, 58 minutes after it came back", level, hostCap, state)
		}
	})
}

// A paused subscription's deliveries stay pending until it is resumed,
// however long, even when its circuit was open as it was paused: failing
// held deliveries after their retry window is for what a circuit holds,
// not what its owner holds.
func TestSimPausedBacklogIsNeverExpired(t *testing.T) {
	for _, openWhenPaused := range []bool{false, true} {
		t.Run(fmt.Sprintf("circuit open when paused=%v", openWhenPaused), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t)
				_, sub := s.endpoint("paused", func(time.Time, int, string) reply {
					return reply{status: 500, latency: 5 * time.Millisecond}
				})
				s.start()
				var wg sync.WaitGroup
				if openWhenPaused {
					s.traffic(&wg, "sim.paused", 500*time.Millisecond, time.Minute) // 120 attempts: it opens
				} else {
					s.traffic(&wg, "sim.paused", 20*time.Second, time.Minute) // 3 events: under the volume, closed
				}
				wg.Wait()
				_, b, _, _ := s.laneState(sub)
				p := sub
				p.State, p.UpdatedAt = core.SubPaused, time.Now().UTC()
				s.subs.Put(p)
				if err := s.store.SubscriptionUpdate(context.Background(), p); err != nil {
					t.Fatal(err)
				}
				before := s.states(sub)
				time.Sleep(30 * time.Hour)
				after := s.states(sub)
				s.stop()
				t.Logf("paused with its circuit %s: %v when paused, %v 30 hours later", b, before, after)
				if after[core.DeliveryPending] != before[core.DeliveryPending] {
					t.Errorf("a paused subscription's pending deliveries went from %d to %d: %v", before[core.DeliveryPending], after[core.DeliveryPending], after)
				}
			})
		})
	}
}

// checkInvariants reads admission state under mu and reports what should
// never be: a probe marked in flight with nothing in flight, in-flight
// counts that disagree, a lane with work, admissible by everything, on a
// host that admits, with no wake-up queued and nothing in flight to pump it.
func (s *sim) checkInvariants() []string {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	now := time.Now()
	var bad []string
	for name, h := range s.d.hosts {
		sum := 0
		for id, l := range h.lanes {
			sum += l.inflight
			if l.breaker.probing && l.inflight == 0 {
				bad = append(bad, fmt.Sprintf("%s %s: lane probing with nothing in flight", name, id))
			}
			if l.breaker.state == halfOpen && !l.breaker.probing && l.queued() > 0 && h.inflight == 0 &&
				h.breaker.state == closed && !now.Before(h.pauseUntil) && !now.Before(l.pauseUntil) &&
				(h.wakeAt.IsZero() || h.wakeAt.Before(now)) {
				bad = append(bad, fmt.Sprintf("%s %s: half-open lane with work, nothing in flight, no wake-up", name, id))
			}
		}
		if sum != h.inflight {
			bad = append(bad, fmt.Sprintf("%s: host in flight %d, lanes %d", name, h.inflight, sum))
		}
		if h.breaker.probing && h.inflight == 0 {
			bad = append(bad, fmt.Sprintf("%s: host probing with nothing in flight", name))
		}
		queued := 0
		for _, l := range h.lanes {
			queued += l.queued()
		}
		if queued > 0 && h.inflight == 0 && (h.wakeAt.IsZero() || h.wakeAt.Before(now.Add(-time.Second))) {
			bad = append(bad, fmt.Sprintf("%s: %d queued, nothing in flight, no wake-up (circuit %s)", name, queued, h.breaker.state))
		}
	}
	return bad
}

// A mixed fleet on two shared hosts and some own hosts, every kind of
// failure switching on and off for three hours, some endpoints rate
// limited, then all healthy: every delivery ends delivered or failed (none
// left pending), the invariants above hold at every minute, and after 30
// idle hours nothing is left in memory.
func TestSimChaosFleetLeavesNothingStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		start := time.Now()
		phase := func(now time.Time, period time.Duration) int {
			return int(now.Sub(start) / period)
		}
		const span = 3 * time.Hour
		healthyAfter := start.Add(span)
		kinds := []func(now time.Time, n int) reply{
			func(now time.Time, n int) reply { // flapping 500s
				if phase(now, 7*time.Minute)%2 == 1 {
					return reply{status: 500, latency: 5 * time.Millisecond}
				}
				return reply{status: 200, latency: 20 * time.Millisecond}
			},
			func(now time.Time, n int) reply { // hangs every other 13 minutes
				if phase(now, 13*time.Minute)%2 == 1 {
					return reply{hang: true}
				}
				return reply{status: 200, latency: 50 * time.Millisecond}
			},
			func(now time.Time, n int) reply { // 429 with Retry-After now and then
				if n%17 == 0 {
					return reply{status: 429, retryAfter: 30 * time.Second, latency: 5 * time.Millisecond}
				}
				return reply{status: 200, latency: 10 * time.Millisecond}
			},
			func(now time.Time, n int) reply { // refuses every other 11 minutes
				if phase(now, 11*time.Minute)%2 == 1 {
					return reply{refused: true}
				}
				return reply{status: 200, latency: 10 * time.Millisecond}
			},
			func(now time.Time, n int) reply { // 503 Retry-After bursts
				if phase(now, 5*time.Minute)%3 == 1 {
					return reply{status: 503, retryAfter: 2 * time.Minute, latency: 5 * time.Millisecond}
				}
				return reply{status: 200, latency: 10 * time.Millisecond}
			},
			func(now time.Time, n int) reply { return reply{status: 200, latency: time.Second} }, // slow
		}
		var subsAll []core.Subscription
		var typesAll []string
		add := func(host, path string, k int) {
			typ := fmt.Sprintf("sim.c%d", len(typesAll))
			kind := kinds[k%len(kinds)]
			_, sub := s.path(host, path, typ, func(now time.Time, n int, _ string) reply {
				if !now.Before(healthyAfter) {
					return reply{status: 200, latency: 10 * time.Millisecond}
				}
				return kind(now, n)
			}, func(sub *core.Subscription) {
				if k%4 == 0 {
					sub.RateLimit = 5
				}
				if k%5 == 0 {
					sub.MaxConcurrency = 2
				}
			})
			subsAll = append(subsAll, sub)
			typesAll = append(typesAll, typ)
		}
		for i := range 24 {
			add("hub-a.example:443", fmt.Sprintf("p%d", i), i)
		}
		for i := range 12 {
			add("hub-b.example:443", fmt.Sprintf("p%d", i), i+3)
		}
		for i := range 6 {
			add(fmt.Sprintf("own%d.example:443", i), "", i)
		}
		s.start()
		var wg sync.WaitGroup
		for i, typ := range typesAll {
			s.traffic(&wg, typ, time.Duration(2+i%5)*time.Second, span)
		}
		var problems []string
		for end := time.Now().Add(span + time.Hour); time.Now().Before(end); {
			time.Sleep(time.Minute)
			problems = append(problems, s.checkInvariants()...)
		}
		wg.Wait()
		time.Sleep(30 * time.Hour) // past every retry window
		problems = append(problems, s.checkInvariants()...)
		pending := 0
		for _, sub := range subsAll {
			pending += s.states(sub)[core.DeliveryPending]
		}
		st := s.d.Stats()
		s.stop()
		for i, p := range problems {
			if i == 10 {
				t.Errorf("… %d in all", len(problems))
				break
			}
			t.Errorf("invariant: %s", p)
		}
		if pending > 0 {
			t.Errorf("%d deliveries still pending 30 hours after the last event", pending)
		}
		t.Logf("%d subscriptions; %d pending at the end; memory after 30 idle hours: %+v", len(subsAll), pending, st)
		if st.Lanes > 0 {
			t.Errorf("%d lanes of %d hosts still in memory after 30 idle hours", st.Lanes, st.Hosts)
		}
	})
}

// An endpoint taking 20 a second begins answering 500. Its breaker judged
// the minute, which a minute of successes outweighed: its retries came on
// top of new events and it was sent twice its rate for 18 s (an outside
// run: 595 attempts) before its circuit opened. Twenty failures in a row
// open it now, whatever the minute held.
func TestSimAnEndpointThatBeginsFailingIsNotSentMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		failAt := time.Now().Add(2 * time.Minute)
		ep, _ := s.endpoint("turns", downBetween(failAt, failAt.Add(time.Hour), reply{status: 500, latency: 5 * time.Millisecond}))
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.turns", 50*time.Millisecond, 3*time.Minute)
		wg.Wait()
		s.stop()
		n := 0
		for _, a := range ep.snapshot() {
			if !a.start.Before(failAt) && a.start.Before(failAt.Add(20*time.Second)) {
				n++
			}
		}
		t.Logf("%d attempts in the 20 s after it began failing (20 a second before)", n)
		// What it took before for a second and a half, and a probe.
		if n > 31 {
			t.Errorf("%d attempts in the 20 s after the endpoint began failing: its circuit did not open within its first failures", n)
		}
	})
}

// A host refusing connections for nine minutes is back: its probe comes
// within a host circuit's longest open period. Doubling to an endpoint
// breaker's 30 min, an outside run's host waited 7.5 minutes more after a
// 9-minute outage (204 s after a 5-minute one) for its probe, its backlog
// with it.
func TestSimAHostBackFromAnOutageIsProbedSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		upAt := time.Now().Add(9 * time.Minute)
		ep, _ := s.endpoint("gone", downBetween(time.Now(), upAt, reply{refused: true}))
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.gone", time.Second, 20*time.Minute)
		wg.Wait()
		s.stop()
		var first time.Time
		for _, a := range ep.snapshot() {
			if a.class == send.Delivered && (first.IsZero() || a.start.Before(first)) {
				first = a.start
			}
		}
		t.Logf("first delivery %v after the host came back", first.Sub(upAt))
		// Two minutes and their jitter.
		if first.IsZero() || first.Sub(upAt) > 145*time.Second {
			t.Errorf("first delivery %v after the host came back, want within 2 min 25 s", first.Sub(upAt))
		}
	})
}
