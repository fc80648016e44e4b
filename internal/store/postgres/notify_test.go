package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// listener runs one Store's Listen for a test and collects what it hears:
// due deliveries in got, every other kind in other.
type listener struct {
	got, other chan store.Due
	ready      chan uint32 // backend PID, each time it is listening
	done       chan error
	pid        uint32 // of the first connection
}

func listen(t *testing.T, s *Store) *listener {
	t.Helper()
	l := &listener{got: make(chan store.Due, 1000), other: make(chan store.Due, 1000),
		ready: make(chan uint32, 10), done: make(chan error, 1)}
	s.onListen = func(pid uint32) { l.ready <- pid }
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		l.done <- s.Listen(ctx, func(d store.Due) {
			ch := l.got
			if d.Kind != store.DueDeliveries {
				ch = l.other
			}
			select {
			case ch <- d:
			default: // fn must not block; the test would fail on the missing item
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-l.done; !errors.Is(err, context.Canceled) {
			t.Errorf("Listen returned %v, want context.Canceled", err)
		}
	})
	l.pid = l.waitReady(t)
	return l
}

const notifyWait = 10 * time.Second

func (l *listener) waitReady(t *testing.T) uint32 {
	t.Helper()
	select {
	case pid := <-l.ready:
		return pid
	case <-time.After(notifyWait):
		t.Fatal("Listen did not start listening")
		return 0
	}
}

// until collects notifications until one for subscription marker arrives,
// and returns those before it. Notifications of one session arrive in
// commit order, so everything sent before the marker is in the result.
func (l *listener) until(t *testing.T, marker string) []store.Due {
	t.Helper()
	var before []store.Due
	deadline := time.After(notifyWait)
	for {
		select {
		case d := <-l.got:
			if d.SubscriptionID == marker {
				return before
			}
			before = append(before, d)
		case <-deadline:
			t.Fatalf("no notification for %s; got %+v", marker, before)
		}
	}
}

func TestNotifyReachesOtherInstances(t *testing.T) {
	u := testenv.PostgresSchema(t)
	a, b := openURL(t, u), openURL(t, u)
	la, lb := listen(t, a), listen(t, b)
	x, y, z := activeSub(t, a, "x.example:443"), activeSub(t, a, "y.example:443"), activeSub(t, a, "z.example:443")
	due := func(s core.Subscription) store.Due {
		return store.Due{SubscriptionID: s.ID, Shard: core.ShardOf(s.Host)}
	}

	// One batch of three events to x and y: B hears each subscription once.
	res := insert(t, a, event(x, y), event(x, y), event(x))
	insert(t, a, event(z)) // marker
	got := lb.until(t, z.ID)
	if len(got) != 2 || !(got[0] == due(x) && got[1] == due(y) || got[0] == due(y) && got[1] == due(x)) {
		t.Fatalf("B heard %+v, want x and y once each", got)
	}
	// A's own writes are not passed to A: B writes a marker, and A hears
	// only that (A's notifications, sent before, would have come first).
	insert(t, b, event(y))
	if got := la.until(t, y.ID); len(got) != 0 {
		t.Fatalf("A heard its own writes: %+v", got)
	}

	// The other writes that make work due notify too.
	ctx := t.Context()
	d := res[0].Deliveries[0]
	if err := a.DeliveryRecordResults(ctx, []store.AttemptResult{{Attempt: core.Attempt{DeliveryID: d.ID, N: 1,
		StartedAt: time.Now(), StatusCode: 400}, State: core.DeliveryFailed, Now: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DeliveryReplay(ctx, "", d.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := lb.until(t, x.ID); len(got) != 0 {
		t.Fatalf("before the replay's notification: %+v", got)
	}
	paused := z
	paused.State = core.SubPaused
	if err := a.SubscriptionUpdate(ctx, paused); err != nil {
		t.Fatal(err)
	}
	if err := a.SubscriptionUpdate(ctx, z); err != nil { // back to active
		t.Fatal(err)
	}
	if got := lb.until(t, z.ID); len(got) != 0 {
		t.Fatalf("before the resume's notification: %+v", got)
	}
	if err := a.DeliveryRecordResults(ctx, []store.AttemptResult{{Attempt: core.Attempt{DeliveryID: d.ID, N: 2,
		StartedAt: time.Now(), StatusCode: 400}, State: core.DeliveryFailed, Now: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	job := core.ReplayJob{ID: core.NewID("rpl"), TenantID: core.DefaultTenant, SubscriptionID: x.ID,
		Since: time.Now().Add(-time.Hour), States: core.ReplayStatesDefault, Rate: core.ReplayRateMax,
		CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := a.ReplayJobCreate(ctx, job); err != nil {
		t.Fatal(err)
	}
	if j, _, err := a.ReplayJobStep(ctx, job.ID, 10, time.Now()); err != nil || j.Replayed != 1 {
		t.Fatalf("ReplayJobStep: %+v, %v", j, err)
	}
	if got := lb.until(t, x.ID); len(got) != 0 {
		t.Fatalf("before the replay job's notification: %+v", got)
	}
}

// Listen survives losing its connection: it reconnects and hears again.
func TestListenReconnects(t *testing.T) {
	u := testenv.PostgresSchema(t)
	a, b := openURL(t, u), openURL(t, u)
	lb := listen(t, b)
	x := activeSub(t, a, "x.example:443")
	insert(t, a, event(x))
	lb.until(t, x.ID)

	// Kill B's listening backend; B must come back on its own.
	if _, err := a.pool.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, lb.pid); err != nil {
		t.Fatal(err)
	}
	if again := lb.waitReady(t); again == lb.pid {
		t.Fatalf("listening again on the killed backend %d", again)
	}
	// Once at the start, once after the reconnect: the caller catches up.
	for resumed := 0; resumed < 2; {
		if lb.nextOther(t).Kind == store.DueResumed {
			resumed++
		}
	}
	insert(t, a, event(x))
	lb.until(t, x.ID)
}

// nextOther returns the next notification that is not about due deliveries.
func (l *listener) nextOther(t *testing.T) store.Due {
	t.Helper()
	select {
	case d := <-l.other:
		return d
	case <-time.After(notifyWait):
		t.Fatal("no notification")
		return store.Due{}
	}
}

// Subscription writes tell every other node's registry; lease changes tell
// the other nodes to lease again; each start of listening says so.
func TestNotifySubscriptionAndLeaseChanges(t *testing.T) {
	u := testenv.PostgresSchema(t)
	a, b := openURL(t, u), openURL(t, u)
	lb := listen(t, b)
	if d := lb.nextOther(t); d.Kind != store.DueResumed {
		t.Fatalf("first notification %+v, want DueResumed", d)
	}
	ctx := t.Context()
	changed := func(id string) store.Due { return store.Due{Kind: store.DueSubscription, SubscriptionID: id} }
	x := activeSub(t, a, "x.example:443")
	if d := lb.nextOther(t); d != changed(x.ID) {
		t.Fatalf("after create: %+v", d)
	}
	x.Secret = "whsec_rotated"
	if err := a.SubscriptionUpdate(ctx, x); err != nil {
		t.Fatal(err)
	}
	if d := lb.nextOther(t); d != changed(x.ID) {
		t.Fatalf("after update: %+v", d)
	}
	if err := a.SubscriptionDelete(ctx, "", x.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if d := lb.nextOther(t); d != changed(x.ID) {
		t.Fatalf("after delete: %+v", d)
	}
	// A revoked key is told to every node, which stops accepting it.
	key := core.APIKey{ID: core.NewID("key"), TenantID: core.DefaultTenant, Hash: "revoked-key-hash", CreatedAt: time.Now()}
	if err := a.APIKeyCreate(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := a.APIKeyRevoke(ctx, "", key.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if d := lb.nextOther(t); d != (store.Due{Kind: store.DueKeyRevoked, KeyID: key.ID}) {
		t.Fatalf("after revoking a key: %+v", d)
	}

	// A node joining tells; renewing an unchanged share does not (the
	// marker subscription comes next); leaving tells.
	lease := func() {
		t.Helper()
		if _, _, err := a.ShardLeases(ctx, "n1", leaseTTL, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	lease()
	if d := lb.nextOther(t); d.Kind != store.DueLeases {
		t.Fatalf("after joining: %+v", d)
	}
	lease()
	marker := activeSub(t, a, "m.example:443")
	if d := lb.nextOther(t); d != changed(marker.ID) {
		t.Fatalf("after a plain renewal: %+v, want only the marker's change", d)
	}
	if err := a.ShardRelease(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if d := lb.nextOther(t); d.Kind != store.DueLeases {
		t.Fatalf("after release: %+v", d)
	}
	// A node above its share gives shards back and tells.
	lease() // n1 holds all
	lb.nextOther(t)
	if _, _, err := b.ShardLeases(ctx, "n2", leaseTTL, time.Now()); err != nil { // joins, takes none yet
		t.Fatal(err)
	}
	lease() // n1 gives back half
	if d := lb.nextOther(t); d.Kind != store.DueLeases {
		t.Fatalf("after giving shards back: %+v", d)
	}
}
