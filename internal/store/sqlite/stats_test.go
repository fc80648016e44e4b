package sqlite

import (
	"strings"
	"testing"

	"hookd/internal/store"
)

// Stats read a subscription's deliveries through its (subscription,
// created_at) index and what the purge kept through their keys, never a
// walk of the whole table; a tenant's through its subscriptions.
func TestStatsQueriesUseIndexes(t *testing.T) {
	s := openTemp(t)
	for _, p := range []store.DeliveryBucketsParams{
		{SubscriptionID: "sub_x", Width: store.BucketHour},
		{SubscriptionID: "sub_x", Width: store.BucketDay},
		{TenantID: "default", Width: store.BucketHour},
	} {
		for _, q := range []string{bucketCountsSQL, bucketLatencySQL} {
			rows, err := s.r.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+bucketSQL(q, p), 0, 1, 1, "x", 1, 0.5, 0.99, "0")
			if err != nil {
				t.Fatal(err)
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
			pl := strings.Join(plan, "\n")
			if !strings.Contains(pl, "deliveries_subscription_created (subscription_id=? AND created_at>? AND created_at<?)") ||
				strings.Contains(pl, "SCAN deliveries") || strings.Contains(pl, "SCAN d\n") ||
				(q == bucketCountsSQL && !strings.Contains(pl, "PRIMARY KEY (subscription_id=?")) {
				t.Errorf("%+v plan:\n%s", p, pl)
			}
		}
	}
}
