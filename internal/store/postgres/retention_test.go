package postgres

import (
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// A result arriving while a Purge is removing its (no longer pending)
// delivery waits for it and is then dropped, rather than failing its batch
// on the attempts foreign key.
func TestAResultDuringAPurgeIsDropped(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	sub := activeSub(t, s, "x.example:443")
	res, err := s.EventInsertBatch(ctx, []store.EventInsert{event(sub)})
	if err != nil {
		t.Fatal(err)
	}
	d := res[0].Deliveries[0]
	if err := s.SubscriptionDelete(ctx, "", sub.ID, time.Now()); err != nil { // skips it
		t.Fatal(err)
	}
	// What Purge does to it, held open.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var pid uint32
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`SELECT 1 FROM deliveries WHERE id = $1 FOR UPDATE`,
		`DELETE FROM attempts WHERE delivery_id = $1`, `DELETE FROM deliveries WHERE id = $1`} {
		if _, err := tx.Exec(ctx, q, d.ID); err != nil {
			t.Fatal(err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		now := time.Now()
		errc <- s.DeliveryRecordResults(ctx, []store.AttemptResult{{Attempt: core.Attempt{DeliveryID: d.ID, N: 1,
			StartedAt: now, StatusCode: 200}, State: core.DeliveryDelivered, Now: now}})
	}()
	testenv.Eventually(t, 10*time.Second, "the result write waiting on the purge", func() bool {
		var n int
		s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n)
		return n > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("a result for a delivery purged meanwhile: %v", err)
	}
}
