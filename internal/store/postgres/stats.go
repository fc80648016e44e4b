package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/store"
)

// bucketCountsSQL counts a bucket's deliveries from the rows still there
// and what Purge kept for it, in one statement: one snapshot, so a purge
// committing meanwhile is seen whole or not at all. The last column, the
// live rows' attempts, sizes the latency's sample. $1 since, $2 until, $3
// the width in seconds, $4 the subscription or the tenant, $5
// (DeliveryBucketsEach) the subscriptions' IDs. KEY, KEPT and WHOSE are
// filled in by fillBucketSQL.
const bucketCountsSQL = `SELECT k, b, sum(delivered)::bigint, sum(failed)::bigint, sum(skipped)::bigint,
		sum(pending)::bigint, sum(attempts)::bigint, sum(live)::bigint FROM (
		SELECT KEY AS k, date_bin(make_interval(secs => $3), created_at, $1) AS b,
			count(*) FILTER (WHERE state = 'delivered') AS delivered, count(*) FILTER (WHERE state = 'failed') AS failed,
			count(*) FILTER (WHERE state = 'skipped') AS skipped, count(*) FILTER (WHERE state = 'pending') AS pending,
			sum(attempt_count) AS attempts, sum(attempt_count) AS live
		FROM deliveries WHERE WHOSE AND created_at >= $1 AND created_at < $2
		GROUP BY 1, 2
		KEPT) c
	GROUP BY k, b`

// keptHourly and keptDaily read what Purge kept, by the start of each
// bucket (a day's is its UTC midnight). Nothing is kept by the minute.
const (
	keptHourly = `UNION ALL SELECT KEY, hour, delivered, failed, skipped, 0, attempts, 0 FROM hourly_counts
		WHERE WHOSE AND hour >= $1 AND hour < $2`
	keptDaily = `UNION ALL SELECT KEY, day::timestamp AT TIME ZONE 'UTC', delivered, failed, skipped, 0, attempts, 0 FROM daily_counts
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
	return fillBucketSQL(tmpl, p, false)
}

// fillBucketSQL is bucketSQL, or with each the rows of each subscription
// of the tenant named in $5 apart (KEY: their ID).
func fillBucketSQL(tmpl string, p store.DeliveryBucketsParams, each bool) string {
	kept := ""
	switch p.Width {
	case store.BucketHour:
		kept = keptHourly
	case store.BucketDay:
		kept = keptDaily
	}
	key, whose := "''::text", "subscription_id = $4"
	switch {
	case each:
		key, whose = "subscription_id", "subscription_id = ANY (ARRAY(SELECT id FROM subscriptions WHERE tenant_id = $4 AND id = ANY ($5)))"
	case p.SubscriptionID == "":
		whose = "subscription_id = ANY (ARRAY(SELECT id FROM subscriptions WHERE tenant_id = $4))"
	}
	return strings.NewReplacer("KEY", key, "WHOSE", whose).Replace(strings.Replace(tmpl, "KEPT", kept, 1))
}

// bucketCounts runs the counts query, handing each row to got: whose it
// is ("" unless each), its bucket's start, its counts and live attempts.
func (s *Store) bucketCounts(ctx context.Context, p store.DeliveryBucketsParams, each bool, args []any,
	got func(key string, start time.Time, c store.DeliveryBucket, live int64) error) error {
	var key string
	var start time.Time
	var c store.DeliveryBucket
	var live int64
	rows, _ := s.pool.Query(ctx, fillBucketSQL(bucketCountsSQL, p, each), args...)
	if _, err := pgx.ForEachRow(rows, []any{&key, &start, &c.Delivered, &c.Failed, &c.Skipped, &c.Pending, &c.Attempts, &live}, func() error {
		return got(key, start, c, live)
	}); err != nil {
		return fmt.Errorf("postgres: delivery buckets: %w", mapErr(err))
	}
	return nil
}

// index is where the bucket starting at start is in p's buckets.
func index(p store.DeliveryBucketsParams, n int, start time.Time) (int, error) {
	i := int(start.Sub(p.Since) / p.Width)
	if start.Before(p.Since) || i >= n {
		return 0, fmt.Errorf("postgres: delivery buckets: a bucket at %s, outside [%s, %s)", start, p.Since, p.Until)
	}
	return i, nil
}

func (s *Store) DeliveryBucketsEach(ctx context.Context, p store.DeliveryBucketsParams, ids []string) ([][]store.DeliveryBucket, error) {
	empty, err := p.Buckets()
	if err != nil {
		return nil, err
	}
	if p.TenantID == "" {
		return nil, fmt.Errorf("postgres: delivery buckets of each: no tenant")
	}
	out := make([][]store.DeliveryBucket, len(ids))
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		out[i], at[id] = slices.Clone(empty), i
	}
	args := []any{p.Since, p.Until, p.Width.Seconds(), p.TenantID, ids}
	return out, s.bucketCounts(ctx, p, true, args, func(key string, start time.Time, c store.DeliveryBucket, _ int64) error {
		i, ok := at[key]
		if !ok {
			return fmt.Errorf("postgres: delivery buckets of each: a row of %s, not asked for", key)
		}
		b, err := index(p, len(empty), start)
		if err != nil {
			return err
		}
		c.Start = out[i][b].Start
		out[i][b] = c
		return nil
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
	args := []any{p.Since, p.Until, p.Width.Seconds(), who}

	sample := []byte(strings.Repeat("0", len(out)))
	if err := s.bucketCounts(ctx, p, false, args, func(_ string, start time.Time, c store.DeliveryBucket, live int64) error {
		i, err := index(p, len(out), start)
		if err != nil {
			return err
		}
		c.Start = out[i].Start
		out[i] = c
		sample[i] = byte('0' + p.Sample(live))
		return nil
	}); err != nil {
		return nil, err
	}

	var start time.Time
	var n int64
	var ps []float64
	rows, _ := s.pool.Query(ctx, bucketSQL(bucketLatencySQL, p), append(args, string(sample))...)
	if _, err := pgx.ForEachRow(rows, []any{&start, &n, &ps}, func() error {
		i, err := index(p, len(out), start)
		if err != nil {
			return err
		}
		o := &out[i]
		o.Timed = n
		o.LatencyP50 = time.Duration(math.Round(ps[0]))
		o.LatencyP99 = time.Duration(math.Round(ps[1]))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("postgres: delivery latency: %w", mapErr(err))
	}
	return out, nil
}
