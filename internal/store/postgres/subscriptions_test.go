package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// backlogOf gives sub n pending deliveries and done delivered ones.
func backlogOf(t *testing.T, s *Store, sub core.Subscription, n, done int) {
	t.Helper()
	var batch []store.EventInsert
	for i := range n + done {
		in := event(sub)
		if i >= n {
			in.Deliveries[0].State = core.DeliveryDelivered
		}
		batch = append(batch, in)
	}
	for len(batch) > 0 {
		k := min(len(batch), 500)
		insert(t, s, batch[:k]...)
		batch = batch[k:]
	}
}

func count(t *testing.T, s *Store, where string, args ...any) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM deliveries WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A backlog larger than one skip batch is skipped whole on disable and on
// delete; delivered rows stay as they are.
func TestSkipCoversBacklogsBeyondOneBatch(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	const pending, delivered = 2*skipBatch + 7, 30
	off, gone := activeSub(t, s, "off.example:443"), activeSub(t, s, "gone.example:443")
	backlogOf(t, s, off, pending, delivered)
	backlogOf(t, s, gone, pending, delivered)
	off.State, off.DisabledReason, off.UpdatedAt = core.SubDisabled, "test", time.Now().UTC()
	if err := s.SubscriptionUpdate(ctx, off); err != nil {
		t.Fatal(err)
	}
	if err := s.SubscriptionDelete(ctx, "", gone.ID, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []core.Subscription{off, gone} {
		if n := count(t, s, `subscription_id = $1 AND state = 'skipped'`, sub.ID); n != pending {
			t.Errorf("%s: %d skipped, want every one of %d pending", sub.Host, n, pending)
		}
		if n := count(t, s, `subscription_id = $1 AND state = 'delivered'`, sub.ID); n != delivered {
			t.Errorf("%s: %d delivered left, want %d", sub.Host, n, delivered)
		}
	}
}

// A crash between skip batches leaves a disabled subscription with pending
// deliveries; the next Open skips them.
func TestOpenFinishesAnInterruptedSkip(t *testing.T) {
	u := testenv.PostgresSchema(t)
	s := openURL(t, u)
	off, live := activeSub(t, s, "off.example:443"), activeSub(t, s, "live.example:443")
	backlogOf(t, s, off, skipBatch+5, 0)
	backlogOf(t, s, live, 10, 0)
	// What the first transaction of a disable commits, without the batches.
	testenv.PostgresExec(t, u, `UPDATE subscriptions SET state = 'disabled' WHERE id = $1`, off.ID)

	openURL(t, u)
	if n := count(t, s, `subscription_id = $1 AND state = 'pending'`, off.ID); n != 0 {
		t.Errorf("%d deliveries of the disabled subscription still pending after Open, want 0", n)
	}
	if n := count(t, s, `subscription_id = $1 AND state = 'pending'`, live.ID); n != 10 {
		t.Errorf("the active subscription has %d pending after Open, want its 10", n)
	}
}

// A change and an ingest of the same subscription on two nodes: whichever
// locks first, no delivery is left pending for a disabled subscription.
func TestChangeAndIngestWaitForEachOther(t *testing.T) {
	u := testenv.PostgresSchema(t)
	a, b := openURL(t, u), openURL(t, u)
	ctx := t.Context()

	// An ingest beginning while a disable is uncommitted waits for it and
	// writes skipped.
	sub := activeSub(t, a, "x.example:443")
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM subscriptions WHERE id = $1 FOR NO KEY UPDATE`, sub.ID); err != nil {
		t.Fatal(err)
	}
	res := make(chan []store.EventInsertResult, 1)
	go func() {
		r, err := b.EventInsertBatch(ctx, []store.EventInsert{event(sub)})
		if err != nil {
			t.Error(err)
		}
		res <- r
	}()
	waitBlocked(t, a, tx, "an ingest")
	if _, err := tx.Exec(ctx, `UPDATE subscriptions SET state = 'disabled' WHERE id = $1`, sub.ID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-res; len(r) != 1 || r[0].Deliveries[0].State != core.DeliverySkipped {
		t.Fatalf("ingest after a disable it waited for: %+v, want its delivery skipped", r)
	}

	// A disable beginning while an ingest is uncommitted waits for it, and
	// its skip then finds the ingest's deliveries.
	sub = activeSub(t, a, "y.example:443")
	in := event(sub)
	tx, err = b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := b.insertBatch(ctx, tx, []store.EventInsert{in}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		off := sub
		off.State, off.UpdatedAt = core.SubDisabled, time.Now().UTC()
		done <- a.SubscriptionUpdate(ctx, off)
	}()
	waitBlocked(t, a, tx, "a disable")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := count(t, a, `subscription_id = $1 AND state = 'pending'`, sub.ID); n != 0 {
		t.Fatalf("%d deliveries of the disabled subscription left pending, want 0", n)
	}
}

// waitBlocked waits until another session waits on a lock tx holds.
func waitBlocked(t *testing.T, s *Store, tx pgx.Tx, what string) {
	t.Helper()
	var pid int
	if err := tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, what+" waits on the row lock", func() bool {
		var n int
		err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n)
		return err == nil && n > 0
	})
}
