package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/store/sqlite"
	"hookd/internal/testenv"
)

// A node started with a retention window removes what finished before it,
// at once, and keeps an old event whose delivery is still pending (here:
// its subscription is paused).
func TestRetentionRemovesFinishedEventsPastTheWindow(t *testing.T) {
	db := filepath.Join(t.TempDir(), "hookd.db")
	ctx := context.Background()
	keys := testenv.Keys(t)
	st, err := sqlite.Open(ctx, db, keys)
	if err != nil {
		t.Fatal(err)
	}
	long := time.Now().Add(-40 * 24 * time.Hour).UTC()
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://a.example/hook",
		Host: "a.example:443", EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubPaused,
		CreatedAt: long, UpdatedAt: long}
	if err := st.SubscriptionCreate(ctx, sub); err != nil {
		t.Fatal(err)
	}
	insert := func(created time.Time) core.Delivery {
		t.Helper()
		e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`), CreatedAt: created}
		d := core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID, TenantID: e.TenantID,
			EventType: e.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host), State: core.DeliveryPending,
			NextAttemptAt: created, CreatedAt: created, UpdatedAt: created}
		if _, err := st.EventInsertBatch(ctx, []store.EventInsert{{Event: e, Deliveries: []core.Delivery{d}}}); err != nil {
			t.Fatal(err)
		}
		return d
	}
	old, pending, recent := insert(long), insert(long), insert(time.Now().Add(-time.Hour).UTC())
	for _, d := range []core.Delivery{old, recent} {
		if err := st.DeliveryRecordResults(ctx, []store.AttemptResult{{Attempt: core.Attempt{DeliveryID: d.ID, N: 1,
			StartedAt: d.CreatedAt, StatusCode: 200}, State: core.DeliveryDelivered, Now: d.CreatedAt}}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	e := serve(t, Config{DB: db, AdminToken: adminToken, Version: "test", Retention: 30 * 24 * time.Hour, Keys: keys,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	testenv.Eventually(t, 10*time.Second, "the old delivered event removed", func() bool {
		code, _ := e.admin.Do("GET", "/v1/events/"+old.EventID, nil)
		return code == http.StatusNotFound
	})
	for _, d := range []core.Delivery{pending, recent} {
		e.admin.Must(http.StatusOK, "GET", "/v1/events/"+d.EventID, nil)
	}
	counts, err := e.app.store.DailyCounts(ctx, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 1 || counts[0].Delivered != 1 || counts[0].Attempts != 1 ||
		!counts[0].Day.Equal(long.Truncate(24*time.Hour)) {
		t.Fatalf("daily counts %+v, want one delivered in one attempt on %s", counts, long.Format(time.DateOnly))
	}
}
