package sqlite

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"hookd/internal/store"
)

// bucketCountsSQL counts a bucket's deliveries from the rows still there
// and what Purge kept for it, in one statement: one read snapshot, so a
// purge committing meanwhile is seen whole or not at all. The last column,
// the live rows' attempts, sizes the latency's sample. ?1 since and ?2
// until (ns), ?3 the width (ns), ?4 the subscription or the tenant, ?5
// the kept table's unit (ns per hour or day). KEPT, UNIT and WHOSE are
// filled in by bucketSQL.
const bucketCountsSQL = `SELECT b, sum(delivered), sum(failed), sum(skipped), sum(pending), sum(attempts), sum(live) FROM (
		SELECT (created_at - ?1) / ?3 AS b, sum(state = 'delivered') AS delivered, sum(state = 'failed') AS failed,
			sum(state = 'skipped') AS skipped, sum(state = 'pending') AS pending, sum(attempt_count) AS attempts,
			sum(attempt_count) AS live
		FROM deliveries WHERE WHOSE AND created_at >= ?1 AND created_at < ?2
		GROUP BY b
		UNION ALL
		SELECT (UNIT * ?5 - ?1) / ?3, delivered, failed, skipped, 0, attempts, 0
		FROM KEPT WHERE WHOSE AND UNIT >= ?1 / ?5 AND UNIT < ?2 / ?5)
	GROUP BY b`

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

// bucketSQL fills a template for p: the kept table of its width, and the
// filter on whose deliveries (one subscription's, or its tenant's through
// the subscriptions table, which keeps deleted ones).
func bucketSQL(tmpl string, p store.DeliveryBucketsParams) string {
	kept, unit := "hourly_counts", "hour"
	if p.Width == store.BucketDay {
		kept, unit = "daily_counts", "day"
	}
	whose := "subscription_id = ?4"
	if p.SubscriptionID == "" {
		whose = "subscription_id IN (SELECT id FROM subscriptions WHERE tenant_id = ?4)"
	}
	return strings.NewReplacer("KEPT", kept, "UNIT", unit, "WHOSE", whose).Replace(tmpl)
}

func (s *Store) DeliveryBuckets(ctx context.Context, p store.DeliveryBucketsParams) ([]store.DeliveryBucket, error) {
	out, err := p.Buckets()
	if err != nil {
		return nil, err
	}
	unit := nsPerHour
	if p.Width == store.BucketDay {
		unit = nsPerDay
	}
	who := p.SubscriptionID
	if who == "" {
		who = p.TenantID
	}
	bucket := func(b int64) (*store.DeliveryBucket, error) {
		if b < 0 || b >= int64(len(out)) {
			return nil, fmt.Errorf("sqlite: delivery buckets: bucket %d of %d", b, len(out))
		}
		return &out[b], nil
	}

	sample := []byte(strings.Repeat("0", len(out)))
	rows, err := s.r.QueryContext(ctx, bucketSQL(bucketCountsSQL, p), ns(p.Since), ns(p.Until), int64(p.Width), who, unit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: delivery buckets: %w", mapErr(err))
	}
	defer rows.Close()
	for rows.Next() {
		var b, live int64
		var c store.DeliveryBucket
		if err := rows.Scan(&b, &c.Delivered, &c.Failed, &c.Skipped, &c.Pending, &c.Attempts, &live); err != nil {
			return nil, fmt.Errorf("sqlite: delivery buckets: %w", err)
		}
		o, err := bucket(b)
		if err != nil {
			return nil, err
		}
		c.Start = o.Start
		*o = c
		sample[b] = byte('0' + p.Sample(live))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: delivery buckets: %w", mapErr(err))
	}
	rows.Close()

	// Each bucket's durations at the ranks its percentiles read.
	ranked := map[int64]map[int64]float64{}
	rows, err = s.r.QueryContext(ctx, bucketSQL(bucketLatencySQL, p),
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
		o, err := bucket(b)
		if err != nil {
			return nil, err
		}
		o.Timed = n
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
