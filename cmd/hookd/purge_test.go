package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"hookd/internal/app"
	"hookd/internal/core"
	"hookd/internal/seal"
	"hookd/internal/store"
)

// hookd purge removes the finished events older than --retention, keeps a
// pending one however old and a finished one inside the window, and says
// how many went.
func TestPurgeRemovesWhatRetentionWould(t *testing.T) {
	backends(t, func(t *testing.T, db string) {
		ctx := t.Context()
		k := seal.NewKey()
		st, err := app.OpenStore(ctx, db, ring(t, k))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://a.example/hook",
			Host: "a.example:443", EventTypes: []string{"*"}, Secret: "whsec_cHVyZ2UtdGVzdA==", State: core.SubActive,
			CreatedAt: now, UpdatedAt: now}
		if err := st.SubscriptionCreate(ctx, sub); err != nil {
			t.Fatal(err)
		}
		var batch []store.EventInsert
		for _, age := range []time.Duration{48 * time.Hour, 48 * time.Hour, time.Minute} {
			at := now.Add(-age)
			e := core.Event{ID: core.NewID("evt"), TenantID: core.DefaultTenant, Type: "t", Payload: []byte(`{}`), CreatedAt: at}
			batch = append(batch, store.EventInsert{Event: e, Deliveries: []core.Delivery{{ID: core.NewID("dlv"), EventID: e.ID,
				SubscriptionID: sub.ID, TenantID: e.TenantID, EventType: e.Type, Host: sub.Host, Shard: core.ShardOf(sub.Host),
				State: core.DeliveryPending, NextAttemptAt: at, CreatedAt: at, UpdatedAt: at}}})
		}
		res, err := st.EventInsertBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		var rs []store.AttemptResult
		for _, i := range []int{0, 2} { // the second old one stays pending
			d := res[i].Deliveries[0]
			rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: now, StatusCode: 200},
				State: core.DeliveryDelivered, Now: now})
		}
		if err := st.DeliveryRecordResults(ctx, rs); err != nil {
			t.Fatal(err)
		}
		st.Close()

		var out, errOut bytes.Buffer
		if err := run(ctx, []string{"purge", "--db", db, "--secret-key-file", keyFile(t, k), "--retention", "24h"}, &out, &errOut); err != nil {
			t.Fatalf("purge: %v (%s)", err, errOut.String())
		}
		if !strings.HasPrefix(out.String(), "removed 1 events older than ") {
			t.Errorf("purge printed %q", out.String())
		}
		st, err = app.OpenStore(ctx, db, ring(t, k))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for i, want := range []error{store.ErrNotFound, nil, nil} {
			if _, _, err := st.EventGet(ctx, "", res[i].EventID); !errors.Is(err, want) {
				t.Errorf("event %d after purge: %v, want %v", i, err, want)
			}
		}
	})
}

func TestPurgeRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"purge", "--db", t.TempDir() + "/hookd.db", "--retention", "24h"}, // no such file
		{"purge", "--db", t.TempDir() + "/hookd.db"},                       // no --retention
		{"purge", "--retention", "-1h"},
		{"purge", "--retention", "1ns"},
	} {
		var out, errOut bytes.Buffer
		err := run(t.Context(), args, &out, &errOut)
		if err == nil || (!strings.Contains(err.Error(), "--retention") && !strings.Contains(err.Error(), "--db")) {
			t.Errorf("%v: %v, want an error naming the flag", args, err)
		}
	}
}
