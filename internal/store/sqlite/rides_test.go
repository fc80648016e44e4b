package sqlite

import (
	"context"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// rideFixture is a store with one subscription and a helper that inserts
// one event with a pending delivery to it.
// Batches wait for a carrier far longer than any test runs.
func rideFixture(t *testing.T) (*Store, func() core.Delivery) {
	was := rideWait
	rideWait = time.Hour
	t.Cleanup(func() { rideWait = was })
	s := openTemp(t)
	t.Cleanup(func() { s.Close() })
	now := time.Now().UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://a.example/",
		Host: "a.example:443", EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive,
		CreatedAt: now, UpdatedAt: now}
	if err := s.SubscriptionCreate(t.Context(), sub); err != nil {
		t.Fatal(err)
	}
	return s, func() core.Delivery {
		t.Helper()
		res, err := s.EventInsertBatch(t.Context(), []store.EventInsert{insertFor(sub, now)})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Deliveries[0]
	}
}

func insertFor(sub core.Subscription, now time.Time) store.EventInsert {
	e := core.Event{ID: core.NewID("evt"), TenantID: sub.TenantID, Type: "a.b", Payload: []byte(`{}`), CreatedAt: now}
	d := core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID, TenantID: e.TenantID,
		EventType: e.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host), State: core.DeliveryPending,
		NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
	return store.EventInsert{Event: e, Deliveries: []core.Delivery{d}}
}

func delivered(id string) store.AttemptResult {
	now := time.Now().UTC()
	return store.AttemptResult{Attempt: core.Attempt{DeliveryID: id, N: 1, StartedAt: now, StatusCode: 200},
		State: core.DeliveryDelivered, Now: now}
}

// queueRide starts DeliveryRecordResults while writes are frequent, so its
// batch waits to ride, and returns once it is queued.
func queueRide(t *testing.T, s *Store, rs ...store.AttemptResult) <-chan error {
	s.rides.wrote()
	errc := make(chan error, 1)
	go func() { errc <- s.DeliveryRecordResults(t.Context(), rs) }()
	testenv.Eventually(t, 5*time.Second, "the result batch queued", func() bool {
		s.rides.mu.Lock()
		defer s.rides.mu.Unlock()
		return len(s.rides.queue) == 1
	})
	return errc
}

// A result batch rides in the next write transaction; each side's failure
// stays its own: a bad result batch does not fail the ingest that carried
// it, and a failed ingest does not lose the results it carried.
func TestResultsRideAndFailAlone(t *testing.T) {
	s, deliver := rideFixture(t)
	ctx := t.Context()
	state := func(id string) core.DeliveryState {
		t.Helper()
		d, _, err := s.DeliveryGet(ctx, "", id)
		if err != nil {
			t.Fatal(err)
		}
		return d.State
	}

	d1 := deliver()
	errc := queueRide(t, s, delivered(d1.ID))
	d2 := deliver() // carries d1's result
	if err := <-errc; err != nil {
		t.Fatalf("carried results: %v", err)
	}
	if state(d1.ID) != core.DeliveryDelivered || state(d2.ID) != core.DeliveryPending {
		t.Fatalf("after riding: %s %s, want delivered pending", state(d1.ID), state(d2.ID))
	}

	// A state the table's CHECK refuses fails its batch.
	bad := delivered(d2.ID)
	bad.State = "bogus"
	errc = queueRide(t, s, bad)
	d3 := deliver()
	if err := <-errc; err == nil {
		t.Fatal("a result batch with a bad state was accepted")
	}
	if state(d3.ID) != core.DeliveryPending {
		t.Fatalf("the carrying ingest did not commit: %s", state(d3.ID))
	}

	// An ingest that fails (an event ID taken) leaves its riders written.
	errc = queueRide(t, s, delivered(d2.ID))
	dup := insertFor(core.Subscription{ID: d1.SubscriptionID, TenantID: core.DefaultTenant, Host: d1.Host}, time.Now().UTC())
	dup.Event.ID = d1.EventID
	if _, err := s.EventInsertBatch(ctx, []store.EventInsert{dup}); err == nil {
		t.Fatal("an event with a taken ID was accepted")
	}
	if err := <-errc; err != nil {
		t.Fatalf("results carried by a failed ingest: %v", err)
	}
	if state(d2.ID) != core.DeliveryDelivered {
		t.Fatalf("results carried by a failed ingest were lost: %s", state(d2.ID))
	}
}

// A carrier whose caller went away fails alone: its riders are written on
// a context of their own.
func TestResultsOutliveACancelledCarrier(t *testing.T) {
	s, deliver := rideFixture(t)
	d := deliver()
	errc := queueRide(t, s, delivered(d.ID))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	sub := core.Subscription{ID: d.SubscriptionID, TenantID: core.DefaultTenant, Host: d.Host}
	if _, err := s.EventInsertBatch(ctx, []store.EventInsert{insertFor(sub, time.Now().UTC())}); err == nil {
		t.Fatal("an ingest with a cancelled context committed")
	}
	if err := <-errc; err != nil {
		t.Fatalf("results carried by a cancelled carrier: %v", err)
	}
	if got, _, err := s.DeliveryGet(t.Context(), "", d.ID); err != nil || got.State != core.DeliveryDelivered {
		t.Fatalf("state %s, %v; want delivered", got.State, err)
	}
}

// With no other write lately, a result batch commits at once rather than
// waiting for a carrier.
func TestResultsAloneCommitAtOnce(t *testing.T) {
	s, deliver := rideFixture(t)
	d := deliver()
	s.rides.mu.Lock()
	s.rides.lastWrite = time.Time{}
	s.rides.mu.Unlock()
	errc := make(chan error, 1)
	go func() { errc <- s.DeliveryRecordResults(t.Context(), []store.AttemptResult{delivered(d.ID)}) }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a result batch waited for a carrier with no write lately")
	}
	got, _, err := s.DeliveryGet(t.Context(), "", d.ID)
	if err != nil || got.State != core.DeliveryDelivered {
		t.Fatalf("state %s, %v; want delivered", got.State, err)
	}
}
