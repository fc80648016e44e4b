package ingest

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/metrics"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/testenv"
)

// gatedStore holds the first batch until released and records batch sizes;
// it refuses any batch holding a "poison" event.
type gatedStore struct {
	store.Store
	entered chan struct{} // closed when the first batch reaches the gate
	gate    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	sizes   []int
}

func (g *gatedStore) EventInsertBatch(ctx context.Context, b []store.EventInsert) ([]store.EventInsertResult, error) {
	g.once.Do(func() { close(g.entered); <-g.gate })
	g.mu.Lock()
	g.sizes = append(g.sizes, len(b))
	g.mu.Unlock()
	for _, e := range b {
		if e.Event.Type == "poison.pill" {
			return nil, errors.New("refused")
		}
	}
	return g.Store.EventInsertBatch(ctx, b)
}

var releaseOnce sync.Mutex

func (g *gatedStore) release() {
	releaseOnce.Lock()
	defer releaseOnce.Unlock()
	select {
	case <-g.gate:
	default:
		close(g.gate)
	}
}

func setup(t *testing.T) (*gatedStore, *Ingester, *[]core.Job, *sync.Mutex) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hookd.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "http://a.example/",
		Host: "a.example:80", EventTypes: []string{"*"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", State: core.SubActive}
	if err := st.SubscriptionCreate(context.Background(), sub); err != nil {
		t.Fatal(err)
	}
	g := &gatedStore{Store: st, entered: make(chan struct{}), gate: make(chan struct{})}
	var mu sync.Mutex
	var jobs []core.Job
	in := New(g, subs.New([]core.Subscription{sub}), func(js []core.Job) {
		mu.Lock()
		jobs = append(jobs, js...)
		mu.Unlock()
	})
	t.Cleanup(in.Close)
	t.Cleanup(g.release) // runs first: a failed test must not leave the loop stuck
	return g, in, &jobs, &mu
}

func TestConcurrentSubmitsShareOneCommit(t *testing.T) {
	g, in, jobs, mu := setup(t)
	var wg sync.WaitGroup
	submit := func() {
		defer wg.Done()
		if _, err := in.Submit(context.Background(), core.Event{TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`)}); err != nil {
			t.Error(err)
		}
	}
	wg.Add(1)
	go submit() // this one's commit is held at the gate
	<-g.entered
	for range 50 {
		wg.Add(1)
		go submit()
	}
	testenv.Eventually(t, 5*time.Second, "50 requests queued behind it", func() bool { return len(in.in) == 50 })
	g.release()
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.sizes) != 2 || g.sizes[0] != 1 || g.sizes[1] != 50 {
		t.Errorf("batch sizes %v, want [1 50]", g.sizes)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(*jobs) != 51 {
		t.Errorf("%d deliveries handed to the dispatcher, want 51", len(*jobs))
	}
}

func TestOneBadEventDoesNotFailItsBatch(t *testing.T) {
	g, in, _, _ := setup(t)
	results := make(chan error, 11)
	submit := func(typ string) {
		_, err := in.Submit(context.Background(), core.Event{TenantID: core.DefaultTenant, Type: typ, Payload: []byte(`{}`)})
		results <- err
	}
	go submit("a.b") // held at the gate alone
	<-g.entered
	for i := range 10 {
		typ := "a.b"
		if i == 5 {
			typ = "poison.pill"
		}
		go submit(typ)
	}
	// These ten queue behind the held commit and go together: the poison fails that batch.
	testenv.Eventually(t, 5*time.Second, "the rest queued", func() bool { return len(in.in) == 10 })
	g.release()
	failed := 0
	for range 11 {
		if err := <-results; err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d submissions failed, want only the poison one", failed)
	}
}

// The registry can be behind the store: a delivery planned pending for a
// subscription the store has disabled is written skipped. It is not handed
// off, so its reservation is released, and it counts as skipped.
func TestDeliveriesTheStoreSkipsAreReleasedAndCountedSkipped(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hookd.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mk := func(host string) core.Subscription {
		s := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "http://" + host + "/",
			Host: host, EventTypes: []string{"*"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", State: core.SubActive}
		if err := st.SubscriptionCreate(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	live, gone := mk("a.example:80"), mk("b.example:80")
	reg := subs.New([]core.Subscription{live, gone}) // both active here
	off := gone
	off.State, off.UpdatedAt = core.SubDisabled, time.Now().UTC()
	if err := st.SubscriptionUpdate(ctx, off); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var reserved, released, handed []string
	ids := func(to *[]string) func([]store.EventInsert) {
		return func(b []store.EventInsert) {
			mu.Lock()
			defer mu.Unlock()
			for _, in := range b {
				for _, d := range in.Deliveries {
					*to = append(*to, d.SubscriptionID)
				}
			}
		}
	}
	m := metrics.New()
	in := New(st, reg, func(js []core.Job) {
		mu.Lock()
		defer mu.Unlock()
		for _, j := range js {
			handed = append(handed, j.Delivery.SubscriptionID)
		}
	}, WithMetrics(m), WithReservations(ids(&reserved), ids(&released)))
	t.Cleanup(in.Close)

	res, err := in.Submit(ctx, core.Event{TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(reserved) != 2 || !slices.Equal(released, []string{gone.ID}) || !slices.Equal(handed, []string{live.ID}) {
		t.Errorf("reserved %v, released %v, handed off %v; want both, %s only, %s only", reserved, released, handed, gone.ID, live.ID)
	}
	mu.Unlock()
	_, ds, err := st.EventGet(ctx, "", res.EventID)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if want := map[string]core.DeliveryState{live.ID: core.DeliveryPending, gone.ID: core.DeliverySkipped}[d.SubscriptionID]; d.State != want {
			t.Errorf("delivery to %s is %s, want %s", d.SubscriptionID, d.State, want)
		}
	}
	if p, s := created(t, m, "pending"), created(t, m, "skipped"); p != 1 || s != 1 {
		t.Errorf("hookd_deliveries_created_total: pending %v, skipped %v; want 1 and 1", p, s)
	}
}

// created reads hookd_deliveries_created_total for one state.
func created(t *testing.T, m *metrics.Metrics, state string) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "hookd_deliveries_created_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "state" && l.GetValue() == state {
					return s.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no hookd_deliveries_created_total{state=%q}", state)
	return 0
}

// Submits racing Close are all answered, at once: each either committed
// (and in the store) or ErrClosed. One queued after the loop's last drain
// used to wait out its context (30 s for hookd's own events at shutdown).
func TestSubmitsRacingCloseAreAnswered(t *testing.T) {
	g, in, _, _ := setup(t)
	g.release()
	const workers = 64
	type answer struct {
		id  string
		err error
	}
	answers := make(chan answer, workers*1000)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range 1000 {
				res, err := in.Submit(context.Background(), core.Event{TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`)})
				answers <- answer{res.EventID, err}
				if err != nil {
					return
				}
			}
		})
	}
	testenv.Eventually(t, 5*time.Second, "some events committed", func() bool { return len(answers) > workers })
	in.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a Submit racing Close was not answered within 10 s")
	}
	close(answers)
	for a := range answers {
		switch {
		case a.err == nil:
			if _, _, err := g.Store.EventGet(context.Background(), core.DefaultTenant, a.id); err != nil {
				t.Errorf("event %s answered committed is not in the store: %v", a.id, err)
			}
		case !errors.Is(a.err, ErrClosed):
			t.Errorf("Submit racing Close: %v, want ErrClosed", a.err)
		}
	}
}
