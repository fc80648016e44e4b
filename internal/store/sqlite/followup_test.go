package sqlite

import (
	"path/filepath"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

// backlogOf writes n pending deliveries (and delivered ones, which must be
// left alone) for a new subscription on host.
func backlogOf(t *testing.T, s *Store, host string, pending, delivered int) core.Subscription {
	t.Helper()
	ctx := t.Context()
	now := time.Now().UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://" + host,
		Host: host, EventTypes: []string{"*"}, Secret: "whsec_x", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := s.SubscriptionCreate(ctx, sub); err != nil {
		t.Fatal(err)
	}
	var batch []store.EventInsert
	for i := range pending + delivered {
		e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`), CreatedAt: now}
		d := core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID, TenantID: e.TenantID,
			EventType: e.Type, Host: host, Shard: core.ShardOf(host), State: core.DeliveryPending,
			NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
		if i >= pending {
			d.State = core.DeliveryDelivered
		}
		batch = append(batch, store.EventInsert{Event: e, Deliveries: []core.Delivery{d}})
	}
	for len(batch) > 0 {
		n := min(len(batch), 500)
		if _, err := s.EventInsertBatch(ctx, batch[:n]); err != nil {
			t.Fatal(err)
		}
		batch = batch[n:]
	}
	return sub
}

func (s *Store) countWhere(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := s.r.QueryRowContext(t.Context(), `SELECT count(*) FROM deliveries WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A backlog larger than one follow-up batch is skipped whole on delete and
// on disable, and moved whole on a host change; delivered rows stay as they are.
func TestFollowUpCoversBacklogsBeyondOneBatch(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	const pending, delivered = 2*followBatch + 7, 300

	gone := backlogOf(t, s, "gone.example:443", pending, delivered)
	if err := s.SubscriptionDelete(ctx, core.DefaultTenant, gone.ID, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	off := backlogOf(t, s, "off.example:443", pending, delivered)
	off.State, off.DisabledReason = core.SubDisabled, "test"
	if err := s.SubscriptionUpdate(ctx, off); err != nil {
		t.Fatal(err)
	}
	moved := backlogOf(t, s, "old.example:443", pending, delivered)
	moved.URL, moved.Host = "https://new.example:443", "new.example:443"
	if err := s.SubscriptionUpdate(ctx, moved); err != nil {
		t.Fatal(err)
	}

	for _, sub := range []core.Subscription{gone, off} {
		if n := s.countWhere(t, `subscription_id = ? AND state = 'skipped'`, sub.ID); n != pending {
			t.Errorf("%s: %d skipped, want every one of %d pending", sub.ID, n, pending)
		}
		if n := s.countWhere(t, `subscription_id = ? AND state = 'delivered'`, sub.ID); n != delivered {
			t.Errorf("%s: %d delivered left, want %d", sub.ID, n, delivered)
		}
	}
	if n := s.countWhere(t, `subscription_id = ? AND state = 'pending' AND host = ? AND shard = ?`,
		moved.ID, moved.Host, core.ShardOf(moved.Host)); n != pending {
		t.Errorf("%d pending under the new host, want all %d", n, pending)
	}
	if n := s.countWhere(t, `subscription_id = ? AND state = 'delivered' AND host = 'old.example:443'`, moved.ID); n != delivered {
		t.Errorf("%d delivered rows still name the old host, want all %d (history is not rewritten)", n, delivered)
	}
}

// A crash between follow-up batches leaves a disabled subscription with
// pending deliveries; opening the file again skips them.
func TestOpenFinishesAnInterruptedSkip(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hookd.db")
	s, err := Open(ctx, path, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	off := backlogOf(t, s, "off.example:443", followBatch+5, 0)
	live := backlogOf(t, s, "live.example:443", 10, 0)
	// What the first transaction of a disable commits, without the batches.
	if _, err := s.w.ExecContext(ctx, `UPDATE subscriptions SET state = 'disabled' WHERE id = ?`, off.ID); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(ctx, path, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := s.countWhere(t, `subscription_id = ? AND state = 'pending'`, off.ID); n != 0 {
		t.Errorf("%d deliveries of the disabled subscription still pending after reopening, want 0", n)
	}
	if n := s.countWhere(t, `subscription_id = ? AND state = 'pending'`, live.ID); n != 10 {
		t.Errorf("the active subscription has %d pending after reopening, want its 10", n)
	}
}
