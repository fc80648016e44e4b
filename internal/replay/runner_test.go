package replay

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/subs"
	"hookd/internal/testenv"
)

// waker plays the dispatcher: it owns the shards in owned and counts wakes.
type waker struct {
	owned map[int]bool
	wakes int
}

func (w *waker) Wake(host, subscriptionID string) { w.wakes++ }
func (w *waker) OwnsShard(shard int) bool         { return w.owned[shard] }

// A job is stepped only by the node that owns its destination's shard, at
// most Batch deliveries a step, and the owner's lane is woken.
func TestStepRunsOnlyOnTheOwnerOfTheDestination(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "hookd.db"), testenv.Keys(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC()
	sub := core.Subscription{ID: "sub_1", TenantID: core.DefaultTenant, URL: "https://r.example/", Host: "r.example:443",
		EventTypes: []string{"*"}, Secret: "whsec_x", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := st.SubscriptionCreate(ctx, sub); err != nil {
		t.Fatal(err)
	}
	reg := subs.New([]core.Subscription{sub})
	const n = Batch + 20
	batch := make([]store.EventInsert, n)
	var rs []store.AttemptResult
	for i := range batch {
		e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`), CreatedAt: now}
		d := core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID, TenantID: e.TenantID, EventType: e.Type,
			Host: sub.Host, Shard: core.ShardOf(sub.Host), State: core.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
		batch[i] = store.EventInsert{Event: e, Deliveries: []core.Delivery{d}}
		rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: now, StatusCode: 400},
			State: core.DeliveryFailed, Now: now})
	}
	if _, err := st.EventInsertBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if err := st.DeliveryRecordResults(ctx, rs); err != nil {
		t.Fatal(err)
	}
	job := core.ReplayJob{ID: "rpl_1", TenantID: core.DefaultTenant, SubscriptionID: sub.ID, Since: now.Add(-time.Hour),
		States: core.ReplayStatesDefault, Rate: core.ReplayRateMax, CreatedAt: now, UpdatedAt: now}
	if err := st.ReplayJobCreate(ctx, job); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	replayed := func() int {
		j, err := st.ReplayJobGet(ctx, "", job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return j.Replayed
	}

	// Built by hand, not New: step is called directly, so no loop races it.
	other := &waker{owned: map[int]bool{}}
	(&Runner{store: st, subs: reg, wake: other, log: log}).step()
	if got := replayed(); got != 0 || other.wakes != 0 {
		t.Fatalf("a node without the shard replayed %d and woke %d times, want 0 and 0", got, other.wakes)
	}
	owner := &waker{owned: map[int]bool{core.ShardOf(sub.Host): true}}
	r := &Runner{store: st, subs: reg, wake: owner, log: log}
	r.step()
	if got := replayed(); got != Batch || owner.wakes != 1 {
		t.Fatalf("the owner's first step replayed %d and woke %d times, want %d and 1", got, owner.wakes, Batch)
	}
	r.step()
	if got := replayed(); got != n {
		t.Fatalf("after two steps %d replayed, want %d", got, n)
	}
}
