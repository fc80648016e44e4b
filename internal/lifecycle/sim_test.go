//go:build !race

package lifecycle

// Simulations of days of an endpoint's life, under testing/synctest: the
// real dispatcher, store, ingest and lifecycle, endpoints in memory. Built
// without -race, as dispatch's simulations are (instrumented they take
// minutes; go1.26.8's synctest timers fault under it).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"hookd/internal/core"
	"hookd/internal/dispatch"
	"hookd/internal/ingest"
	"hookd/internal/send"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/testenv"
	"hookd/webhook"
)

// delivered is one attempt an endpoint answered.
type delivered struct {
	at     time.Time
	typ    string
	about  string // an operational event's subscription_id
	status int
	data   map[string]any
}

// world is one node and its endpoints, by URL.
type world struct {
	t      *testing.T
	store  store.Store
	svc    *subs.Service
	d      *dispatch.Dispatcher
	ingest *ingest.Ingester
	life   *Lifecycle

	mu     sync.Mutex
	answer map[string]func(now time.Time) int // URL → status
	seen   map[string][]delivered             // URL → attempts
	shed   map[string]bool                    // subscriptions being shed (Config.Shedding)
}

func (w *world) shedding(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.shed[id]
}

func newWorld(t *testing.T, disableAfter time.Duration) *world {
	dir := t.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "hookd-life"); err == nil {
			dir = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "life.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, store: st, answer: map[string]func(time.Time) int{}, seen: map[string][]delivered{}}
	reg := subs.New(nil)
	w.svc = subs.NewService(st, reg, func(host, id string) { w.d.Wake(host, id) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w.d = dispatch.New(dispatch.Config{Store: st, Subs: reg, Sender: w, Log: log, Resync: 10 * time.Minute,
		Disable: func(ctx context.Context, id, reason string) error { return w.life.Disable(ctx, id, reason) },
		Failing: func(ctx context.Context, f dispatch.Failure) { w.life.Failing(ctx, Failure(f)) }})
	w.ingest = ingest.New(st, reg, w.d.Notify, ingest.WithReservations(w.d.Reserve, w.d.Release))
	w.life = New(Config{Store: st, Subs: w.svc, Ingest: w.ingest, DisableAfter: disableAfter, Log: log, Shedding: w.shedding})
	if err := w.d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.life.Start()
	return w
}

func (w *world) stop() {
	w.life.Stop()
	w.ingest.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w.d.Stop(ctx)
	w.store.Close()
}

// subscribe adds a subscription at url (its own host) to patterns,
// answering with answer.
func (w *world) subscribe(url string, patterns []string, answer func(now time.Time) int) core.Subscription {
	host, err := core.EndpointHost("url", url)
	if err != nil {
		w.t.Fatal(err)
	}
	secret, _ := webhook.NewSecret()
	now := time.Now().UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: url, Host: host,
		EventTypes: patterns, Secret: secret, State: core.SubActive, CreatedAt: now, UpdatedAt: now,
		RetrySchedule: []time.Duration{time.Minute, 10 * time.Minute, time.Hour}}
	if err := w.svc.Create(context.Background(), sub); err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	w.answer[url] = answer
	w.mu.Unlock()
	return sub
}

// Send answers as the endpoint at sub's URL does, after 10 ms.
func (w *world) Send(ctx context.Context, sub *core.Subscription, job *core.Job, now time.Time) send.Outcome {
	time.Sleep(10 * time.Millisecond)
	w.mu.Lock()
	status := w.answer[sub.URL](now)
	var data map[string]any
	json.Unmarshal(job.Event.Payload, &data)
	about, _ := data["subscription_id"].(string)
	w.seen[sub.URL] = append(w.seen[sub.URL], delivered{at: now, typ: job.Event.Type, about: about, status: status, data: data})
	w.mu.Unlock()
	out := send.Outcome{StartedAt: now, Duration: 10 * time.Millisecond, StatusCode: status, Class: send.Retry}
	if status >= 200 && status < 300 {
		out.Class = send.Delivered
	}
	return out
}

// events lists what url was sent of type typ and answered 2xx.
func (w *world) events(url, typ string) []delivered {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []delivered
	for _, d := range w.seen[url] {
		if d.typ == typ && d.status < 300 {
			out = append(out, d)
		}
	}
	return out
}

// traffic posts an event of typ every interval for span, in the background.
func (w *world) traffic(wg *sync.WaitGroup, typ string, interval, span time.Duration) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for end := time.Now().Add(span); time.Now().Before(end); time.Sleep(interval) {
			if _, err := w.ingest.Submit(context.Background(), core.Event{TenantID: core.DefaultTenant, Type: typ, Payload: []byte(`{}`)}); err != nil {
				w.t.Error(err)
				return
			}
		}
	}()
}

func (w *world) state(id string) core.Subscription {
	s, err := w.store.SubscriptionGet(context.Background(), "", id)
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

func always(status int) func(time.Time) int { return func(time.Time) int { return status } }

const ops = "https://ops.example/hooks" // the tenant's operations endpoint, subscribed to hookd.*

// Five days of failures, with attempts every day, disable the subscription,
// and its owner hears of it exactly once, on its hookd.* endpoint, never
// on the failing endpoint itself (which also asks for hookd.*).
func TestSimFiveDaysOfFailuresDisable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, DefaultDisableAfter)
		defer w.stop()
		start := time.Now()
		dead := w.subscribe("https://dead.example/hook", []string{"order.*", "hookd.*"}, always(500))
		w.subscribe(ops, []string{"hookd.*"}, always(200))
		var wg sync.WaitGroup
		w.traffic(&wg, "order.created", 6*time.Hour, 6*24*time.Hour)
		// Three more half an hour before the disable: still retrying when
		// it comes, so it skips them.
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(DefaultDisableAfter - 30*time.Minute)
			w.traffic(&wg, "order.created", time.Second, 3*time.Second)
		}()
		wg.Wait()
		time.Sleep(time.Hour)

		got := w.state(dead.ID)
		disabled := w.events(ops, TypeDisabled)
		if got.State != core.SubDisabled || len(disabled) != 1 {
			t.Fatalf("after six days of 500s: state %s (%q), %d disabled events", got.State, got.DisabledReason, len(disabled))
		}
		if at := disabled[0].at.Sub(start); at < DefaultDisableAfter || at > DefaultDisableAfter+2*time.Hour {
			t.Errorf("disabled event %s after the first failure, want just over %s", at, DefaultDisableAfter)
		}
		if disabled[0].about != dead.ID {
			t.Errorf("the disabled event names %q, want %s", disabled[0].about, dead.ID)
		}
		// The reason names the period and since when, on the subscription
		// and in the event.
		reason := "every attempt failed for 5 days (since " + start.UTC().Format(time.RFC3339) + ")"
		if got.DisabledReason != reason || disabled[0].data["reason"] != reason {
			t.Errorf("disabled for %q, the event says %q; want %q", got.DisabledReason, disabled[0].data["reason"], reason)
		}
		if n := len(w.events(ops, TypeFailing)); n < 1 {
			t.Errorf("%d failing events before the disable, want at least one", n)
		}
		// It says what the disable left unsent, from when: what a bulk
		// replay would take. The three were pending then; one created at
		// the very instant of the disable may have been too, or skipped at
		// ingest after it; later ones were skipped at ingest.
		var before, at []time.Time
		for cursor := ""; ; {
			page, err := w.store.DeliveryList(context.Background(), store.DeliveryListParams{SubscriptionID: dead.ID, Cursor: cursor, Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range page.Data {
				switch {
				case d.State != core.DeliverySkipped:
				case d.CreatedAt.Before(got.UpdatedAt):
					before = append(before, d.CreatedAt)
				case d.CreatedAt.Equal(got.UpdatedAt):
					at = append(at, d.CreatedAt)
				}
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		slices.SortFunc(before, time.Time.Compare)
		n, _ := disabled[0].data["skipped"].(float64)
		if len(before) != 3 || int(n) < len(before) || int(n) > len(before)+len(at) ||
			disabled[0].data["skipped_since"] != before[0].UTC().Format(time.RFC3339Nano) {
			t.Errorf("the disabled event says %v skipped since %v; the store holds %d skipped created before it (%v) and %d at its instant",
				disabled[0].data["skipped"], disabled[0].data["skipped_since"], len(before), before, len(at))
		}
		w.mu.Lock()
		for _, d := range w.seen[dead.URL] {
			if core.Reserved(d.typ) {
				t.Errorf("the failing endpoint was sent %s about itself", d.typ)
			}
		}
		w.mu.Unlock()
		t.Logf("disabled %s after the first failure: %q", disabled[0].at.Sub(start), got.DisabledReason)
	})
}

// With --disable-after 0, six days of nothing but failures disable
// nothing; the owner still hears it fails.
func TestSimDisableAfterZeroNeverDisables(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, 0)
		defer w.stop()
		dead := w.subscribe("https://dead.example/hook", []string{"order.*"}, always(500))
		w.subscribe(ops, []string{"hookd.*"}, always(200))
		var wg sync.WaitGroup
		w.traffic(&wg, "order.created", 6*time.Hour, 6*24*time.Hour)
		wg.Wait()
		time.Sleep(time.Hour)
		if got, n := w.state(dead.ID), len(w.events(ops, TypeDisabled)); got.State != core.SubActive || n != 0 {
			t.Fatalf("six days of 500s with --disable-after 0: %s (%q), %d disabled events; want active, none", got.State, got.DisabledReason, n)
		}
		if n := len(w.events(ops, TypeFailing)); n < 1 {
			t.Errorf("%d failing events, want at least one", n)
		}
	})
}

// A success on the fourth day starts the count again: six days in, the
// subscription is still active.
func TestSimASuccessResetsTheClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, DefaultDisableAfter)
		defer w.stop()
		start := time.Now()
		day4 := start.Add(4 * 24 * time.Hour)
		flaky := w.subscribe("https://flaky.example/hook", []string{"order.*"}, func(now time.Time) int {
			if !now.Before(day4) && now.Before(day4.Add(time.Hour)) {
				return 200
			}
			return 500
		})
		w.subscribe(ops, []string{"hookd.*"}, always(200))
		var wg sync.WaitGroup
		w.traffic(&wg, "order.created", 30*time.Minute, 6*24*time.Hour)
		wg.Wait()
		if got := w.state(flaky.ID); got.State != core.SubActive {
			t.Fatalf("six days in, with a success on day four: %s (%q)", got.State, got.DisabledReason)
		}
		if n := len(w.events(ops, TypeDisabled)); n != 0 {
			t.Errorf("%d disabled events", n)
		}
		recovered := w.events(ops, TypeRecovered)
		if len(recovered) < 1 {
			t.Fatalf("no recovered event after day four's success")
		}
		// It says since when it failed, for how long, and the attempt
		// that succeeded (Send answers in 10 ms).
		d := recovered[0].data
		since, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(d["failing_since"]))
		ok, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(d["succeeded_at"]))
		if since.Sub(start) > time.Hour || ok.Before(day4) || ok.After(day4.Add(time.Hour)) || d["status"] != 200.0 || d["duration_ms"] != 10.0 ||
			d["failed_for_seconds"] != float64(ok.Sub(since)/time.Second) || d["subscription_id"] != flaky.ID {
			t.Errorf("the recovered event says %v; want it failing since the start, for %s, recovered by a 200 of 10 ms on day four", d, ok.Sub(since))
		}
	})
}

// An endpoint flapping every ten minutes for five hours tells its owner at
// most one failing and one recovered an hour.
func TestSimFlappingAlertsAtMostHourly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, DefaultDisableAfter)
		defer w.stop()
		start := time.Now()
		w.subscribe("https://flap.example/hook", []string{"order.*"}, func(now time.Time) int {
			if int(now.Sub(start)/(10*time.Minute))%2 == 1 {
				return 500
			}
			return 200
		})
		w.subscribe(ops, []string{"hookd.*"}, always(200))
		var wg sync.WaitGroup
		w.traffic(&wg, "order.created", 2*time.Second, 5*time.Hour)
		wg.Wait()
		time.Sleep(5 * time.Minute)
		failing, recovered := w.events(ops, TypeFailing), w.events(ops, TypeRecovered)
		for i := 1; i < len(failing); i++ {
			if gap := failing[i].at.Sub(failing[i-1].at); gap < time.Hour {
				t.Errorf("failing events %s apart", gap)
			}
		}
		// Pairs: each recovered follows its failing, before the next failing.
		for i, r := range recovered {
			if i >= len(failing) || r.at.Before(failing[i].at) || (i+1 < len(failing) && r.at.After(failing[i+1].at)) {
				t.Fatalf("recovered event %d at %s is not paired with failing event %d", i, r.at.Sub(start), i)
			}
		}
		if len(failing) < 2 || len(recovered) < 2 || len(failing) > 6 || len(recovered) > 6 {
			t.Errorf("%d failing and %d recovered events over five hours of flapping, want 2..6 each", len(failing), len(recovered))
		}
		t.Logf("five hours flapping every ten minutes: %d failing, %d recovered events", len(failing), len(recovered))
	})
}

// A subscription disabled after five days of failures, turned back on
// (PATCH {state: active}) once its endpoint is fixed, stays on: the days
// it failed before are behind it, though the scan runs every minute and
// no delivery comes to prove it for hours. Failing five days again
// disables it once more, with one more event.
func TestSimTurnedBackOnStartsAfresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, DefaultDisableAfter)
		defer w.stop()
		var status atomic.Int64
		status.Store(500)
		dead := w.subscribe("https://dead.example/hook", []string{"order.*"}, func(time.Time) int { return int(status.Load()) })
		w.subscribe(ops, []string{"hookd.*"}, always(200))
		fiveDays := func() {
			t.Helper()
			var wg sync.WaitGroup
			w.traffic(&wg, "order.created", 6*time.Hour, DefaultDisableAfter+12*time.Hour)
			wg.Wait()
			time.Sleep(time.Hour)
		}
		fiveDays()
		if got, n := w.state(dead.ID), len(w.events(ops, TypeDisabled)); got.State != core.SubDisabled || n != 1 {
			t.Fatalf("after five days of 500s: %s, %d disabled events; want disabled, 1", got.State, n)
		}

		status.Store(200) // fixed
		on, err := w.svc.Update(context.Background(), "", dead.ID, func(s *core.Subscription) error {
			s.State, s.DisabledReason = core.SubActive, ""
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Hour) // 180 scans, and no delivery
		if got, n := w.state(dead.ID), len(w.events(ops, TypeDisabled)); got.State != core.SubActive || n != 1 {
			t.Fatalf("3 h after being turned back on at %s: %s (%q), %d disabled events; want active, 1",
				on.UpdatedAt.Format(time.RFC3339), got.State, got.DisabledReason, n)
		}

		status.Store(500)
		fiveDays()
		got, disabled := w.state(dead.ID), w.events(ops, TypeDisabled)
		if got.State != core.SubDisabled || len(disabled) != 2 {
			t.Fatalf("failing five days again: %s, %d disabled events; want disabled, 2", got.State, len(disabled))
		}
		if at := disabled[1].at.Sub(on.UpdatedAt); at < DefaultDisableAfter {
			t.Errorf("disabled again %s after being turned back on, before its five days", at)
		}
	})
}

// An endpoint fails, is alerted failing, then answers again while ingest
// sheds its new deliveries (its backlog grew past the threshold). Told
// "recovered" then, its owner would believe its events arrive while they
// are skipped (an outside run on PostgreSQL saw it): the event waits until
// shedding ends, and is sent once.
func TestSimRecoveredWaitsForShedding(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t, DefaultDisableAfter)
		defer w.stop()
		start := time.Now()
		sub := w.subscribe("https://shed.example/hook", []string{"order.*"}, func(now time.Time) int {
			if now.Sub(start) < 10*time.Minute {
				return 500
			}
			return 200
		})
		w.subscribe(ops, []string{"hookd.*"}, always(200))
		w.mu.Lock()
		w.shed = map[string]bool{sub.ID: true}
		w.mu.Unlock()
		var wg sync.WaitGroup
		w.traffic(&wg, "order.created", 2*time.Second, time.Hour)
		time.Sleep(30 * time.Minute)
		early := len(w.events(ops, TypeRecovered))
		w.mu.Lock()
		w.shed = nil
		w.mu.Unlock()
		shedEnded := time.Now()
		wg.Wait()
		time.Sleep(5 * time.Minute)
		if n := len(w.events(ops, TypeFailing)); n != 1 {
			t.Fatalf("%d failing events, want 1", n)
		}
		recovered := w.events(ops, TypeRecovered)
		if early != 0 || len(recovered) != 1 || recovered[0].at.Before(shedEnded) {
			t.Fatalf("recovered events: %d while shedding, %d in all (want 0, then 1 after it ended)", early, len(recovered))
		}
		t.Logf("recovered sent %s after shedding ended", recovered[0].at.Sub(shedEnded))
	})
}
