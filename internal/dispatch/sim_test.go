//go:build !race

package dispatch

// The simulations run without the race detector: instrumented, a simulated
// day takes minutes, and on go1.26.8 synctest timers fault under -race.
// The race detector covers the same code in dispatcher_test.go and the
// end-to-end tests, in real time.

// A deterministic simulation: the real dispatcher, admission and store
// driven under testing/synctest (time is fake and advances only when every
// goroutine waits), sending to endpoints simulated in memory. A simulated
// day runs in seconds.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"hookd/internal/core"
	"hookd/internal/ingest"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/testenv"
)

// reply is how a simulated endpoint answers one attempt.
type reply struct {
	status     int
	latency    time.Duration
	retryAfter time.Duration
	hang       bool // never answers: the attempt times out
	refused    bool // connection refused at once
}

type behaviour = func(now time.Time, n int, eventID string) reply

func ok(latency time.Duration) behaviour {
	return func(time.Time, int, string) reply { return reply{status: 200, latency: latency} }
}

// downBetween answers down from from until to, and 200 in 5 ms otherwise.
func downBetween(from, to time.Time, down reply) behaviour {
	return func(now time.Time, _ int, _ string) reply {
		if !now.Before(from) && now.Before(to) {
			return down
		}
		return reply{status: 200, latency: 5 * time.Millisecond}
	}
}

type simAttempt struct {
	start, end time.Time
	sub        string
	eventID    string
	seq        int64
	key        string
	class      send.Class
}

// endpoint is one simulated endpoint (a URL): a host of its own, or one
// path of a shared host.
type endpoint struct {
	url    string
	behave func(now time.Time, n int, eventID string) reply

	mu        sync.Mutex
	attempts  []simAttempt
	inflight  int
	peak      int
	delivered map[string]time.Time // event ID → first 2xx
}

func (e *endpoint) snapshot() []simAttempt {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.attempts)
}

// fleet is the simulated endpoints by URL.
type fleet map[string]*endpoint

func (f fleet) Send(ctx context.Context, sub *core.Subscription, job *core.Job, now time.Time) send.Outcome {
	ep := f[sub.URL]
	ep.mu.Lock()
	n := len(ep.attempts)
	ep.inflight++
	ep.peak = max(ep.peak, ep.inflight)
	ep.mu.Unlock()

	r := ep.behave(now, n, job.Event.ID)
	out := send.Outcome{StartedAt: now}
	wait := r.latency
	if r.hang || wait >= sub.SendTimeout() {
		wait = sub.SendTimeout()
	}
	timer := time.NewTimer(wait)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	switch {
	case r.refused:
		out.Class, out.Err, out.Conn = send.Retry, "connection refused", true
	case r.hang || r.latency >= sub.SendTimeout():
		out.Class, out.Err = send.Retry, "timeout"
	default:
		out.StatusCode, out.RetryAfter = r.status, r.retryAfter
		switch {
		case r.status >= 200 && r.status < 300:
			out.Class = send.Delivered
		case r.status == 429 || r.status >= 500:
			out.Class = send.Retry
		case r.status == 410:
			out.Class = send.Gone
		default:
			out.Class = send.Fail
		}
	}
	end := time.Now()
	out.Duration = end.Sub(now)

	ep.mu.Lock()
	ep.inflight--
	ep.attempts = append(ep.attempts, simAttempt{start: now, end: end, sub: sub.ID, eventID: job.Event.ID,
		seq: job.Delivery.Sequence, key: job.Event.OrderingKey, class: out.Class})
	if out.Class == send.Delivered {
		if _, seen := ep.delivered[job.Event.ID]; !seen {
			ep.delivered[job.Event.ID] = end
		}
	}
	ep.mu.Unlock()
	return out
}

// sim is one simulated hookd node: real store (on tmpfs when there is one,
// so fsync costs little), registry, ingest and dispatcher.
type sim struct {
	t      *testing.T
	store  store.Store
	subs   *subs.Registry
	ingest *ingest.Ingester
	d      *Dispatcher
	fleet  fleet
	mu     sync.Mutex
	posted map[string]time.Time // event ID → created
}

func newSim(t *testing.T) *sim {
	dir := t.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "hookd-sim"); err == nil {
			dir = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "sim.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, store: st, subs: subs.New(nil), fleet: fleet{}, posted: map[string]time.Time{}}
	return s
}

// endpoint adds a subscription to "sim.<name>" events at its own host.
func (s *sim) endpoint(name string, behave behaviour, edit ...func(*core.Subscription)) (*endpoint, core.Subscription) {
	return s.path(name+".example:443", "", "sim."+name, behave, edit...)
}

// path adds a subscription to typ events at https://host/path: many paths
// on one host are many endpoints sharing it.
func (s *sim) path(host, path, typ string, behave behaviour, edit ...func(*core.Subscription)) (*endpoint, core.Subscription) {
	url := "https://" + host + "/" + path
	ep := s.fleet[url]
	if ep == nil {
		ep = &endpoint{url: url, behave: behave, delivered: map[string]time.Time{}}
		s.fleet[url] = ep
	}
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: url,
		Host: host, EventTypes: []string{typ}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		State: core.SubActive, CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()}
	for _, e := range edit {
		e(&sub)
	}
	if err := s.store.SubscriptionCreate(context.Background(), sub); err != nil {
		s.t.Fatal(err)
	}
	s.subs.Put(sub)
	return ep, sub
}

func (s *sim) start(edit ...func(*Config)) {
	svc := subs.NewService(s.store, s.subs, nil)
	cfg := Config{Store: s.store, Subs: s.subs, Sender: s.fleet,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Disable: func(ctx context.Context, id, reason string) error {
			_, err := svc.Disable(ctx, id, reason)
			return err
		}}
	for _, e := range edit {
		e(&cfg)
	}
	s.d = New(cfg)
	if err := s.d.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
	s.ingest = ingest.New(s.store, s.subs, s.d.Notify, ingest.WithReservations(s.d.Reserve, s.d.Release))
}

// restart stops the node as a deploy does (what is in flight finishes and
// is written) and starts another on the same store, with none of its memory.
func (s *sim) restart() {
	s.ingest.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.d.Stop(ctx)
	s.start()
}

// stop shuts the node down; every goroutine of the bubble must end.
func (s *sim) stop() {
	s.ingest.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s.d.Stop(ctx)
	s.store.Close()
}

func (s *sim) post(typ, key string) string { return s.postAs(core.DefaultTenant, typ, key) }

// postAs posts one event of typ as tenant (see tenant).
func (s *sim) postAs(tenant, typ, key string) string {
	res, err := s.ingest.Submit(context.Background(), core.Event{TenantID: tenant, Type: typ,
		Payload: []byte(`{}`), OrderingKey: key})
	if err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.posted[res.EventID] = time.Now()
	s.mu.Unlock()
	return res.EventID
}

// traffic posts one event of typ every interval for span, in the background.
func (s *sim) traffic(wg *sync.WaitGroup, typ string, interval, span time.Duration) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for end := time.Now().Add(span); time.Now().Before(end); {
			s.post(typ, "")
			time.Sleep(interval)
		}
	}()
}

// tenant creates a tenant in the store; its subscriptions take tenantOf.
func (s *sim) tenant(id string) {
	if err := s.store.TenantCreate(context.Background(), core.Tenant{ID: id, Name: id, CreatedAt: time.Now().UTC()}, core.APIKey{}); err != nil {
		s.t.Fatal(err)
	}
}

func tenantOf(id string) func(*core.Subscription) {
	return func(s *core.Subscription) { s.TenantID = id }
}

func types(t ...string) func(*core.Subscription) {
	return func(s *core.Subscription) { s.EventTypes = t }
}

func (s *sim) created(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.posted[id]
}

// lags returns each delivered event's ingest-to-first-delivery lag, sorted.
func (s *sim) lags(ep *endpoint) []time.Duration {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	var out []time.Duration
	for id, at := range ep.delivered {
		out = append(out, at.Sub(s.created(id)))
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

func (s *sim) states(sub core.Subscription) map[core.DeliveryState]int {
	out := map[core.DeliveryState]int{}
	for _, d := range s.deliveries(sub) {
		out[d.State]++
	}
	return out
}

// deliveries reads every delivery of sub from the store.
func (s *sim) deliveries(sub core.Subscription) []core.Delivery {
	var out []core.Delivery
	for cursor := ""; ; {
		page, err := s.store.DeliveryList(context.Background(), store.DeliveryListParams{SubscriptionID: sub.ID, Cursor: cursor, Limit: 100})
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, page.Data...)
		if cursor = page.NextCursor; cursor == "" {
			return out
		}
	}
}

// healthyLags runs four fast endpoints, plus a hanging one taking a fifth
// of the traffic when withHung, and returns the fast ones' lags.
func healthyLags(t *testing.T, withHung bool) (lags []time.Duration, hungPeak int) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		var fast []*endpoint
		for i := range 4 {
			ep, _ := s.endpoint(fmt.Sprintf("fast%d", i), ok(50*time.Millisecond))
			fast = append(fast, ep)
		}
		hung, _ := s.endpoint("hung", func(time.Time, int, string) reply { return reply{hang: true} })
		s.start()
		var wg sync.WaitGroup
		for i := range 4 {
			s.traffic(&wg, fmt.Sprintf("sim.fast%d", i), 200*time.Millisecond, 10*time.Minute)
		}
		if withHung {
			s.traffic(&wg, "sim.hung", 200*time.Millisecond, 10*time.Minute)
		}
		wg.Wait()
		time.Sleep(time.Minute) // let the last deliveries land
		for _, ep := range fast {
			lags = append(lags, s.lags(ep)...)
		}
		hungPeak = hung.peak
		s.stop()
	})
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	return lags, hungPeak
}

func TestSimHangingEndpointCostsOthersNothing(t *testing.T) {
	base, _ := healthyLags(t, false)
	with, peak := healthyLags(t, true)
	if peak > core.DefaultHostConcurrency {
		t.Errorf("hanging endpoint held %d attempts at once, cap is %d", peak, core.DefaultHostConcurrency)
	}
	if len(with) != len(base) || len(base) != 4*5*600 {
		t.Fatalf("healthy deliveries: %d with the hanging endpoint, %d without; want %d each", len(with), len(base), 4*5*600)
	}
	// Tolerance: 25 ms on the median and p99 (a flush interval and change).
	for _, p := range []float64{0.5, 0.99} {
		b, w := pct(base, p), pct(with, p)
		if w-b > 25*time.Millisecond {
			t.Errorf("p%.0f lag of healthy endpoints: %s with a hanging endpoint, %s without", p*100, w, b)
		}
		t.Logf("p%.0f healthy lag: %s alone, %s beside a hanging endpoint", p*100, b, w)
	}
}

func TestSimBreakerOpensOnVolumeAndProbesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, sub := s.endpoint("err", func(time.Time, int, string) reply { return reply{status: 500, latency: 10 * time.Millisecond} })
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.err", 500*time.Millisecond, 2*time.Hour)
		wg.Wait()
		if h := s.d.Health(sub.Host, sub.ID); h.Circuit == "closed" {
			t.Errorf("circuit %s after two hours of 500s", h.Circuit)
		}
		s.stop()

		at := ep.snapshot()
		// Opening: not before the minimum volume, and within it plus what
		// was already in flight.
		first := 0
		for first+1 < len(at) && at[first+1].start.Sub(at[first].start) < 20*time.Second {
			first++
		}
		opened := first + 1
		if opened < breakerMinVolume || opened > breakerMinVolume+core.DefaultHostConcurrency {
			t.Fatalf("%d attempts before the breaker opened, want %d..%d", opened, breakerMinVolume, breakerMinVolume+core.DefaultHostConcurrency)
		}
		// Open: nothing but one probe per half-open window, each window
		// at least the doubling back-off less its jitter.
		backoff := breakerFirstOpen
		for i := opened; i < len(at); i++ {
			gap := at[i].start.Sub(at[i-1].start)
			if gap < backoff*8/10 {
				t.Fatalf("attempt %d came %s after the previous; the open period was %s", i, gap, backoff)
			}
			backoff = min(2*backoff, breakerMaxOpen)
		}
		probes := len(at) - opened
		if probes < 4 || probes > 9 {
			t.Errorf("%d probes in two hours, want 4..9 (30s doubling to 30min, ±20%%)", probes)
		}
		t.Logf("opened after %d attempts; %d probes in 2h; %d events posted", opened, probes, len(s.posted))
	})
}

func TestSimOutageRecoveryFollowsRampAndRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		const rate = 10.0
		start := time.Now()
		upAt := start.Add(6 * time.Hour)
		ep, sub := s.endpoint("down6h", func(now time.Time, n int, _ string) reply {
			if now.Before(upAt) {
				return reply{refused: true}
			}
			return reply{status: 200, latency: 20 * time.Millisecond}
		}, func(sub *core.Subscription) { sub.RateLimit = rate })
		s.start()
		var wg sync.WaitGroup
		// One event a second for the outage and an hour after it.
		s.traffic(&wg, "sim.down6h", time.Second, 7*time.Hour)
		wg.Wait()
		time.Sleep(3 * time.Hour)
		states := s.states(sub)
		s.stop()

		at := ep.snapshot()
		var closedAt time.Time
		perSec := map[int64]int{}
		for _, a := range at {
			if a.class != send.Delivered {
				continue
			}
			if closedAt.IsZero() {
				closedAt = a.end // the successful probe closes the breaker
			}
			perSec[a.start.Unix()]++
		}
		if closedAt.IsZero() || closedAt.Sub(upAt) > 40*time.Minute {
			t.Fatalf("breaker closed at %v, endpoint up at %v", closedAt, upAt)
		}
		// Every second: never above the rate limit, and during the ramp
		// never above the ramped rate (10 % up to 100 % over five minutes).
		for sec, n := range perSec {
			since := time.Unix(sec, 0).Sub(closedAt).Seconds()
			allowed := rate
			if since >= 0 && since < rampDuration.Seconds() {
				allowed = rate * min(1, rampStart+(1-rampStart)*(since+1)/rampDuration.Seconds())
			}
			if float64(n) > allowed+1 {
				t.Errorf("%d deliveries in the second at +%.0fs after recovery, allowed %.1f", n, since, allowed)
			}
		}
		// The backlog drained: every delivery of the day was delivered.
		if states[core.DeliveryDelivered] != len(s.posted) || states[core.DeliveryPending] != 0 {
			t.Errorf("states %v for %d events", states, len(s.posted))
		}
		// New work was not starved by the backlog: events posted after
		// recovery arrived quickly even while six hours of backlog drained.
		var fresh []time.Duration
		for id, created := range s.posted {
			if created.After(closedAt.Add(rampDuration)) {
				fresh = append(fresh, ep.delivered[id].Sub(created))
			}
		}
		sort.Slice(fresh, func(i, j int) bool { return fresh[i] < fresh[j] })
		if p99 := pct(fresh, 0.99); p99 > 5*time.Second {
			t.Errorf("new deliveries' p99 lag while the backlog drained: %s", p99)
		}
		// And the backlog was not starved by new work: it drained within 10 %
		// of the time the rate left over by new work allows, plus the ramp.
		var last time.Time // when the last event of the outage was delivered
		for _, a := range at {
			if a.class == send.Delivered && s.created(a.eventID).Before(upAt) && a.end.After(last) {
				last = a.end
			}
		}
		backlog := float64(upAt.Sub(start) / time.Second)
		ideal := time.Duration(backlog / (rate - 1) * float64(time.Second))
		drain := last.Sub(closedAt)
		if drain > ideal*11/10+rampDuration {
			t.Errorf("backlog of %.0f took %s to drain at %.0f/s", backlog, drain, rate)
		}
		t.Logf("drained in %s (ideal %s plus the ramp)", drain, ideal)
		t.Logf("breaker closed %s after the endpoint came back; %d delivered; %d attempts in all; new p99 lag %s",
			closedAt.Sub(upAt), states[core.DeliveryDelivered], len(at), pct(fresh, 0.99))
	})
}

// With no rate_limit, the ramp after a circuit closes is a share of the
// rate the endpoint took before it failed: 20 events a second for two
// minutes, 500s for ten, then quick 200s. The backlog of ten minutes must
// not all arrive at once (an outside run: 2,400 in 0.8 s with one attempt
// in flight), nor when the ramp ends (218 a second at once): what is left
// drains at a rate doubling every ramp's length from there.
func TestSimRecoveryWithoutRateLimitRampsTheRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		start := time.Now()
		downAt, upAt := start.Add(2*time.Minute), start.Add(12*time.Minute)
		ep, sub := s.endpoint("flaky", downBetween(downAt, upAt, reply{status: 500, latency: 5 * time.Millisecond}))
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.flaky", 50*time.Millisecond, 20*time.Minute)
		wg.Wait()
		time.Sleep(30 * time.Minute) // the breaker may close minutes after the endpoint is back; then the ramp and the catch-up
		states := s.states(sub)
		s.stop()

		var closedAt time.Time
		perSec := map[int64]int{}
		for _, a := range ep.snapshot() {
			if a.class != send.Delivered || a.start.Before(upAt) {
				continue
			}
			if closedAt.IsZero() {
				closedAt = a.end
			}
			perSec[a.start.Unix()]++
		}
		if closedAt.IsZero() {
			t.Fatal("the endpoint's circuit never closed")
		}
		// The rate before: 20 a second, and the retries of the failing
		// minute (30 a second is generous).
		const before = 30.0
		busiest := 0
		for sec, n := range perSec {
			since := time.Unix(sec, 0).Sub(closedAt).Seconds()
			if since < 0 {
				continue
			}
			busiest = max(busiest, n)
			// The ramp, then the catch-up, doubling every ramp's length.
			allowed := before * math.Pow(2, (since+1-rampDuration.Seconds())/rampDuration.Seconds())
			if since < rampDuration.Seconds()-1 { // its last second holds its end
				allowed = before * (rampStart + (1-rampStart)*(since+1)/rampDuration.Seconds())
			}
			if float64(n) > allowed+1 {
				t.Errorf("%d deliveries in the second at +%.0fs after recovery, allowed %.1f", n, since, allowed)
			}
		}
		if states[core.DeliveryDelivered] != len(s.posted) || states[core.DeliveryPending] != 0 {
			t.Errorf("states %v for %d events", states, len(s.posted))
		}
		t.Logf("circuit closed %s after the endpoint came back; busiest second after %d", closedAt.Sub(upAt), busiest)
	})
}

// An endpoint taking 20 events a second hangs for 80 s, then answers at
// once again. The minute before its circuit opened held only its timeouts,
// so the ramp was a share of the 10 a second floor: it sent 1 a second at
// first where the endpoint had taken 20, and fell further behind its
// inflow (an outside run: 556 of its events still pending 4 minutes on).
// The ramp is a share of what it took while it worked: 2 a second first.
func TestSimRecoveryAfterAHangRampsFromWhatItTookBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		start := time.Now()
		downAt, upAt := start.Add(2*time.Minute), start.Add(2*time.Minute+80*time.Second)
		ep, sub := s.endpoint("hangs", downBetween(downAt, upAt, reply{hang: true}))
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.hangs", 50*time.Millisecond, 10*time.Minute)
		wg.Wait()
		time.Sleep(30 * time.Minute)
		states := s.states(sub)
		s.stop()
		var closedAt time.Time
		var first []simAttempt // delivered in the ramp's first minute
		for _, a := range ep.snapshot() {
			if a.class != send.Delivered || a.start.Before(upAt) {
				continue
			}
			if closedAt.IsZero() {
				closedAt = a.end
			}
			if a.start.Before(closedAt.Add(time.Minute)) {
				first = append(first, a)
			}
		}
		if closedAt.IsZero() {
			t.Fatal("the endpoint's circuit never closed")
		}
		// 10 % of 20 a second rising to 100 % over five minutes is at most
		// 228 in its first minute, of the floor's 10 a second 114 (84 were
		// sent, its first seconds going to the half-open probe).
		t.Logf("circuit closed %s after the endpoint came back; %d delivered in the ramp's first minute", closedAt.Sub(upAt), len(first))
		if len(first) < 140 || len(first) > 228 {
			t.Errorf("%d delivered in the ramp's first minute, want 10 %% of 20 a second, rising (at most 228, more than the floor's 114)", len(first))
		}
		if states[core.DeliveryDelivered] != len(s.posted) || states[core.DeliveryPending] != 0 {
			t.Errorf("states %v for %d events", states, len(s.posted))
		}
	})
}

// An endpoint taking 50 events a second hangs for four minutes, so the
// rate its circuit saw before opening was its timeouts (under 1 a second),
// then answers at once again. The catch-up after the ramp rises until it
// overtakes the inflow and the backlog is gone: paced at a fixed twice the
// rate before (20 a second) it never drained (80,534 of 120,000 pending
// after 40 minutes), and rising linearly at the ramp's pace it had not
// (53,256).
func TestSimCatchUpOvertakesItsInflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		start := time.Now()
		downAt, upAt := start.Add(2*time.Minute), start.Add(6*time.Minute)
		_, sub := s.endpoint("busy", downBetween(downAt, upAt, reply{hang: true}))
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.busy", 20*time.Millisecond, 40*time.Minute)
		wg.Wait()
		time.Sleep(time.Minute)
		states := s.states(sub)
		s.d.mu.Lock()
		catching := 0
		for _, h := range s.d.hosts {
			for _, l := range h.lanes {
				if l.catchingUp {
					catching++
				}
			}
		}
		s.d.mu.Unlock()
		s.stop()
		t.Logf("states %v of %d posted", states, len(s.posted))
		if states[core.DeliveryPending] > 0 || catching > 0 {
			t.Errorf("%d deliveries pending and %d lanes catching up a minute after 34 minutes of a healthy endpoint",
				states[core.DeliveryPending], catching)
		}
	})
}

func TestSimFairShareOnOneHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		slow := func(time.Time, int, string) reply { return reply{status: 200, latency: time.Second} }
		ep, a := s.endpoint("shared", slow, types("sim.a"))
		_, b := s.endpoint("shared", slow, types("sim.b"))
		s.start()
		// Both keep far more work queued than the host's cap can take.
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.a", 20*time.Millisecond, 5*time.Minute)
		s.traffic(&wg, "sim.b", 20*time.Millisecond, 5*time.Minute)
		time.Sleep(time.Minute) // steady state
		from := time.Now()
		time.Sleep(3 * time.Minute)
		to := time.Now()
		wg.Wait()
		s.stop()

		busy := map[string]time.Duration{}
		for _, at := range ep.snapshot() {
			if at.start.After(from) && at.end.Before(to) {
				busy[at.sub] += at.end.Sub(at.start)
			}
		}
		span := to.Sub(from)
		ca, cb := busy[a.ID].Seconds()/span.Seconds(), busy[b.ID].Seconds()/span.Seconds()
		if ep.peak > core.DefaultHostConcurrency {
			t.Errorf("host held %d at once, cap %d", ep.peak, core.DefaultHostConcurrency)
		}
		half := float64(core.DefaultHostConcurrency) / 2
		if ca < half*0.8 || ca > half*1.2 || cb < half*0.8 || cb > half*1.2 {
			t.Errorf("mean in flight: %.2f and %.2f, want about %.1f each", ca, cb, half)
		}
		t.Logf("mean in flight on one host: %.2f and %.2f (cap %d)", ca, cb, core.DefaultHostConcurrency)
	})
}

func TestSimOrderedKeysKeepOrderAndDoNotBlockEachOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		// The first attempt of every seventh event gets a 500.
		var mu sync.Mutex
		tried := map[string]bool{}
		failFirst := map[string]bool{}
		ep, _ := s.endpoint("ord", func(_ time.Time, _ int, id string) reply {
			mu.Lock()
			defer mu.Unlock()
			first := !tried[id]
			tried[id] = true
			if first && failFirst[id] {
				return reply{status: 500, latency: 50 * time.Millisecond}
			}
			return reply{status: 200, latency: 50 * time.Millisecond}
		}, func(sub *core.Subscription) {
			sub.Ordered = true
			sub.RetrySchedule = []time.Duration{time.Second, time.Second, time.Second}
		})
		s.start()
		const events, keys = 3000, 5
		for i := range events {
			id := s.post("sim.ord", fmt.Sprintf("k%d", i%keys))
			if i%7 == 3 {
				mu.Lock()
				failFirst[id] = true
				mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Minute)
		s.stop()

		// Per key: an attempt of sequence n only after n-1 was delivered.
		done := map[string]int64{}
		for _, a := range ep.snapshot() {
			if a.seq != done[a.key]+1 {
				t.Fatalf("key %s: attempt of sequence %d while %d was the last delivered", a.key, a.seq, done[a.key])
			}
			if a.class == send.Delivered {
				done[a.key] = a.seq
			}
		}
		for k, last := range done {
			if last != events/keys {
				t.Errorf("key %s delivered up to %d, want %d", k, last, events/keys)
			}
		}
		// A retrying event holds back only its own key: most events, whose
		// key was not waiting on a retry, went at once.
		lags := s.lags(ep)
		if p50 := pct(lags, 0.5); p50 > 200*time.Millisecond {
			t.Errorf("ordered p50 lag %s: keys block each other", p50)
		}
		t.Logf("ordered: %d events over %d keys in order; lag p50 %s p99 %s", events, keys, pct(lags, 0.5), pct(lags, 0.99))
	})
}

// A key's next event goes once its predecessor's result is written; that
// write must not wait out the result writer's interval, or every key moves
// one event per interval.
func TestSimOrderedKeyTakesNoIntervalPerTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, _ := s.endpoint("turns", ok(10*time.Millisecond), func(sub *core.Subscription) { sub.Ordered = true })
		s.start(func(c *Config) { c.FlushInterval = time.Second })
		const events = 20
		for range events {
			s.post("sim.turns", "k")
		}
		time.Sleep(5 * time.Second) // 5 intervals: 5 turns if each waited one
		delivered := 0
		for i, a := range ep.snapshot() {
			if a.seq != int64(i+1) || a.class != send.Delivered {
				t.Fatalf("attempt %d: sequence %d, %v", i, a.seq, a.class)
			}
			delivered++
		}
		s.stop()
		if delivered != events {
			t.Fatalf("%d of %d delivered in 5 s of 1 s result intervals", delivered, events)
		}
	})
}

// TestSimFleetForADayLosesNothing runs a day and a few hours against a
// fleet of every kind of endpoint and checks each delivery ended as its
// endpoint's behaviour dictates: delivered where the endpoint ever takes
// it, failed (kept for replay) where it never does, none left pending.
func TestSimFleetForADayLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		start := time.Now()
		type kind struct {
			name   string
			behave behaviour
			want   core.DeliveryState
		}
		kinds := []kind{
			{"fast", ok(20 * time.Millisecond), core.DeliveryDelivered},
			{"slow", ok(2 * time.Second), core.DeliveryDelivered},
			{"hanging", func(time.Time, int, string) reply { return reply{hang: true} }, core.DeliveryFailed},
			{"always500", func(time.Time, int, string) reply { return reply{status: 500} }, core.DeliveryFailed},
			{"limited", func(_ time.Time, n int, _ string) reply {
				if n%2 == 0 {
					return reply{status: 429, retryAfter: 5 * time.Second}
				}
				return reply{status: 200, latency: 20 * time.Millisecond}
			}, core.DeliveryDelivered},
			{"flapping", func(now time.Time, _ int, _ string) reply {
				if int(now.Sub(start)/(10*time.Minute))%2 == 1 {
					return reply{refused: true}
				}
				return reply{status: 200, latency: 20 * time.Millisecond}
			}, core.DeliveryDelivered},
			{"down6h", func(now time.Time, _ int, _ string) reply {
				if now.Sub(start) < 6*time.Hour {
					return reply{status: 503}
				}
				return reply{status: 200, latency: 20 * time.Millisecond}
			}, core.DeliveryDelivered},
		}
		subsByKind := map[string]core.Subscription{}
		for _, k := range kinds {
			_, sub := s.endpoint(k.name, k.behave)
			subsByKind[k.name] = sub
		}
		s.start()
		var wg sync.WaitGroup
		for _, k := range kinds {
			s.traffic(&wg, "sim."+k.name, 10*time.Second, 2*time.Hour)
		}
		wg.Wait()
		time.Sleep(27 * time.Hour) // past the last event's retry window
		for _, k := range kinds {
			st := s.states(subsByKind[k.name])
			if st[k.want] != 720 || len(st) != 1 {
				t.Errorf("%s: %v, want all 720 %s", k.name, st, k.want)
			}
		}
		s.stop()
		for _, k := range kinds {
			ep := s.fleet["https://"+k.name+".example:443/"]
			perDelivery := map[string]int{}
			for _, a := range ep.snapshot() {
				perDelivery[a.eventID]++
			}
			most := 0
			for _, n := range perDelivery {
				most = max(most, n)
			}
			if most > len(core.DefaultRetrySchedule)+1 {
				t.Errorf("%s: a delivery was tried %d times, the schedule allows %d", k.name, most, len(core.DefaultRetrySchedule)+1)
			}
			if ep.peak > core.DefaultHostConcurrency {
				t.Errorf("%s: %d attempts at once, cap %d", k.name, ep.peak, core.DefaultHostConcurrency)
			}
			t.Logf("%-9s %5d attempts for 720 events, at most %d for one, peak %d in flight", k.name, len(ep.snapshot()), most, ep.peak)
		}
	})
}

// heldResults is a store whose result writes each wait for hold first.
type heldResults struct {
	store.Store
	hold func()
}

func (s heldResults) DeliveryRecordResults(ctx context.Context, rs []store.AttemptResult) error {
	s.hold()
	return s.Store.DeliveryRecordResults(ctx, rs)
}

// With the store behind on results, attempts stop once the writer's queue
// is full: their goroutines and results wait in memory, so sending more
// would grow memory with the backlog (36,000 goroutines in a bench run).
// A small batch keeps the test short; the bound is the same at any size.
func TestSimStoreBehindStopsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		release := make(chan struct{})
		ep, sub := s.endpoint("fast", ok(time.Millisecond))
		s.store = heldResults{Store: s.store, hold: func() { <-release }}
		s.start(func(c *Config) { c.ResultBatch = 50 })
		const n = 600 // more than the writer can hold, in 30 workers' shares
		var wg sync.WaitGroup
		for range 30 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range n / 30 {
					s.post("sim.fast", "")
				}
			}()
		}
		wg.Wait()
		time.Sleep(time.Minute) // all that can be sent is, many times over
		// One batch in the writer, its queue, and one result per slot.
		most := 50 + cap(s.d.results.in) + core.DefaultHostConcurrency
		sent := len(ep.snapshot())
		if sent > most || sent < cap(s.d.results.in) {
			t.Errorf("with result writes stuck, %d of %d deliveries were sent; want between %d and %d", sent, n, cap(s.d.results.in), most)
		}
		close(release)
		time.Sleep(time.Hour) // fake time: every delivery's first attempt is due long before
		if st := s.states(sub); st[core.DeliveryDelivered] != n {
			t.Errorf("after the store caught up: %v, want all %d delivered", st, n)
		}
		s.stop()
		perEvent := map[string]int{}
		for _, a := range ep.snapshot() {
			perEvent[a.eventID]++
		}
		if len(perEvent) != n || len(ep.snapshot()) != n {
			t.Errorf("%d attempts for %d events, want one each for %d", len(ep.snapshot()), len(perEvent), n)
		}
		t.Logf("%d sent while results were stuck; all %d delivered once after", sent, n)
	})
}

// countedDue counts refills, each of which takes a millisecond, so that a
// lane asking again at once lets fake time advance instead of hanging.
type countedDue struct {
	store.Store
	n *atomic.Int64
}

func (s countedDue) DeliveryDue(ctx context.Context, p store.DeliveryDueParams) ([]core.Job, time.Time, error) {
	s.n.Add(1)
	time.Sleep(time.Millisecond)
	return s.Store.DeliveryDue(ctx, p)
}

// A retry's time reaches its lane when the result is written. When the
// lane was told at the attempt, a result written after its retry time had
// refills find nothing and ask again at once until the write landed: a
// thousand refills a second per late result.
func TestSimLateResultsDoNotSpinRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		var mu sync.Mutex
		tried := map[string]int{}
		// The first attempt of every third event fails.
		fails := func(now time.Time, n int, eventID string) reply {
			mu.Lock()
			defer mu.Unlock()
			tried[eventID]++
			if tried[eventID] == 1 && len(tried)%3 == 0 {
				return reply{status: 500, latency: 10 * time.Millisecond}
			}
			return reply{status: 200, latency: 10 * time.Millisecond}
		}
		ep, sub := s.endpoint("late", fails, func(sub *core.Subscription) {
			sub.RetrySchedule = []time.Duration{500 * time.Millisecond}
		})
		var refills atomic.Int64
		s.store = countedDue{Store: heldResults{Store: s.store, hold: func() { time.Sleep(5 * time.Second) }}, n: &refills}
		s.start(func(c *Config) { c.Window, c.FreshWindow = 4, 1 })
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.late", 20*time.Millisecond, 30*time.Second)
		wg.Wait()
		time.Sleep(10 * time.Minute)
		if st := s.states(sub); st[core.DeliveryDelivered] != 1500 || len(st) != 1 {
			t.Errorf("states %v, want all 1500 delivered", st)
		}
		s.stop()
		// Small windows make refills many: about one per four deliveries.
		if n := refills.Load(); n > 2000 {
			t.Errorf("%d refills for 1500 events, 500 of them retried", n)
		}
		t.Logf("%d attempts, %d refills", len(ep.snapshot()), refills.Load())
	})
}

// slowUpdate is a store whose subscription updates take delay, as
// skipping a large backlog on disable does.
type slowUpdate struct {
	store.Store
	delay time.Duration
}

func (s slowUpdate) SubscriptionUpdate(ctx context.Context, sub core.Subscription) error {
	time.Sleep(s.delay)
	return s.Store.SubscriptionUpdate(ctx, sub)
}

// A 410 disables its subscription, and the store skips that subscription's
// backlog first, which can take minutes. It must not hold up the result
// writer: attempts wait on it, so every other host would stop sending.
func TestSimDisablingAGoneEndpointStallsNoOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		_, gone := s.endpoint("gone", func(time.Time, int, string) reply { return reply{status: 410, latency: time.Millisecond} })
		fast, _ := s.endpoint("fast", ok(time.Millisecond))
		s.store = slowUpdate{Store: s.store, delay: 20 * time.Second} // under disable's 30 s timeout
		s.start(func(c *Config) { c.ResultBatch = 50 })
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.fast", 5*time.Millisecond, 20*time.Second)
		time.Sleep(time.Second)
		s.post("sim.gone", "")
		wg.Wait()
		time.Sleep(time.Minute)
		lags := s.lags(fast)
		if p := pct(lags, 0.99); p > time.Second || len(lags) != 4000 {
			t.Errorf("healthy endpoint: %d delivered, p99 lag %s, while another subscription was being disabled", len(lags), p)
		}
		if sub, _ := s.subs.Get(gone.ID); sub.State != core.SubDisabled {
			t.Errorf("gone endpoint's subscription is %s, want disabled", sub.State)
		}
		s.stop()
	})
}

// An endpoint answers 410 with a hundred deliveries queued, and disabling
// its subscription takes 5 s: what was in flight when the first 410 came
// back is all it gets (an outside run counted 36 more requests in 42 ms),
// and the subscription is disabled once, not once per 410.
func TestSimGoneEndpointGetsNothingMoreWhileItsDisableRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, gone := s.endpoint("gone", func(time.Time, int, string) reply { return reply{status: 410, latency: 10 * time.Millisecond} })
		s.store = slowUpdate{Store: s.store, delay: 5 * time.Second}
		var disables atomic.Int32
		s.start(func(c *Config) {
			disable := c.Disable
			c.Disable = func(ctx context.Context, id, reason string) error {
				disables.Add(1)
				return disable(ctx, id, reason)
			}
		})
		for range 100 {
			s.post("sim.gone", "")
		}
		time.Sleep(time.Minute)
		states := s.states(gone)
		s.stop()
		n := len(ep.snapshot())
		t.Logf("attempts %d, disables %d, states %v", n, disables.Load(), states)
		if n > 10 {
			t.Errorf("the endpoint that answered 410 got %d attempts, want no more than the 10 in flight", n)
		}
		if sub, _ := s.subs.Get(gone.ID); sub.State != core.SubDisabled || disables.Load() != 1 {
			t.Errorf("subscription %s after %d disables, want disabled once", sub.State, disables.Load())
		}
		if states[core.DeliverySkipped]+states[core.DeliveryFailed] != 100 {
			t.Errorf("states %v, want every delivery failed or skipped", states)
		}
	})
}

// A subscription paused while its endpoint's 410 is on the way is still
// disabled: a pause is not the disable the 410 asks for, and resumed, the
// endpoint would be sent its backlog again.
func TestSimGoneWhilePausedIsStillDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, gone := s.endpoint("gone", func(time.Time, int, string) reply { return reply{status: 410, latency: 2 * time.Second} })
		s.start()
		s.post("sim.gone", "")
		time.Sleep(time.Second) // the attempt is on its way
		ep.mu.Lock()
		inflight := ep.inflight
		ep.mu.Unlock()
		if inflight != 1 {
			t.Fatalf("%d attempts in flight a second after the post, want the one that will answer 410", inflight)
		}
		paused := gone
		paused.State, paused.UpdatedAt = core.SubPaused, time.Now().UTC()
		if err := s.store.SubscriptionUpdate(context.Background(), paused); err != nil {
			t.Fatal(err)
		}
		s.subs.Put(paused)
		time.Sleep(time.Minute)
		sub, _ := s.subs.Get(gone.ID)
		s.stop()
		if sub.State != core.SubDisabled {
			t.Errorf("subscription %s after its endpoint answered 410 while it was paused, want disabled", sub.State)
		}
	})
}

// An endpoint answers 410 once; its subscription is disabled and then
// re-enabled at once (its owner fixed it). What is posted next goes now,
// not at the end of the 410's one-minute hold.
func TestSimReenabledAfterA410SendsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, gone := s.endpoint("back", func(_ time.Time, n int, _ string) reply {
			if n == 0 {
				return reply{status: 410, latency: 5 * time.Millisecond}
			}
			return reply{status: 200, latency: 5 * time.Millisecond}
		})
		s.start()
		s.post("sim.back", "")
		time.Sleep(5 * time.Second) // the 410, its result and the disable
		sub, _ := s.subs.Get(gone.ID)
		if sub.State != core.SubDisabled {
			t.Fatalf("subscription %s after its 410, want disabled", sub.State)
		}
		again := *sub
		again.State, again.DisabledReason, again.UpdatedAt = core.SubActive, "", time.Now().UTC()
		if err := s.store.SubscriptionUpdate(context.Background(), again); err != nil {
			t.Fatal(err)
		}
		s.subs.Put(again)
		s.d.Wake(again.Host, again.ID)
		id := s.post("sim.back", "")
		time.Sleep(time.Second)
		ep.mu.Lock()
		_, got := ep.delivered[id]
		ep.mu.Unlock()
		s.stop()
		if !got {
			t.Error("the event posted after the re-enable was not delivered within a second")
		}
	})
}

// Health says until when an open circuit holds an endpoint, and counts the
// last hour's attempts a minute each, all of them however many (the
// success-rate ring keeps only 200).
func TestSimHealthSaysRetryTimeAndCountsMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, sub := s.endpoint("err", func(time.Time, int, string) reply { return reply{status: 500, latency: 10 * time.Millisecond} })
		okEp, okSub := s.endpoint("ok", ok(10*time.Millisecond))
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.err", 200*time.Millisecond, 20*time.Minute)
		s.traffic(&wg, "sim.ok", 100*time.Millisecond, 20*time.Minute)
		wg.Wait()
		time.Sleep(time.Second) // the last attempts land
		now := time.Now()
		h := s.d.Health(sub.Host, sub.ID)
		switch h.EndpointCircuit {
		case "open":
			if !h.EndpointRetryAt.After(now) || h.EndpointRetryAt.After(now.Add(breakerMaxOpen*12/10)) {
				t.Errorf("open circuit retries at %v, want after now (%v) and within the longest open period", h.EndpointRetryAt, now)
			}
		default:
			if !h.EndpointRetryAt.IsZero() {
				t.Errorf("%s circuit with a retry time %v", h.EndpointCircuit, h.EndpointRetryAt)
			}
		}
		count := func(h Health) (delivered, failed int) {
			if len(h.Minutes) != 60 || !h.Minutes[59].Start.Equal(now.Truncate(time.Minute)) {
				t.Fatalf("%d minutes ending %v, want 60 ending at the current minute", len(h.Minutes), h.Minutes)
			}
			for _, m := range h.Minutes {
				delivered += m.Delivered
				failed += m.Failed
			}
			return delivered, failed
		}
		if d, f := count(h); d != 0 || f != len(ep.snapshot()) {
			t.Errorf("failing endpoint: minutes count %d delivered, %d failed; it saw %d attempts, all failed", d, f, len(ep.snapshot()))
		}
		if d, f := count(s.d.Health(okSub.Host, okSub.ID)); f != 0 || d != len(okEp.snapshot()) || d <= healthRing {
			t.Errorf("healthy endpoint: minutes count %d delivered, %d failed; it saw %d attempts (over the ring's %d)", d, f, len(okEp.snapshot()), healthRing)
		}
		s.stop()
	})
}

// A 429 with Retry-After: 30 on an endpoint without a rate_limit, with
// twenty deliveries waiting: when the pause ends they do not all go at once.
// The 429 cut its rate, and that cut recovers from the pause's end, not
// during it (it had lifted by then, and the endpoint's whole share went out
// in the same millisecond).
func TestSimRetryAfterEndsWithoutABurst(t *testing.T) {
	// A 503 with Retry-After is an endpoint overloaded, or down for a
	// while, as much as a 429 is one over its quota: after its pause the
	// whole queue went out at once (an outside run: 10 requests in the
	// first instant, to an endpoint that had just said 503).
	for _, status := range []int{429, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) { retryAfterEndsWithoutABurst(t, status) })
	}
}

func retryAfterEndsWithoutABurst(t *testing.T, status int) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		begin := time.Now()
		ep, _ := s.endpoint("ra", func(now time.Time, _ int, _ string) reply {
			if now.Sub(begin) < time.Second { // what went at once is told to wait
				return reply{status: status, retryAfter: 30 * time.Second, latency: time.Millisecond}
			}
			return reply{status: 200, latency: 5 * time.Millisecond}
		})
		s.start()
		for range 20 {
			s.post("sim.ra", "")
		}
		time.Sleep(3 * time.Minute)
		all := ep.snapshot()
		s.stop()
		end := pauseEnd(all, begin) // the last 429's pause
		first, later := 0, 0
		for _, a := range all {
			switch {
			case a.start.Sub(begin) < time.Second:
			case a.start.Before(end):
				t.Fatalf("an attempt at %s, inside the pause (until %s)", a.start, end)
			case a.start.Before(end.Add(time.Second)):
				first++
			default:
				later++
			}
		}
		if first+later < 20 {
			t.Fatalf("%d attempts after the pause, want the twenty deliveries", first+later)
		}
		if first > 2 {
			t.Errorf("%d attempts in the first second after Retry-After ended, want at most 2", first)
		}
		// Nor later: the back-off lifted at the rate seen before the cut
		// (here one a second), and the twelve still queued then went in
		// 8 ms (an outside run, ten seconds after the pause).
		perSec := map[int64]int{}
		for _, a := range all {
			if !a.start.Before(end) {
				perSec[a.start.Sub(end).Milliseconds()/1000]++
			}
		}
		busiest := 0
		for _, n := range perSec {
			busiest = max(busiest, n)
		}
		if busiest > 3 {
			t.Errorf("%d attempts in one second of the drain after Retry-After ended, want at most 3", busiest)
		}
	})
}

// A subscription disabled while its circuit holds its deliveries (queued
// in the dispatcher), then made active again before the circuit's probe:
// the disable wrote them skipped, and nothing of them may go out (a
// hostile pass saw all twelve sent after the re-enable, skipped turned
// delivered). Only a replay brings them back. Elsewhere: both changes made
// on another node sharing the store and heard in one reload, so the
// subscription is active when this node looks, and only the reload's word
// that it changed keeps its queue from going out.
func TestSimReenabledSubscriptionSendsNothingItsDisableSkipped(t *testing.T) {
	for _, where := range []string{"here", "elsewhere"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { reenabledSendsNothingSkipped(t, where == "elsewhere") })
		})
	}
}

func reenabledSendsNothingSkipped(t *testing.T, elsewhere bool) {
	s := newSim(t)
	var fixed atomic.Bool
	ep, sub := s.endpoint("held", func(time.Time, int, string) reply {
		if fixed.Load() {
			return reply{status: 200, latency: 10 * time.Millisecond}
		}
		return reply{status: 500, latency: 10 * time.Millisecond}
	}, func(sub *core.Subscription) {
		sub.RetrySchedule = []time.Duration{time.Second, time.Second, time.Second, time.Second, time.Second}
	})
	s.start()
	here := subs.NewService(s.store, s.subs, s.d.Wake)
	changer := here
	if elsewhere {
		list, err := s.store.SubscriptionListAll(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		changer = subs.NewService(s.store, subs.New(list), nil) // another node: wakes nothing here
	}
	const n = 12
	for range n {
		s.post("sim.held", "")
	}
	deadline := time.Now().Add(time.Minute)
	for s.d.Health(sub.Host, sub.ID).Circuit != "open" {
		if time.Now().After(deadline) {
			t.Fatal("the circuit did not open within a minute of 500s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Retries come due 0.8-1.2 s apart: past them, the lane holds them all
	// queued behind the open circuit, which is what must not go out.
	time.Sleep(2 * time.Second)
	synctest.Wait()
	s.d.mu.Lock()
	queued := s.d.hosts[sub.Host].lanes[sub.ID].queued()
	s.d.mu.Unlock()
	if queued == 0 {
		t.Fatal("nothing queued behind the open circuit: the test would show nothing")
	}
	fixed.Store(true)
	if _, err := changer.Disable(context.Background(), sub.ID, "disabled by request"); err != nil {
		t.Fatal(err)
	}
	// Counted by start: attempts in flight when the circuit opened end
	// after this instant, and were sent before the disable.
	reenabled := time.Now()
	if _, err := changer.Update(context.Background(), "", sub.ID, func(s *core.Subscription) error {
		s.State, s.DisabledReason = core.SubActive, ""
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if elsewhere {
		changed, err := here.Reload(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !changed[sub.ID] {
			t.Fatalf("the reload says %v changed, want the subscription", changed)
		}
		s.d.Reloaded(changed)
	}
	time.Sleep(10 * time.Minute) // past every probe the open circuit would make
	synctest.Wait()
	sent := 0
	for _, a := range ep.snapshot() {
		if !a.start.Before(reenabled) {
			sent++
		}
	}
	if sent != 0 {
		t.Errorf("%d attempts after the re-enable, want none: the disable skipped every delivery", sent)
	}
	if st := s.states(sub); st[core.DeliverySkipped] != n {
		t.Errorf("deliveries %v, want all %d skipped", st, n)
	}
	// Active again, it still delivers what comes next.
	s.post("sim.held", "")
	time.Sleep(time.Minute)
	synctest.Wait()
	if st := s.states(sub); st[core.DeliveryDelivered] != 1 {
		t.Errorf("deliveries %v, want the event after the re-enable delivered", st)
	}
	s.stop()
}

// An endpoint's circuit closes and its ramp begins; then its node restarts
// (as a node taking its shard over would, knowing nothing of it). The ramp
// goes on where it was, with its base, from what the store keeps with the
// subscription: in memory alone, the new owner sent the backlog unpaced (an
// outside run on three PostgreSQL nodes: 1,000-3,800 a second to an
// endpoint its ramp had at 1-3).
func TestSimRampGoesOnAfterARestart(t *testing.T) {
	t.Run("endpoint", func(t *testing.T) { rampAfterARestart(t, reply{status: 500, latency: 5 * time.Millisecond}) })
	// Refused connections open the host's circuit, not the endpoint's: its
	// ramp was in memory only, and a restart 160 s into it sent an outside
	// run's 10,303 pending in 3 s, 4,710 in one of them.
	t.Run("host", func(t *testing.T) { rampAfterARestart(t, reply{refused: true}) })
}

func rampAfterARestart(t *testing.T, down reply) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		start := time.Now()
		downAt, upAt := start.Add(2*time.Minute), start.Add(5*time.Minute)
		ep, sub := s.endpoint("flaky", downBetween(downAt, upAt, down))
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.flaky", 50*time.Millisecond, 6*time.Minute)
		wg.Wait()
		var closedAt time.Time
		for deadline := time.Now().Add(30 * time.Minute); closedAt.IsZero() && time.Now().Before(deadline); time.Sleep(time.Second) {
			for _, a := range ep.snapshot() {
				if a.class == send.Delivered && !a.start.Before(upAt) {
					closedAt = a.end
					break
				}
			}
		}
		if closedAt.IsZero() {
			t.Fatal("the endpoint's circuit never closed")
		}
		time.Sleep(time.Until(closedAt.Add(time.Minute)))
		recovering := func(when string) {
			h := s.d.Health(sub.Host, sub.ID)
			if !h.Recovering || !h.RampEndsAt.After(time.Now()) || h.RampEndsAt.After(closedAt.Add(rampDuration*rampSlow)) {
				t.Errorf("%s: health says recovering %v, ramp ending at %v (closed at %v): want recovering, within the ramp", when,
					h.Recovering, h.RampEndsAt, closedAt)
			}
		}
		recovering("a minute into the ramp")
		restartAt := time.Now()
		s.restart()
		time.Sleep(2 * time.Minute)
		recovering("two minutes after the restart")
		perSec := map[int64]int{}
		for _, a := range ep.snapshot() {
			if a.class == send.Delivered && !a.start.Before(restartAt) {
				perSec[a.start.Unix()]++
			}
		}
		pending := s.states(sub)[core.DeliveryPending]
		s.stop()
		// The rate before the trip: 20 a second and the failing minute's
		// retries (30 is generous); two to three minutes into the ramp it
		// allows 40-60 % of it.
		busiest := 0
		for _, n := range perSec {
			busiest = max(busiest, n)
		}
		t.Logf("after the restart: busiest second %d, %d still pending", busiest, pending)
		if busiest > 30*0.7+1 {
			t.Errorf("%d deliveries in one second after the restart, where the ramp allows at most %.0f", busiest, 30*0.7)
		}
		if pending == 0 {
			t.Error("nothing left pending: the restart found no backlog to pace")
		}
	})
}

// A node restarts (a deploy, or kill -9) while an endpoint's circuit is
// open and another endpoint's Retry-After holds it. Both lived in memory
// only: the restarted node sent the failing endpoint 20 more attempts
// before its circuit opened again, and the told-to-wait one its whole
// queue at once (an outside run: 20-30 attempts to each failing endpoint
// after each restart, and a 503 with Retry-After: 20 answered again 12.6 s
// later). The owner publishes both to the store; the restarted node takes
// them up for endpoints it knows nothing of.
func TestSimOpenCircuitAndRetryAfterOutliveARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		failing, _ := s.endpoint("failing", func(time.Time, int, string) reply { return reply{status: 500, latency: 5 * time.Millisecond} })
		told, _ := s.endpoint("told", func(time.Time, int, string) reply {
			return reply{status: 503, retryAfter: 5 * time.Minute, latency: 5 * time.Millisecond}
		})
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.failing", 100*time.Millisecond, time.Minute)
		s.traffic(&wg, "sim.told", time.Second, time.Minute)
		wg.Wait()
		time.Sleep(5 * time.Second) // what the node publishes, it publishes within a second
		restartAt := time.Now()
		s.restart()
		time.Sleep(time.Minute)
		after := func(ep *endpoint, within time.Duration) int {
			n := 0
			for _, a := range ep.snapshot() {
				if !a.start.Before(restartAt) && a.start.Before(restartAt.Add(within)) {
					n++
				}
			}
			return n
		}
		nf, nt := after(failing, 30*time.Second), after(told, time.Minute)
		s.stop()
		t.Logf("after the restart: %d attempts to the failing endpoint in 30 s, %d to the one told to wait in a minute", nf, nt)
		// Its circuit was open: one probe, then (failed) at least 48 s.
		if nf > 1 {
			t.Errorf("%d attempts in 30 s to an endpoint whose circuit was open, after a restart", nf)
		}
		if nt > 0 {
			t.Errorf("%d attempts to an endpoint told to wait 5 minutes, in the minute after a restart", nt)
		}
	})
}

// A subscription whose retry schedule is shorter than the circuit's first
// open period (30 s) sees its endpoint answer 503 for 2 s. The circuit
// opened on the outage's 20 failures, and every delivery it held was
// failed untried once its 18 s window had passed, before the probe that
// would have found the endpoint back (an outside run: 280 of 300 failed
// with no attempt; with `[]`, 180 of 200). Each goes once a probe finds
// the endpoint up.
func TestSimShortScheduleOutlivesTheCircuitThatHeldIt(t *testing.T) {
	for _, schedule := range [][]time.Duration{{5 * time.Second, 5 * time.Second, 5 * time.Second}, {}} {
		t.Run(fmt.Sprint(schedule), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newSim(t)
				start := time.Now()
				_, sub := s.endpoint("blip", downBetween(start, start.Add(2*time.Second), reply{status: 503, latency: 5 * time.Millisecond}),
					func(sub *core.Subscription) { sub.RetrySchedule = schedule })
				s.start()
				var wg sync.WaitGroup
				s.traffic(&wg, "sim.blip", 33*time.Millisecond, 10*time.Second)
				wg.Wait()
				time.Sleep(10 * time.Minute) // the recovery ramp's five minutes, and some
				untried, states := 0, map[core.DeliveryState]int{}
				for _, d := range s.deliveries(sub) {
					states[d.State]++
					if d.State == core.DeliveryFailed && d.AttemptCount == 0 {
						untried++
					}
				}
				s.stop()
				t.Logf("after a 2 s outage: %v, %d failed untried", states, untried)
				if untried > 0 || states[core.DeliveryPending] > 0 {
					t.Errorf("%d deliveries failed untried and %d still pending ten minutes after a 2 s outage: %v", untried, states[core.DeliveryPending], states)
				}
				if want := 250; states[core.DeliveryDelivered] < want {
					t.Errorf("%d delivered of %d, want at least %d (only the outage's own attempts fail)", states[core.DeliveryDelivered], 300, want)
				}
			})
		})
	}
}

// The same schedule with an endpoint that stays down: what the circuit
// holds is failed untried after the first probe past its window fails,
// not kept until the endpoint is back.
func TestSimShortScheduleBehindADownEndpointIsFailedAfterAProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, sub := s.endpoint("down", func(time.Time, int, string) reply { return reply{status: 503, latency: 5 * time.Millisecond} },
			func(sub *core.Subscription) {
				sub.RetrySchedule = []time.Duration{5 * time.Second, 5 * time.Second, 5 * time.Second}
			})
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.down", 33*time.Millisecond, 10*time.Second)
		wg.Wait()
		time.Sleep(3 * time.Minute)
		states := s.states(sub)
		sent := len(ep.snapshot())
		s.stop()
		t.Logf("three minutes after: %v, %d attempts", states, sent)
		if states[core.DeliveryPending] > 0 {
			t.Errorf("%d deliveries still pending behind an endpoint down for three minutes: %v", states[core.DeliveryPending], states)
		}
		if sent > 40 {
			t.Errorf("%d attempts to an endpoint that was down throughout, want the breaker's 20 and its probes", sent)
		}
	})
}

// The same after a restart inside the pause: the pause was taken up from
// the store, but not the rate cut that came with it, so the whole queue
// went when it ended (an outside run: 9 requests at once, after a kill -9,
// to an endpoint sent one every 30 s without one). A pause taken up starts
// a cut from the least rate.
func TestSimRetryAfterTakenUpAfterARestartEndsWithoutABurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		begin := time.Now()
		ep, _ := s.endpoint("ra", func(now time.Time, _ int, _ string) reply {
			if now.Sub(begin) < time.Second {
				return reply{status: 429, retryAfter: 30 * time.Second, latency: time.Millisecond}
			}
			return reply{status: 200, latency: 5 * time.Millisecond}
		})
		s.start()
		for range 20 {
			s.post("sim.ra", "")
		}
		time.Sleep(5 * time.Second) // published within a second
		s.restart()
		time.Sleep(3 * time.Minute)
		all := ep.snapshot()
		s.stop()
		end := pauseEnd(all, begin)
		first, total := 0, 0
		for _, a := range all {
			if a.start.Sub(begin) < time.Second {
				continue
			}
			total++
			if a.start.Before(end.Add(-time.Second)) {
				t.Fatalf("an attempt at %s, inside the pause (until %s)", a.start.Sub(begin), end.Sub(begin))
			}
			if a.start.Before(end.Add(time.Second)) {
				first++
			}
		}
		t.Logf("after the pause taken up: %d attempts in its first second, %d in all", first, total)
		if total < 20 {
			t.Fatalf("%d attempts after the pause, want the twenty deliveries", total)
		}
		if first > 2 {
			t.Errorf("%d attempts in the first second after a Retry-After taken up after a restart ended, want at most 2", first)
		}
	})
}

// An endpoint answering 429 without Retry-After is held to its back-off's
// rate; a restart forgot it and sent the queue up to its floor at once (an
// outside run: 10 requests in the first instant, to an endpoint answering
// 429 to everything). The owner publishes the cut with its circuits.
func TestSimRateCutOutlivesARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t)
		ep, _ := s.endpoint("quota", func(time.Time, int, string) reply {
			return reply{status: 429, latency: 5 * time.Millisecond}
		})
		s.start()
		var wg sync.WaitGroup
		s.traffic(&wg, "sim.quota", 200*time.Millisecond, 30*time.Second)
		wg.Wait()
		time.Sleep(2 * time.Second) // published within a second
		restartAt := time.Now()
		s.restart()
		time.Sleep(10 * time.Second)
		first, tenth := 0, 0
		for _, a := range ep.snapshot() {
			if d := a.start.Sub(restartAt); d >= 0 && d < time.Second {
				first++
			} else if d >= 0 && d < 10*time.Second {
				tenth++
			}
		}
		s.stop()
		t.Logf("after the restart: %d attempts in the first second, %d in the next nine", first, tenth)
		if first > 2 {
			t.Errorf("%d attempts in the first second after a restart to an endpoint held to its 429 back-off", first)
		}
	})
}

// pauseEnd is when the last Retry-After: 30 answered in the first second
// from begin ends.
func pauseEnd(all []simAttempt, begin time.Time) time.Time {
	var end time.Time
	for _, a := range all {
		if a.start.Sub(begin) < time.Second && a.end.Add(30*time.Second).After(end) {
			end = a.end.Add(30 * time.Second)
		}
	}
	return end
}
