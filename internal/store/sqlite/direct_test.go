package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	zs "zombiezen.com/go/sqlite"

	"hookd/internal/core"
	"hookd/internal/store"
)

// A transaction on the direct writer whose context ends half-way does not
// commit: it rolls back what it wrote and leaves the connection fit for the
// next one.
func TestDirectTxCancelledRollsBack(t *testing.T) {
	s, deliver := rideFixture(t)
	d := deliver()
	sub := core.Subscription{ID: d.SubscriptionID, TenantID: core.DefaultTenant, Host: d.Host}
	first, second := insertFor(sub, time.Now().UTC()), insertFor(sub, time.Now().UTC())
	ctx, cancel := context.WithCancel(t.Context())
	err := s.directTx(ctx, func(c *zs.Conn) error {
		if _, err := insertOne(c, map[string]subAtCommit{}, first, new([]any)); err != nil {
			return err
		}
		cancel()
		_, err := insertOne(c, map[string]subAtCommit{}, second, new([]any))
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled transaction: %v, want context.Canceled", err)
	}
	if _, _, err := s.EventGet(t.Context(), "", first.Event.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an event of the cancelled transaction: %v, want not found", err)
	}
	if next := deliver(); next.ID == "" {
		t.Fatal("no delivery from the next batch")
	}
}

// Ingest and result batches (the direct writer) and every other write (the
// database/sql writer) run together from many goroutines: they take turns,
// so none fails on the other's lock, and all of it lands. Under -race this
// also checks that the direct connection is never used by two at once.
func TestWritersTakeTurns(t *testing.T) {
	s := openTemp(t)
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	// With no busy timeout, a writer that did not wait its turn would meet
	// the other's lock as SQLITE_BUSY at once.
	if _, err := s.w.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := execDirect(s.d, `PRAGMA busy_timeout = 0`); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://a.example/",
		Host: "a.example:443", EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive,
		CreatedAt: now, UpdatedAt: now}
	if err := s.SubscriptionCreate(ctx, sub); err != nil {
		t.Fatal(err)
	}
	const workers, rounds = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, 3*workers*rounds)
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				res, err := s.EventInsertBatch(ctx, []store.EventInsert{insertFor(sub, time.Now().UTC())})
				if err != nil {
					errs <- err
					continue
				}
				errs <- s.DeliveryRecordResults(ctx, []store.AttemptResult{delivered(res[0].Deliveries[0].ID)})
				other := sub
				other.ID, other.URL = core.NewID("sub"), fmt.Sprintf("https://a.example/%d/%d", w, i)
				errs <- s.SubscriptionCreate(ctx, other)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var events, delivered, subs int
	if err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM events),
		(SELECT count(*) FROM deliveries WHERE state = 'delivered'), (SELECT count(*) FROM subscriptions)`).
		Scan(&events, &delivered, &subs); err != nil {
		t.Fatal(err)
	}
	if want := workers * rounds; events != want || delivered != want || subs != want+1 {
		t.Fatalf("%d events, %d delivered, %d subscriptions; want %d, %d, %d", events, delivered, subs, want, want, want+1)
	}
}

// Both writers hold what a nil error promises: the WAL, synced at each
// commit, and the foreign keys checked.
func TestWritersPragmas(t *testing.T) {
	s := openTemp(t)
	t.Cleanup(func() { s.Close() })
	want := map[string]string{"journal_mode": "wal", "synchronous": "2", "foreign_keys": "1", "temp_store": "2", "busy_timeout": "5000"}
	for p, v := range want {
		var onW string
		if err := s.w.QueryRowContext(t.Context(), "PRAGMA "+p).Scan(&onW); err != nil {
			t.Fatal(err)
		}
		var onD string
		if _, err := queryRowDirect(s.d, "PRAGMA "+p, nil, func(st *zs.Stmt) { onD = st.ColumnText(0) }); err != nil {
			t.Fatal(err)
		}
		if onW != v || onD != v {
			t.Errorf("PRAGMA %s: %q on the database/sql writer, %q on the direct one; want %q", p, onW, onD, v)
		}
	}
}

// Close waits for the batch in progress; a batch after it fails as
// unavailable instead of touching a closed connection.
func TestCloseWaitsForTheWriter(t *testing.T) {
	s, deliver := rideFixture(t)
	d := deliver()
	sub := core.Subscription{ID: d.SubscriptionID, TenantID: core.DefaultTenant, Host: d.Host}
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := s.EventInsertBatch(t.Context(), []store.EventInsert{insertFor(sub, time.Now().UTC())}); err != nil {
				errc <- err
				return
			}
		}
	}()
	if _, err := s.EventInsertBatch(t.Context(), []store.EventInsert{insertFor(sub, time.Now().UTC())}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a batch after Close: %v, want ErrUnavailable", err)
	}
	s.rides.mu.Lock()
	s.rides.lastWrite = time.Time{} // a write of its own, not waiting for a carrier
	s.rides.mu.Unlock()
	if err := s.DeliveryRecordResults(t.Context(), []store.AttemptResult{delivered(d.ID)}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("results after Close: %v, want ErrUnavailable", err)
	}
}
