package ingest

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"hookd/internal/core"
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
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hookd.db"))
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
