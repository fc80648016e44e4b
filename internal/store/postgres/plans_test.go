package postgres

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/core"
	"hookd/internal/store"
	"hookd/internal/testenv"
)

// The dispatcher's polls must walk the pending-only indexes, never read
// the deliveries table whole: with a few thousand rows and fresh
// statistics the planner has the choice, and must not take the scan.
func TestDispatchQueriesUseIndexes(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	var subs []core.Subscription
	for i := range 20 {
		subs = append(subs, activeSub(t, s, fmt.Sprintf("h%d.example:443", i)))
	}
	for range 20 {
		var batch []store.EventInsert
		for range 10 {
			batch = append(batch, event(subs...))
		}
		res := insert(t, s, batch...)
		// Most history is finished work, as in production.
		var rs []store.AttemptResult
		for _, r := range res[:9] {
			for _, d := range r.Deliveries {
				rs = append(rs, store.AttemptResult{Attempt: core.Attempt{DeliveryID: d.ID, N: 1, StartedAt: time.Now(),
					StatusCode: 200}, State: core.DeliveryDelivered, Now: time.Now()})
			}
		}
		if err := s.DeliveryRecordResults(ctx, rs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	for name, q := range map[string]struct {
		sql, index string
		args       []any
	}{
		"due":         {dueQuery, "deliveries_subscription_due", []any{subs[0].ID, time.Now(), []string{}, 10, 30}},
		"next due":    {nextDueQuery, "deliveries_subscription_due", []any{subs[0].ID, time.Now(), 30}},
		"key heads":   {keyHeadsQuery, "deliveries_key_line", []any{subs[0].ID, time.Now(), []string{}, 10}},
		"all pending": {allPendingQuery, "deliveries_subscription_due", nil},
		"shard poll":  {shardPendingQuery, "deliveries_shard_due", []any{[]int{core.ShardOf(subs[0].Host), core.ShardOf(subs[1].Host)}}},
	} {
		p := explain(t, s, name, q.sql, q.args)
		if !strings.Contains(p, q.index) || scans(t, s, p, "deliveries") {
			t.Errorf("%s: want %s and no scan of deliveries; plan:\n%s", name, q.index, p)
		}
	}
}

// Stats read a day of a month's deliveries through the (subscription,
// created_at) index, for one subscription or for all of a tenant's, and
// look their attempts up by key: never a walk of either table.
func TestStatsQueriesUseIndexes(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	day := time.Now().UTC().Truncate(24 * time.Hour)
	for _, q := range []string{
		`INSERT INTO tenants (id, name, created_at) VALUES ('other', 'other', now())`,
		`INSERT INTO subscriptions (id, tenant_id, url, host, event_types, secret, state, created_at, updated_at)
			SELECT 'sub_' || i, CASE WHEN i < 10 THEN 'default' ELSE 'other' END, 'https://h/', 'h:443', '{*}', 'x',
				'active', now(), now() FROM generate_series(0, 19) i`,
		// 20,000 deliveries over 30 days, one attempt each.
		// IDs below any day's (see partitions.go): one partition holds them.
		`INSERT INTO events (id, tenant_id, type, payload, created_at)
			SELECT 'evt_' || lpad(i::text, 10, '0'), 'default', 'a.b', '\x7b7d', $1::timestamptz - i * interval '2 minutes'
			FROM generate_series(1, 20000) i`,
		`INSERT INTO deliveries (id, event_id, subscription_id, tenant_id, event_type, host, shard, state,
				attempt_count, round_started_at, created_at, updated_at)
			SELECT 'dlv_' || substr(id, 5), id, 'sub_' || (substr(id, 5)::int % 20), 'default', 'a.b', 'h:443', 1,
				'delivered', 1, created_at, created_at, created_at FROM events`,
		`INSERT INTO attempts (delivery_id, n, started_at, duration_ns, status_code)
			SELECT id, 1, created_at, 1000000, 200 FROM deliveries`,
		`ANALYZE`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = append(args, day)
		}
		if _, err := s.pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	for name, p := range map[string]store.DeliveryBucketsParams{
		"a subscription's hours": {SubscriptionID: "sub_3", Since: day.Add(-24 * time.Hour), Until: day, Width: store.BucketHour},
		"a tenant's day":         {TenantID: "default", Since: day.Add(-24 * time.Hour), Until: day, Width: store.BucketDay},
	} {
		who := p.SubscriptionID + p.TenantID
		for i, q := range []string{bucketCountsSQL, bucketLatencySQL} {
			args := []any{p.Since, p.Until, p.Width.Seconds(), who}
			if q == bucketLatencySQL {
				args = append(args, "0")
			}
			pl := explain(t, s, name, bucketSQL(q, p), args)
			if !strings.Contains(pl, "deliveries_subscription_created") || scans(t, s, pl, "deliveries") ||
				scans(t, s, pl, "attempts") || (i == 1 && !strings.Contains(pl, "attempts_pkey")) {
				t.Errorf("%s, query %d: want deliveries_subscription_created (and attempts_pkey) and no scan of either table; plan:\n%s", name, i, pl)
			}
		}
	}
}

// fullSort matches a plan's sort node, not an incremental one.
var fullSort = regexp.MustCompile(`(?m)(^|->)\s*Sort\s+\(`)

// The dashboard's lists read their own indexes: never a scan of
// deliveries; and a big tenant's newest page is read backwards from the
// newest, never sorted out of its whole history.
func TestLogQueriesUseTheirIndexes(t *testing.T) {
	s := openURL(t, testenv.PostgresSchema(t))
	ctx := t.Context()
	sub := activeSub(t, s, "h.example:443")
	// One big tenant among 50, as the planner will meet them.
	for _, q := range []string{
		`INSERT INTO events (id, tenant_id, type, payload, idempotency_key, created_at)
			SELECT 'evt_' || lpad(g::text, 10, '0'), CASE WHEN g % 4 = 0 THEN 'ten' || (g % 50) ELSE 'big' END,
				'type.' || (g % 7), '{}', CASE WHEN g % 3 = 0 THEN 'key' || g ELSE '' END, now() - g * interval '1 second'
			FROM generate_series(1, 40000) g`,
		`INSERT INTO event_keys (tenant_id, idempotency_key, event_id)
			SELECT tenant_id, idempotency_key, id FROM events WHERE idempotency_key <> ''`,
		`INSERT INTO deliveries (id, event_id, subscription_id, tenant_id, event_type, host, shard, state,
				round_started_at, next_attempt_at, last_status, created_at, updated_at)
			SELECT 'dlv_' || substr(e.id, 5), e.id, '` + sub.ID + `', e.tenant_id, e.type, 'h.example:443', 1,
				CASE WHEN n.g % 10 = 0 THEN 'failed' ELSE 'delivered' END, e.created_at, NULL,
				CASE WHEN n.g % 10 = 0 THEN 500 ELSE 200 END, e.created_at, e.created_at
			FROM events e, LATERAL (SELECT substr(e.id, 5)::int AS g) n`,
		`INSERT INTO subscriptions (id, tenant_id, url, host, secret, state, created_at, updated_at, failing_since)
			SELECT 'sub_' || lpad(g::text, 10, '0'), 'default', 'https://h.example/', 'h.example:443', '', 'active', now(), now(),
				CASE WHEN g % 500 = 0 THEN now() END
			FROM generate_series(1, 5000) g`,
		`ANALYZE`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	cur, dcur := store.TimeCursor(now.Add(-time.Hour), "evt_x"), store.TimeCursor(now.Add(-time.Hour), "evt_x", "sub_x")
	for name, c := range map[string]struct {
		index  string
		sorted bool // read in order: no sort
		q      func() (query, error)
	}{
		"events": {"events_tenant_time", true, func() (query, error) { return eventListQuery(store.EventListParams{TenantID: "big", Cursor: cur}) }},
		"events in a time": {"", false, func() (query, error) {
			return eventListQuery(store.EventListParams{TenantID: "ten3", Since: now.Add(-2 * time.Hour), Until: now})
		}},
		"events of a type": {"events_tenant_type", true, func() (query, error) {
			return eventListQuery(store.EventListParams{TenantID: "big", Types: []string{"type.3"}, Cursor: cur})
		}},
		"event by key": {"event_keys_pkey", false, func() (query, error) {
			return eventListQuery(store.EventListParams{TenantID: "big", IdempotencyKey: "key3"})
		}},
		// Read backwards by an index of events by time (the tenant's, or
		// all tenants' when this one makes most of them).
		"deliveries": {"Index Scan Backward using events_", true, func() (query, error) {
			return deliveryListTenantQuery(store.DeliveryListParams{TenantID: "big", Cursor: dcur})
		}},
		// Rare states may be found from deliveries' own partial index: the
		// planner's choice, as long as deliveries are not read whole.
		"failed deliveries": {"Index", false, func() (query, error) {
			return deliveryListTenantQuery(store.DeliveryListParams{TenantID: "big", State: "failed", Status: 500, Cursor: dcur})
		}},
		"deliveries of a type": {"events_tenant_type", true, func() (query, error) {
			return deliveryListTenantQuery(store.DeliveryListParams{TenantID: "big", EventType: "type.3", Cursor: dcur})
		}},
		// A subscription's deliveries, newest first, from a cursor:
		// its (subscription_id, created_at) index read backwards.
		"a subscription's deliveries": {"deliveries_subscription_created", true, func() (query, error) {
			q, args := deliveryListQuery(store.DeliveryListParams{SubscriptionID: sub.ID, Cursor: "dlv_x"}, 50, now.Add(-time.Hour))
			return query{sql: q, args: args}, nil
		}},
		"a subscription's deliveries past a removed cursor": {"deliveries_subscription_created", true, func() (query, error) {
			q, args := deliveryListQuery(store.DeliveryListParams{SubscriptionID: sub.ID, Cursor: "dlv_x"}, 50, time.Time{})
			return query{sql: q, args: args}, nil
		}},
		"event types": {"events_tenant_type", false, func() (query, error) { return query{sql: eventTypesQuery, args: []any{"big", "", 10}}, nil }},
		"failing": {"subscriptions_failing", false, func() (query, error) {
			return query{sql: subscriptionListQuery(true), args: []any{"", "", 10}}, nil
		}},
	} {
		q, err := c.q()
		if err != nil {
			t.Fatal(err)
		}
		p := explain(t, s, name, q.sql, q.args)
		// An incremental sort of one event's deliveries (its fan-out) is
		// no sort of the log.
		if !strings.Contains(p, c.index) || !strings.Contains(p, "Index") || scans(t, s, p, "deliveries") ||
			(c.sorted && (scans(t, s, p, "") || fullSort.MatchString(p))) {
			t.Errorf("%s: want %s (read in order, unsorted: %v), no scan; plan:\n%s", name, c.index, c.sorted, p)
		}
	}
}

// explain is the plan PostgreSQL chooses for q, one line a node.
func explain(t *testing.T, s *Store, name, q string, args []any) string {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), "EXPLAIN "+q, args...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return strings.Join(plan, "\n")
}

var seqScan = regexp.MustCompile(`Seq Scan on (\w+)`)

// scans reports whether plan reads whole a table whose name starts with
// table and that holds rows: empty partitions (days with nothing in them
// yet) cost nothing to scan, and the planner rightly scans them.
func scans(t *testing.T, s *Store, plan, table string) bool {
	t.Helper()
	for _, m := range seqScan.FindAllStringSubmatch(plan, -1) {
		if !strings.HasPrefix(m[1], table) {
			continue
		}
		var rows float64
		if err := s.pool.QueryRow(t.Context(), `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, m[1]).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows > 0 {
			return true
		}
	}
	return false
}
