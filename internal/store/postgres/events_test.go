package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// Two nodes ingest the same idempotency keys at the same moment: each key
// becomes exactly one event, and both callers are told its ID. The keys go
// in opposite orders, which deadlocks if rows are not written in one order.
func TestConcurrentIdempotencyAcrossInstances(t *testing.T) {
	u := testenv.PostgresSchema(t)
	a, b := openURL(t, u), openURL(t, u)
	sub := activeSub(t, a, "x.example:443")
	ordered := activeSub(t, a, "o.example:443")
	ordered.Ordered = true
	if err := a.SubscriptionUpdate(t.Context(), ordered); err != nil {
		t.Fatal(err)
	}
	const rounds = 20
	for r := range rounds {
		k1, k2 := fmt.Sprintf("key-%d-1", r), fmt.Sprintf("key-%d-2", r)
		mk := func(key string) store.EventInsert {
			in := event(sub, ordered)
			in.Event.IdempotencyKey, in.Event.OrderingKey = key, "line"
			for i := range in.Deliveries {
				in.Deliveries[i].OrderingKey = "line"
			}
			return in
		}
		batches := [][]store.EventInsert{{mk(k1), mk(k2)}, {mk(k2), mk(k1)}}
		results := make([][]store.EventInsertResult, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, s := range []*Store{a, b} {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.EventInsertBatch(t.Context(), batches[i])
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, node %d: %v", r, i, err)
			}
		}
		// Per key: node a's answer and node b's (b's items are reversed).
		for ki, key := range []string{k1, k2} {
			ra, rb := results[0][ki], results[1][1-ki]
			if ra.EventID != rb.EventID || ra.Duplicate == rb.Duplicate {
				t.Fatalf("round %d key %s: a %+v, b %+v; want one write and one duplicate of it", r, key, ra, rb)
			}
			var events, deliveries int
			if err := a.pool.QueryRow(t.Context(), `SELECT count(*), (SELECT count(*) FROM deliveries d JOIN events e ON e.id = d.event_id WHERE e.idempotency_key = $1)
				FROM events WHERE idempotency_key = $1`, key).Scan(&events, &deliveries); err != nil {
				t.Fatal(err)
			}
			if events != 1 || deliveries != 2 {
				t.Fatalf("round %d key %s: %d events, %d deliveries; want 1 and 2", r, key, events, deliveries)
			}
		}
	}
	// The ordered line numbered every written delivery once, in commit order.
	rows, err := a.pool.Query(t.Context(), `SELECT sequence FROM deliveries WHERE subscription_id = $1 ORDER BY sequence`, ordered.ID)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := make([]int64, 2*rounds)
	for i := range want {
		want[i] = int64(i + 1)
	}
	if !slices.Equal(seqs, want) {
		t.Fatalf("sequences %v, want 1..%d", seqs, 2*rounds)
	}
}

// roundTrips counts the statements and batches a connection sends: each is
// one round trip to the server.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// The outbox write is a fixed handful of round trips, not one per row: a
// batch of 256 events with 10 deliveries each (some on an ordered line)
// costs BEGIN, events, sequences, deliveries, COMMIT.
func TestEventInsertBatchRoundTrips(t *testing.T) {
	cfg, err := config(testenv.PostgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	tr := &roundTrips{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := open(t.Context(), pool, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var subs []core.Subscription
	for i := range 10 {
		subs = append(subs, activeSub(t, s, fmt.Sprintf("h%d.example:443", i)))
	}
	subs[0].Ordered = true
	if err := s.SubscriptionUpdate(t.Context(), subs[0]); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ordering string
		want     int64
	}{{"", 4}, {"line", 5}} {
		var batch []store.EventInsert
		for i := range 256 {
			in := event(subs...)
			in.Event.IdempotencyKey, in.Event.OrderingKey = fmt.Sprintf("k-%q-%d", c.ordering, i), c.ordering
			batch = append(batch, in)
		}
		before := tr.n.Load()
		insert(t, s, batch...)
		if got := tr.n.Load() - before; got != c.want {
			t.Errorf("ordering key %q: %d round trips for 256 events x 10 deliveries, want %d", c.ordering, got, c.want)
		}
	}
}
