package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"hookd/internal/store"
)

// bucketCountsSQL counts a bucket's deliveries from the rows still there
// and what Purge kept for it, in one statement: one read snapshot, so a
// purge committing meanwhile is seen whole or not at all. The last column,
// the live rows' attempts, sizes the latency's sample. ?1 since and ?2
// until (ns), ?3 the width (ns), ?4 the subscription or the tenant, ?5
// the kept table's unit (ns per hour or day), ?6 (DeliveryBucketsEach)
// the subscriptions' IDs as a JSON array. KEY, KEPT and WHOSE are filled
// in by fillBucketSQL.
const bucketCountsSQL = `SELECT k, b, sum(delivered), sum(failed), sum(skipped), sum(pending), sum(attempts), sum(live) FROM (
		SELECT KEY AS k, (created_at - ?1) / ?3 AS b, sum(state = 'delivered') AS delivered, sum(state = 'failed') AS failed,
			sum(state = 'skipped') AS skipped, sum(state = 'pending') AS pending, sum(attempt_count) AS attempts,
			sum(attempt_count) AS live
		FROM deliveries WHERE WHOSE AND created_at >= ?1 AND created_at < ?2
		GROUP BY 1, 2
		KEPT)
	GROUP BY k, b`

// keptCountsSQL adds what Purge kept by the hour or day (TABLE, in UNIT).
const keptCountsSQL = `UNION ALL
		SELECT KEY, (UNIT * ?5 - ?1) / ?3, delivered, failed, skipped, 0, attempts, 0
		FROM TABLE WHERE WHOSE AND UNIT >= ?1 / ?5 AND UNIT < ?2 / ?5`

// bucketLatencySQL returns, per bucket, how many attempt rows it read (n)
// and the few of their durations, in order (i), that the percentiles ?6
// and ?7 fall between: SQLite sorts the durations itself and Go reads at
// most four rows a bucket. ?8 holds a digit per bucket, k (see
// store.DeliveryBucketsParams.Sample): the bucket reads the attempts of
// the deliveries whose ID hashes to 5k leading zero bits. The hash,
// Fibonacci hashing of the ID's last four characters (where a ULID is
// random, or counts up within a millisecond), spreads IDs that count up in
// steps, as one subscription's do when each event's ID comes between two
// of its deliveries' IDs.
const bucketLatencySQL = `SELECT b, n, i, v FROM (
		SELECT b, v, row_number() OVER w - 1 AS i,
			count(*) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS n
		FROM (SELECT b, a.duration_ns AS v
			FROM (SELECT id, (created_at - ?1) / ?3 AS b FROM deliveries
				WHERE WHOSE AND created_at >= ?1 AND created_at < ?2) d
			JOIN attempts a ON a.delivery_id = d.id
			WHERE ((unicode(substr(d.id, -1)) + 128 * unicode(substr(d.id, -2, 1)) + 16384 * unicode(substr(d.id, -3, 1))
				+ 2097152 * unicode(substr(d.id, -4, 1))) * 2654435761 % 4294967296) >> (32 - 5 * substr(?8, b + 1, 1)) = 0)
		WINDOW w AS (PARTITION BY b ORDER BY v))
	WHERE i IN (CAST(?6 * (n - 1) AS INTEGER), CAST(?6 * (n - 1) AS INTEGER) + 1,
		CAST(?7 * (n - 1) AS INTEGER), CAST(?7 * (n - 1) AS INTEGER) + 1)`

// bucketSQL fills a template for p: the kept counts of its width (none
// by the minute), and the filter on whose deliveries (one subscription's,
// or its tenant's through the subscriptions table, which keeps deleted
// ones).
func bucketSQL(tmpl string, p store.DeliveryBucketsParams) string {
	return fillBucketSQL(tmpl, p, false)
}

// fillBucketSQL is bucketSQL, or with each the rows of each subscription
// of the tenant named in ?6 apart (KEY: their ID).
func fillBucketSQL(tmpl string, p store.DeliveryBucketsParams, each bool) string {
	kept := ""
	switch p.Width {
	case store.BucketHour:
		kept = strings.NewReplacer("TABLE", "hourly_counts", "UNIT", "hour").Replace(keptCountsSQL)
	case store.BucketDay:
		kept = strings.NewReplacer("TABLE", "daily_counts", "UNIT", "day").Replace(keptCountsSQL)
	}
	key, whose := "''", "subscription_id = ?4"
	switch {
	case each:
		key, whose = "subscription_id", "subscription_id IN (SELECT id FROM subscriptions WHERE tenant_id = ?4 AND id IN (SELECT value FROM json_each(?6)))"
	case p.SubscriptionID == "":
		whose = "subscription_id IN (SELECT id FROM subscriptions WHERE tenant_id = ?4)"
	}
	return strings.NewReplacer("KEY", key, "WHOSE", whose).Replace(strings.Replace(tmpl, "KEPT", kept, 1))
}

// unitOf is the kept table's unit for p (any, by the minute: none is read).
func unitOf(p store.DeliveryBucketsParams) int64 {
	if p.Width == store.BucketDay {
		return nsPerDay
	}
	return nsPerHour
}

// bucketCounts runs the counts query, handing each row to got: whose it
// is ("" unless each), its bucket's index, its counts and live attempts.
func (s *Store) bucketCounts(ctx context.Context, p store.DeliveryBucketsParams, each bool, args []any,
	got func(key string, b int64, c store.DeliveryBucket, live int64) error) error {
	rows, err := s.r.QueryContext(ctx, fillBucketSQL(bucketCountsSQL, p, each), args...)
	if err != nil {
		return fmt.Errorf("sqlite: delivery buckets: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var key string
		var b, live int64
		var c store.DeliveryBucket
		if err := rows.Scan(&key, &b, &c.Delivered, &c.Failed, &c.Skipped, &c.Pending, &c.Attempts, &live); err != nil {
			return fmt.Errorf("sqlite: delivery buckets: %w", err)
		}
		if err := got(key, b, c, live); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: delivery buckets: %w", mapErr(err))
	}
	return nil
}

// into puts a row's counts in bucket b of out, keeping its start.
func into(out []store.DeliveryBucket, b int64, c store.DeliveryBucket) error {
	if b < 0 || b >= int64(len(out)) {
		return fmt.Errorf("sqlite: delivery buckets: bucket %d of %d", b, len(out))
	}
	c.Start = out[b].Start
	out[b] = c
	return nil
}

func (s *Store) DeliveryBucketsEach(ctx context.Context, p store.DeliveryBucketsParams, ids []string) ([][]store.DeliveryBucket, error) {
	empty, err := p.Buckets()
	if err != nil {
		return nil, err
	}
	if p.TenantID == "" {
		return nil, fmt.Errorf("sqlite: delivery buckets of each: no tenant")
	}
	out := make([][]store.DeliveryBucket, len(ids))
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		out[i], at[id] = slices.Clone(empty), i
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	args := []any{ns(p.Since), ns(p.Until), int64(p.Width), p.TenantID, unitOf(p), string(list)}
	return out, s.bucketCounts(ctx, p, true, args, func(key string, b int64, c store.DeliveryBucket, _ int64) error {
		i, ok := at[key]
		if !ok {
			return fmt.Errorf("sqlite: delivery buckets of each: a row of %s, not asked for", key)
		}
		return into(out[i], b, c)
	})
}

func (s *Store) DeliveryBuckets(ctx context.Context, p store.DeliveryBucketsParams) ([]store.DeliveryBucket, error) {
	out, err := p.Buckets()
	if err != nil {
		return nil, err
	}
	who := p.SubscriptionID
	if who == "" {
		who = p.TenantID
	}
	unit := unitOf(p)

	sample := []byte(strings.Repeat("0", len(out)))
	if err := s.bucketCounts(ctx, p, false, []any{ns(p.Since), ns(p.Until), int64(p.Width), who, unit},
		func(_ string, b int64, c store.DeliveryBucket, live int64) error {
			if err := into(out, b, c); err != nil {
				return err
			}
			sample[b] = byte('0' + p.Sample(live))
			return nil
		}); err != nil {
		return nil, err
	}

	// Each bucket's durations at the ranks its percentiles read.
	ranked := map[int64]map[int64]float64{}
	rows, err := s.r.QueryContext(ctx, bucketSQL(bucketLatencySQL, p),
		ns(p.Since), ns(p.Until), int64(p.Width), who, unit, 0.5, 0.99, string(sample))
	if err != nil {
		return nil, fmt.Errorf("sqlite: delivery latency: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var b, n, i, v int64
		if err := rows.Scan(&b, &n, &i, &v); err != nil {
			return nil, fmt.Errorf("sqlite: delivery latency: %w", err)
		}
		if b < 0 || b >= int64(len(out)) {
			return nil, fmt.Errorf("sqlite: delivery latency: bucket %d of %d", b, len(out))
		}
		out[b].Timed = n
		if ranked[b] == nil {
			ranked[b] = map[int64]float64{}
		}
		ranked[b][i] = float64(v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: delivery latency: %w", mapErr(err))
	}
	for b, vs := range ranked {
		o := &out[b]
		p50, ok50 := percentile(0.5, o.Timed, vs)
		p99, ok99 := percentile(0.99, o.Timed, vs)
		if !ok50 || !ok99 {
			return nil, fmt.Errorf("sqlite: delivery latency: bucket %d lacks a rank its percentiles read", b)
		}
		o.LatencyP50, o.LatencyP99 = p50, p99
	}
	return out, nil
}

// percentile is the p-quantile of n sorted durations of which vs holds
// those at the ranks it reads: linear between the two nearest ranks, as
// PostgreSQL's percentile_cont computes it. The rank is computed as the
// query computes it (the same float64 product, truncated), so it is one
// the query returned.
func percentile(p float64, n int64, vs map[int64]float64) (time.Duration, bool) {
	pos := p * float64(n-1)
	lo := int64(pos)
	hi := min(lo+1, n-1)
	a, okA := vs[lo]
	b, okB := vs[hi]
	return time.Duration(math.Round(a + (pos-float64(lo))*(b-a))), okA && okB
}
