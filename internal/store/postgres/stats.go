package postgres

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/store"
)

// bucketCountsSQL counts a bucket's deliveries from the rows still there
// and what Purge kept for it, in one statement: one snapshot, so a purge
// committing meanwhile is seen whole or not at all. The last column, the
// live rows' attempts, sizes the latency's sample. $1 since, $2 until, $3
// the width in seconds, $4 the subscription or the tenant. KEPT and WHOSE
// are filled in by bucketSQL.
const bucketCountsSQL = `SELECT b, sum(delivered)::bigint, sum(failed)::bigint, sum(skipped)::bigint,
		sum(pending)::bigint, sum(attempts)::bigint, sum(live)::bigint FROM (
		SELECT date_bin(make_interval(secs => $3), created_at, $1) AS b,
			count(*) FILTER (WHERE state = 'delivered') AS delivered, count(*) FILTER (WHERE state = 'failed') AS failed,
			count(*) FILTER (WHERE state = 'skipped') AS skipped, count(*) FILTER (WHERE state = 'pending') AS pending,
			sum(attempt_count) AS attempts, sum(attempt_count) AS live
		FROM deliveries WHERE WHOSE AND created_at >= $1 AND created_at < $2
		GROUP BY 1
		UNION ALL
		KEPT) c
	GROUP BY b`

// keptHourly and keptDaily read what Purge kept, by the start of each
// bucket (a day's is its UTC midnight).
const (
	keptHourly = `SELECT hour, delivered, failed, skipped, 0, attempts, 0 FROM hourly_counts
		WHERE WHOSE AND hour >= $1 AND hour < $2`
	keptDaily = `SELECT day::timestamp AT TIME ZONE 'UTC', delivered, failed, skipped, 0, attempts, 0 FROM daily_counts
		WHERE WHOSE AND day >= ($1 AT TIME ZONE 'UTC')::date AND day < ($2 AT TIME ZONE 'UTC')::date`
)

// bucketLatencySQL: per bucket, how many attempt rows it read and the
// percentiles of their durations (one sort for both). $5 holds a digit per
// bucket, k (see store.DeliveryBucketsParams.Sample): the bucket reads the
// attempts of the deliveries whose ID hashes to 5k leading zero bits. The
// attempts are looked up per delivery by key (the planner otherwise hashed
// the whole attempts table to join a day's deliveries).
const bucketLatencySQL = `SELECT date_bin(make_interval(secs => $3), d.created_at, $1), count(*),
		percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY a.duration_ns)
	FROM deliveries d CROSS JOIN LATERAL (SELECT duration_ns FROM attempts WHERE delivery_id = d.id OFFSET 0) a
	WHERE d.WHOSE AND d.created_at >= $1 AND d.created_at < $2
		AND (hashtext(d.id)::bigint & 4294967295)
			>> (32 - 5 * substr($5, floor(extract(epoch FROM d.created_at - $1) / $3)::int + 1, 1)::int) = 0
	GROUP BY 1`

// bucketSQL fills a template for p: the kept counts of its width, and the
// filter on whose deliveries (one subscription's, or its tenant's through
// the subscriptions table, which keeps deleted ones).
func bucketSQL(tmpl string, p store.DeliveryBucketsParams) string {
	kept := keptHourly
	if p.Width == store.BucketDay {
		kept = keptDaily
	}
	whose := "subscription_id = $4"
	if p.SubscriptionID == "" {
		whose = "subscription_id = ANY (ARRAY(SELECT id FROM subscriptions WHERE tenant_id = $4))"
	}
	return strings.NewReplacer("WHOSE", whose).Replace(strings.Replace(tmpl, "KEPT", kept, 1))
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
	args := []any{p.Since, p.Until, p.Width.Seconds(), who}
	bucket := func(start time.Time) (*store.DeliveryBucket, error) {
		i := start.Sub(p.Since) / p.Width
		if start.Before(p.Since) || i >= time.Duration(len(out)) {
			return nil, fmt.Errorf("postgres: delivery buckets: a bucket at %s, outside [%s, %s)", start, p.Since, p.Until)
		}
		return &out[i], nil
	}

	var start time.Time
	var c store.DeliveryBucket
	var live int64
	sample := []byte(strings.Repeat("0", len(out)))
	rows, _ := s.pool.Query(ctx, bucketSQL(bucketCountsSQL, p), args...)
	if _, err := pgx.ForEachRow(rows, []any{&start, &c.Delivered, &c.Failed, &c.Skipped, &c.Pending, &c.Attempts, &live}, func() error {
		o, err := bucket(start)
		if err != nil {
			return err
		}
		c.Start = o.Start
		*o = c
		sample[o.Start.Sub(p.Since)/p.Width] = byte('0' + p.Sample(live))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("postgres: delivery buckets: %w", mapErr(err))
	}

	var n int64
	var ps []float64
	rows, _ = s.pool.Query(ctx, bucketSQL(bucketLatencySQL, p), append(args, string(sample))...)
	if _, err := pgx.ForEachRow(rows, []any{&start, &n, &ps}, func() error {
		o, err := bucket(start)
		if err != nil {
			return err
		}
		o.Timed = n
		o.LatencyP50 = time.Duration(math.Round(ps[0]))
		o.LatencyP99 = time.Duration(math.Round(ps[1]))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("postgres: delivery latency: %w", mapErr(err))
	}
	return out, nil
}
