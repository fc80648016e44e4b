package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
		"due":         {dueQuery, "deliveries_subscription_due", []any{subs[0].ID, time.Now(), []string{}, 10}},
		"next due":    {nextDueQuery, "deliveries_subscription_due", []any{subs[0].ID, time.Now()}},
		"all pending": {allPendingQuery, "deliveries_subscription_due", nil},
		"shard poll":  {shardPendingQuery, "deliveries_shard_due", []any{[]int{core.ShardOf(subs[0].Host), core.ShardOf(subs[1].Host)}}},
	} {
		rows, err := s.pool.Query(ctx, "EXPLAIN "+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		p := strings.Join(plan, "\n")
		if !strings.Contains(p, q.index) || strings.Contains(p, "Seq Scan on deliveries") {
			t.Errorf("%s: want %s and no scan of deliveries; plan:\n%s", name, q.index, p)
		}
	}
}
