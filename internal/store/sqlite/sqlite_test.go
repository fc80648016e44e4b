package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"hookd/internal/core"
	"hookd/internal/seal"
	"hookd/internal/store"
	"hookd/internal/store/storetest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "hookd.db"), testKeys)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openTemp(t) })
}

func TestReopenKeepsDataAndSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hookd.db")
	s, err := Open(ctx, path, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	tn := core.Tenant{ID: "ten_1", Name: "acme"}
	if err := s.TenantCreate(ctx, tn, core.APIKey{ID: "key_1", TenantID: tn.ID, Hash: "h1"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if err := Migrate(ctx, path); err != nil {
		t.Fatalf("Migrate on a migrated file: %v", err)
	}
	s, err = Open(ctx, path, testKeys)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.TenantGet(ctx, "ten_1"); err != nil {
		t.Fatalf("tenant lost on reopen: %v", err)
	}
	var applied, defaults int
	ms, _ := migrations()
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if applied != len(ms) {
		t.Fatalf("schema_migrations has %d rows, want %d (one per migration)", applied, len(ms))
	}
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM tenants WHERE id = 'default'`).Scan(&defaults); err != nil {
		t.Fatal(err)
	}
	if defaults != 1 {
		t.Fatalf("%d default tenants", defaults)
	}
}

// The PRAGMAs must hold on every connection of both pools, not only on the
// first one opened.
func TestPragmasOnEveryConnection(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	check := func(what string, q func(query string, dest any) error) {
		t.Helper()
		var mode string
		var sync, fk, busy, temp int
		for _, c := range []struct {
			q    string
			dest any
		}{{"PRAGMA journal_mode", &mode}, {"PRAGMA synchronous", &sync}, {"PRAGMA foreign_keys", &fk},
			{"PRAGMA busy_timeout", &busy}, {"PRAGMA temp_store", &temp}} {
			if err := q(c.q, c.dest); err != nil {
				t.Fatalf("%s: %s: %v", what, c.q, err)
			}
		}
		if mode != "wal" || sync != 2 || fk != 1 || busy != 5000 || temp != 2 {
			t.Fatalf("%s: journal_mode=%s synchronous=%d foreign_keys=%d busy_timeout=%d temp_store=%d; want wal 2 1 5000 2",
				what, mode, sync, fk, busy, temp)
		}
	}
	// Hold several read connections at once so the pool has to open new ones.
	var held []func() error
	for i := 0; i < 3; i++ {
		c, err := s.r.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c.Close)
		check("read connection", func(q string, d any) error { return c.QueryRowContext(ctx, q).Scan(d) })
		if _, err := c.ExecContext(ctx, `INSERT INTO tenants (id, name, created_at) VALUES ('x', 'x', 0)`); err == nil {
			t.Fatal("a read connection accepted a write")
		}
	}
	for _, c := range held {
		c()
	}
	wc, err := s.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	check("write connection", func(q string, d any) error { return wc.QueryRowContext(ctx, q).Scan(d) })
}

// The hot dispatcher queries must walk the pending-by-subscription index,
// never scan deliveries or sort.
func TestDueQueriesUseSubscriptionIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{
		"due":                   {dueQuery, []any{"h", 0, "[]", 10, 30}},
		"next due":              {nextDueQuery, []any{"h", 0}},
		"ordered due":           {orderedDueQuery, []any{"h", 0, 30}},
		"pending subscriptions": {pendingSubscriptionsQuery, []any{nil}},
		"stats":                 {"SELECT " + statsColumns + " FROM subscriptions s WHERE s.id = 'h'", nil},
	} {
		rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		p := strings.Join(plan, "\n")
		if !strings.Contains(p, "deliveries_subscription_due") || strings.Contains(p, "TEMP B-TREE") || strings.Contains(p, "SCAN d ") || strings.Contains(p, "SCAN deliveries") {
			t.Fatalf("%s plan:\n%s", name, p)
		}
	}
}

// The heads of an ordered subscription's keys come from one seek of
// deliveries_key_line per key, never a walk of the keys' rows; only the
// heads found are sorted.
func TestKeyHeadsSkipThroughTheKeyLine(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	p := plan(t, s, keyHeadsQuery, []any{"h", 0, "[]", 10})
	if !strings.Contains(p, "SEARCH deliveries USING COVERING INDEX deliveries_key_line (subscription_id=? AND ordering_key>?)") ||
		strings.Contains(p, "SCAN d ") || strings.Contains(p, "SCAN deliveries") {
		t.Fatalf("key heads plan:\n%s", p)
	}
}

// Migration 0004 rebuilds deliveries; a file written by the schema before it
// must keep every delivery and attempt, with foreign keys intact.
func TestRebuildOfDeliveriesKeepsRows(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "hookd.db")
	w, err := openWriter(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(ctx, w, 3); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO subscriptions (id, tenant_id, url, host, event_types, secret, state, created_at, updated_at)
			VALUES ('sub_1', 'default', 'https://h.example/', 'h.example:443', '["*"]', 'whsec_x', 'active', 1, 1)`,
		`INSERT INTO events (id, tenant_id, type, payload, created_at) VALUES ('evt_1', 'default', 'a.b', X'7B7D', 1)`,
		`INSERT INTO deliveries (id, event_id, subscription_id, tenant_id, event_type, host, shard, state,
			attempt_count, next_attempt_at, last_status, created_at, updated_at, round_started_at)
			VALUES ('dlv_1', 'evt_1', 'sub_1', 'default', 'a.b', 'h.example:443', 7, 'pending', 1, 5, 500, 1, 2, 1)`,
		`INSERT INTO attempts (delivery_id, n, started_at, duration_ns, status_code, response)
			VALUES ('dlv_1', 1, 3, 4, 500, 'oops')`,
	} {
		if _, err := w.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	w.Close()

	s, err := Open(ctx, path, testKeys)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, as, err := s.DeliveryGet(ctx, "", "dlv_1")
	if err != nil {
		t.Fatal(err)
	}
	if d.State != core.DeliveryPending || d.AttemptCount != 1 || d.LastStatus != 500 || d.Shard != 7 || len(as) != 1 || as[0].Response != "oops" {
		t.Fatalf("after the rebuild: %+v, attempts %+v", d, as)
	}
	var withoutRowid int
	if err := s.r.QueryRowContext(ctx, `SELECT wr FROM pragma_table_list WHERE name = 'deliveries'`).Scan(&withoutRowid); err != nil {
		t.Fatal(err)
	}
	var violations int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM pragma_foreign_key_check`).Scan(&violations); err != nil {
		t.Fatal(err)
	}
	var shardIndex int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'deliveries_shard_due'`).Scan(&shardIndex); err != nil {
		t.Fatal(err)
	}
	if withoutRowid != 1 || violations != 0 || shardIndex != 0 {
		t.Fatalf("deliveries WITHOUT ROWID=%d, foreign key violations %d, shard index present %d; want 1 0 0", withoutRowid, violations, shardIndex)
	}
	// Deleting an event still cascades to its deliveries and their attempts.
	if _, err := s.w.ExecContext(ctx, `DELETE FROM events WHERE id = 'evt_1'`); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM attempts)`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d deliveries and attempts left after deleting their event", left)
	}
}

// Results are written a chunk of rows per statement; two results for one
// delivery in one call must still apply in order, and a batch larger than
// the biggest chunk must write every row. (SQLite happens to apply both rows
// of one UPDATE ... FROM in order today, so this does not fail if the store
// stops splitting repeats into separate statements; the split is there
// because SQLite documents the row it uses as arbitrary.)
func TestRecordResultsAppliesRepeatsInOrder(t *testing.T) {
	ctx := t.Context()
	s := openTemp(t)
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sub := core.Subscription{ID: "sub_1", TenantID: core.DefaultTenant, URL: "https://h.example/", Host: "h.example:443",
		EventTypes: []string{"*"}, Secret: "whsec_x", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := s.SubscriptionCreate(ctx, sub); err != nil {
		t.Fatal(err)
	}
	const n = 70 // 32 + 32 + 4 + 2
	batch := make([]store.EventInsert, n)
	for i := range batch {
		e := core.Event{ID: fmt.Sprintf("evt_%03d", i), TenantID: core.DefaultTenant, Type: "a.b", Payload: []byte(`{}`), CreatedAt: now}
		batch[i] = store.EventInsert{Event: e, Deliveries: []core.Delivery{{ID: fmt.Sprintf("dlv_%03d", i), EventID: e.ID,
			SubscriptionID: sub.ID, TenantID: e.TenantID, EventType: e.Type, Host: sub.Host, State: core.DeliveryPending,
			NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}}}
	}
	if _, err := s.EventInsertBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var rs []store.AttemptResult
	for i := range n {
		a := core.Attempt{DeliveryID: fmt.Sprintf("dlv_%03d", i), N: 1, StartedAt: now, StatusCode: 500}
		rs = append(rs, store.AttemptResult{Attempt: a, State: core.DeliveryPending, NextAttemptAt: now.Add(time.Minute), Now: now})
	}
	// dlv_000 again: its second try succeeded, in the same call.
	rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: "dlv_000", N: 2, StartedAt: now, StatusCode: 200},
		State: core.DeliveryDelivered, Now: now})
	if err := s.DeliveryRecordResults(ctx, rs); err != nil {
		t.Fatal(err)
	}
	d, as, err := s.DeliveryGet(ctx, "", "dlv_000")
	if err != nil {
		t.Fatal(err)
	}
	if d.State != core.DeliveryDelivered || d.AttemptCount != 2 || len(as) != 2 {
		t.Fatalf("dlv_000: state %s, attempt_count %d, %d attempts; want delivered 2 2", d.State, d.AttemptCount, len(as))
	}
	for i := 1; i < n; i++ {
		d, as, err := s.DeliveryGet(ctx, "", fmt.Sprintf("dlv_%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		if d.State != core.DeliveryPending || d.AttemptCount != 1 || d.LastStatus != 500 || len(as) != 1 || !d.NextAttemptAt.Equal(now.Add(time.Minute)) {
			t.Fatalf("%s: %+v with %d attempts", d.ID, d, len(as))
		}
	}
}

// testKeys seal every store of these tests: one key, so a file reopened
// in a test opens with the keys it was written with.
var testKeys = func() *seal.Keyring {
	k, err := seal.Parse(seal.NewKey())
	if err != nil {
		panic(err)
	}
	return k
}()

func TestSealing(t *testing.T) {
	storetest.RunSealing(t, func(t *testing.T) storetest.SealingBackend {
		path := filepath.Join(t.TempDir(), "hookd.db")
		raw := func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		return storetest.SealingBackend{
			Open: func(t *testing.T, keys *seal.Keyring) store.Store {
				s, err := Open(t.Context(), path, keys)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			Dump: func(t *testing.T) string { return dumpRows(t, raw(t), `SELECT * FROM subscriptions`) },
			SetColumn: func(t *testing.T, id, column, value string) {
				if _, err := raw(t).ExecContext(t.Context(), `UPDATE subscriptions SET `+column+` = ? WHERE id = ?`, value, id); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}

// dumpRows renders a query's rows as text, every column, one line a row.
func dumpRows(t *testing.T, db *sql.DB, q string) string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var b strings.Builder
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			if bs, ok := v.([]byte); ok {
				v = string(bs)
			}
			fmt.Fprintf(&b, "%v\t", v)
		}
		b.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The dashboard's lists read their own indexes in order: never a scan of
// the table, never a sort (a page costs its rows, however long the log).
func TestLogQueriesUseTheirIndexes(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	now := time.Now()
	cur, dcur := store.TimeCursor(now, "evt_x"), store.TimeCursor(now, "evt_x", "sub_x")
	build := func(q string, args []any, err error) (string, []any) {
		if err != nil {
			t.Fatal(err)
		}
		return q, args
	}
	for name, c := range map[string]struct {
		index string
		q     func() (string, []any)
	}{
		"events": {"events_tenant_time", func() (string, []any) {
			return build(eventListQuery(store.EventListParams{TenantID: "a", Cursor: cur}))
		}},
		"events in a time": {"events_tenant_time", func() (string, []any) {
			return build(eventListQuery(store.EventListParams{TenantID: "a", Since: now, Until: now}))
		}},
		"events of a type": {"events_tenant_type", func() (string, []any) {
			return build(eventListQuery(store.EventListParams{TenantID: "a", Types: []string{"a.b"}, Cursor: cur}))
		}},
		"event by key": {"events_idempotency", func() (string, []any) {
			return build(eventListQuery(store.EventListParams{TenantID: "a", IdempotencyKey: "k"}))
		}},
		"deliveries": {"events_tenant_time", func() (string, []any) {
			return build(deliveryListTenantQuery(store.DeliveryListParams{TenantID: "a", State: "failed", Status: 500, Since: now, Cursor: dcur}))
		}},
		"deliveries of a type": {"events_tenant_type", func() (string, []any) {
			return build(deliveryListTenantQuery(store.DeliveryListParams{TenantID: "a", EventType: "a.b", Cursor: dcur}))
		}},
		"event types": {"events_tenant_type", func() (string, []any) { return eventTypesQuery, []any{"a", "", 10} }},
		"failing":     {"subscriptions_failing", func() (string, []any) { return subscriptionListQuery(true), []any{"", "", "", 10} }},
	} {
		q, args := c.q()
		p := plan(t, s, q, args)
		// An event's deliveries are put in order among themselves (a sort
		// of its fan-out, "FOR LAST TERM"), never the whole log.
		sorts := strings.ReplaceAll(p, "USE TEMP B-TREE FOR LAST TERM OF ORDER BY", "")
		if !strings.Contains(p, "USING INDEX "+c.index) && !strings.Contains(p, "USING COVERING INDEX "+c.index) ||
			strings.Contains(sorts, "TEMP B-TREE") || strings.Contains(p, "SCAN events") || strings.Contains(p, "SCAN d") ||
			strings.Contains(p, "SCAN subscriptions") {
			t.Errorf("%s: want %s, no scan, no sort of the log; plan:\n%s", name, c.index, p)
		}
	}
}

// A subscription's deliveries are walked in deliveries_subscription_created
// order, by (created_at, id): a seek to the subscription, its time range or
// its cursor, never a scan of the table and never a sort.
func TestSubscriptionWalksUseTheCreatedIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	now := ns(time.Now())
	type query struct {
		q    string
		args []any
	}
	list := func(p store.DeliveryListParams, cursorAt int64) query {
		p.SubscriptionID = "sub_x"
		q, args := deliveryListQuery(p, 10, cursorAt)
		return query{q, args}
	}
	for name, c := range map[string]query{
		"list":                                list(store.DeliveryListParams{}, 0),
		"list a page":                         list(store.DeliveryListParams{Cursor: "dlv_x", State: "failed"}, now),
		"list past a removed cursor":          list(store.DeliveryListParams{Cursor: core.NewID("dlv")}, 0),
		"list a range":                        list(store.DeliveryListParams{Since: time.Now(), Until: time.Now(), EventType: "a.b"}, 0),
		"count":                               {deliveryCountSQL, []any{"sub_x", "", `["failed"]`, now, 0, `[]`, 10}},
		"a replay step":                       {replayStepSQL, []any{"sub_x", "dlv_x", now, 0, `[]`, 10, `["failed"]`, now, ""}},
		"a replay step past a removed cursor": {replayStepSQL, []any{"sub_x", "", now, 0, `[]`, 10, `["failed"]`, now, "dlv_x"}},
		"a move's batch":                      {moveBatchSQL, []any{"sub_x", now, "dlv_x", 10}},
		"a move":                              {moveSQL, []any{"h:1", 1, "sub_x", now, "dlv_x", now, "dlv_y"}},
	} {
		p := plan(t, s, c.q, c.args)
		// Every walk but the whole list seeks to a time or a cursor.
		seek := "deliveries_subscription_created (subscription_id=? AND "
		if name == "list" {
			seek = "deliveries_subscription_created (subscription_id=?)"
		}
		if !strings.Contains(p, seek) ||
			strings.Contains(p, "TEMP B-TREE") || strings.Contains(p, "SCAN deliveries") {
			t.Errorf("%s: want a seek in deliveries_subscription_created, no scan, no sort; plan:\n%s", name, p)
		}
	}
}

// plan is the query plan SQLite chooses for q.
func plan(t *testing.T, s *Store, q string, args []any) string {
	t.Helper()
	rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		t.Fatalf("%v: %.60s", err, q)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, detail)
	}
	return strings.Join(lines, "\n")
}

// Anyone may try a portal token, unauthenticated: one that names no live
// link is answered from a read, never queued behind the one writer.
func TestUnknownPortalTokenTakesNoWrite(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	held, release := make(chan struct{}), make(chan struct{})
	go s.writeTx(t.Context(), func(*sql.Tx) error {
		close(held)
		<-release
		return nil
	})
	<-held
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := s.PortalLinkRedeem(ctx, "no-such-hash", time.Now(), core.APIKey{ID: "key_x", Hash: "h"})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unknown token while the writer is busy: %v, want ErrNotFound at once", err)
	}
}

// fourFailed makes a subscription with four deliveries failed after one
// attempt (oldest first), and fail, which records another failed attempt.
func fourFailed(t *testing.T, s *Store) (core.Subscription, []string, func(ids []string, n int)) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	sub := core.Subscription{ID: core.NewID("sub"), TenantID: core.DefaultTenant, URL: "https://h.example/", Host: "h.example:443",
		EventTypes: []string{"*"}, Secret: "whsec_c2VjcmV0", State: core.SubActive, CreatedAt: now, UpdatedAt: now}
	if err := s.SubscriptionCreate(ctx, sub); err != nil {
		t.Fatal(err)
	}
	fail := func(ids []string, n int) {
		t.Helper()
		var rs []store.AttemptResult
		for _, id := range ids {
			rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: id, N: n, StartedAt: now, StatusCode: 400},
				SubscriptionID: sub.ID, State: core.DeliveryFailed, Now: now})
		}
		if err := s.DeliveryRecordResults(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	for range 4 {
		e := core.Event{ID: core.NewID("evt"), TenantID: sub.TenantID, Type: "a.b", Payload: []byte(`{}`), CreatedAt: now}
		d := core.Delivery{ID: core.NewID("dlv"), EventID: e.ID, SubscriptionID: sub.ID, TenantID: sub.TenantID, EventType: e.Type,
			Host: sub.Host, Shard: core.ShardOf(sub.Host), State: core.DeliveryPending, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now}
		if _, err := s.EventInsertBatch(ctx, []store.EventInsert{{Event: e, Deliveries: []core.Delivery{d}}}); err != nil {
			t.Fatal(err)
		}
		all = append(all, d.ID)
	}
	fail(all, 1)
	return sub, all, fail
}

// remove deletes a delivery's rows, as retention does.
func remove(t *testing.T, s *Store, id string) {
	for _, q := range []string{`DELETE FROM attempts WHERE delivery_id = ?`, `DELETE FROM deliveries WHERE id = ?`} {
		if _, err := s.w.ExecContext(t.Context(), q, id); err != nil {
			t.Fatal(err)
		}
	}
}

// A replay job whose cursor row retention removed goes on past it, not
// from the start again: a delivery it already put back, and that failed
// again since, is not put back twice.
func TestReplayStepPastARemovedCursor(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	sub, all, fail := fourFailed(t, s)
	now := time.Now().UTC()
	j := core.ReplayJob{ID: core.NewID("rpl"), TenantID: sub.TenantID, SubscriptionID: sub.ID, Since: now.Add(-time.Hour),
		EventTypes: []string{}, States: []core.DeliveryState{core.DeliveryFailed}, Rate: core.ReplayRateMax,
		State: core.ReplayRunning, CreatedAt: now, UpdatedAt: now}
	if err := s.ReplayJobCreate(ctx, j); err != nil {
		t.Fatal(err)
	}
	_, put, err := s.ReplayJobStep(ctx, j.ID, 2, now)
	if err != nil || !slices.Equal(put, all[:2]) {
		t.Fatalf("first step put back %v (%v), want %v", put, err, all[:2])
	}
	fail(all[:2], 2) // both failed again
	remove(t, s, all[1])
	_, put, err = s.ReplayJobStep(ctx, j.ID, 10, now)
	if err != nil || !slices.Equal(put, all[2:]) {
		t.Fatalf("after the cursor's row went, the step put back %v (%v), want only %v", put, err, all[2:])
	}
}

// A page of a subscription's deliveries whose cursor row retention
// removed goes on past it, not to an empty page.
func TestDeliveryListPastARemovedCursor(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	sub, all, _ := fourFailed(t, s)
	page, err := s.DeliveryList(t.Context(), store.DeliveryListParams{SubscriptionID: sub.ID, Limit: 2})
	if err != nil || len(page.Data) != 2 || page.Data[1].ID != all[2] || page.NextCursor != all[2] {
		t.Fatalf("first page %v, cursor %q (%v); want the newest two, then %s", page.Data, page.NextCursor, err, all[2])
	}
	remove(t, s, all[2])
	page, err = s.DeliveryList(t.Context(), store.DeliveryListParams{SubscriptionID: sub.ID, Limit: 2, Cursor: all[2]})
	if err != nil || len(page.Data) != 2 || page.Data[0].ID != all[1] || page.Data[1].ID != all[0] {
		t.Fatalf("after the cursor's row went, the next page is %v (%v), want %s and %s", page.Data, err, all[1], all[0])
	}
}
