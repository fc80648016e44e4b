package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) DeliveryGet(ctx context.Context, tenantID, id string) (core.Delivery, []core.Attempt, error) {
	var d core.Delivery
	as := []core.Attempt{}
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		var roundStarted pgtype.Timestamptz
		d, err = scanDelivery(withExtra(tx.QueryRow(ctx, `SELECT `+deliveryColumns+`, round_started_at FROM deliveries
			WHERE id = $1 AND ($2 = '' OR tenant_id = $2)`, id, tenantID), &roundStarted))
		if err != nil {
			return err
		}
		d.RoundStartedAt = tm(roundStarted)
		rows, _ := tx.Query(ctx, `SELECT delivery_id, n, started_at, duration_ns, status_code, error, response,
			response_headers FROM attempts WHERE delivery_id = $1 ORDER BY n`, id)
		var a core.Attempt
		var started pgtype.Timestamptz
		var dur int64
		_, err = pgx.ForEachRow(rows, []any{&a.DeliveryID, &a.N, &started, &dur, &a.StatusCode, &a.Error, &a.Response,
			&a.ResponseHeaders}, func() error {
			a.StartedAt, a.Duration = tm(started), time.Duration(dur)
			as = append(as, a)
			return nil
		})
		return err
	})
	if err != nil {
		return core.Delivery{}, nil, mapErr(err)
	}
	return d, as, nil
}

// withExtra scans row's columns after those given into extra.
func withExtra(row pgx.Row, extra ...any) pgx.Row { return extraRow{row, extra} }

type extraRow struct {
	pgx.Row
	extra []any
}

func (e extraRow) Scan(dest ...any) error { return e.Row.Scan(append(dest, e.extra...)...) }

// deliveryListQuery builds DeliveryList's query; tests check its plan.
func deliveryListQuery(p store.DeliveryListParams, limit int, cursorAt time.Time) (string, []any) {
	// Walks deliveries_subscription_created backwards, by (created_at, id);
	// a cursor is the last row's ID, placed by its own created_at. Once
	// retention removed that row, the walk takes the IDs before it: IDs are
	// made after their creation time, so they are in the same order, and
	// none was created after the cursor's millisecond was over.
	q := `SELECT ` + deliveryColumns + ` FROM deliveries WHERE subscription_id = $1`
	args := []any{p.SubscriptionID}
	add := func(cond string, v any) {
		args = append(args, v)
		q += fmt.Sprintf(" AND "+cond, len(args))
	}
	if p.TenantID != "" {
		add("tenant_id = $%d", p.TenantID)
	}
	if p.State != "" {
		add("state = $%d", string(p.State))
	}
	if p.EventType != "" {
		add("event_type = $%d", p.EventType)
	}
	if !p.Since.IsZero() {
		add("created_at >= $%d", p.Since)
	}
	if !p.Until.IsZero() {
		add("created_at < $%d", p.Until)
	}
	switch {
	case p.Cursor != "" && !cursorAt.IsZero():
		args = append(args, cursorAt, p.Cursor)
		q += fmt.Sprintf(" AND (created_at, id) < ($%d, $%d)", len(args)-1, len(args))
	case p.Cursor != "":
		if t, ok := core.IDTime(p.Cursor); ok {
			add("created_at < $%d", t.Add(time.Millisecond))
		}
		add("id < $%d", p.Cursor)
	}
	args = append(args, limit+1)
	q += fmt.Sprintf(" ORDER BY created_at DESC, id DESC LIMIT $%d", len(args))
	return q, args
}

func (s *Store) DeliveryList(ctx context.Context, p store.DeliveryListParams) (store.Page[core.Delivery], error) {
	limit := store.PageLimit(p.Limit)
	var cursorAt time.Time
	if p.Cursor != "" {
		err := s.pool.QueryRow(ctx, `SELECT created_at FROM deliveries WHERE id = $1`, p.Cursor).Scan(&cursorAt)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return store.Page[core.Delivery]{}, mapErr(err)
		}
	}
	q, args := deliveryListQuery(p, limit, cursorAt)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return store.Page[core.Delivery]{}, mapErr(err)
	}
	ds, err := collectDeliveries(rows)
	if err != nil {
		return store.Page[core.Delivery]{}, mapErr(err)
	}
	return store.PageOf(ds, limit, func(x core.Delivery) string { return x.ID }), nil
}

func (s *Store) DeliveryReplay(ctx context.Context, tenantID, id string, now time.Time) (core.Delivery, error) {
	var d core.Delivery
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var state core.DeliveryState
		var host string
		var subState core.SubscriptionState
		var deleted pgtype.Timestamptz
		// Locked: of two replays at once, the second sees pending. NO KEY:
		// attempts referencing the row need not wait.
		err := tx.QueryRow(ctx, `SELECT d.state, s.host, s.state, s.deleted_at FROM deliveries d
			JOIN subscriptions s ON s.id = d.subscription_id
			WHERE d.id = $1 AND ($2 = '' OR d.tenant_id = $2) FOR NO KEY UPDATE OF d`, id, tenantID).Scan(&state, &host, &subState, &deleted)
		if err != nil {
			return err
		}
		if state == core.DeliveryPending || deleted.Valid {
			return store.ErrConflict
		}
		if subState == core.SubDisabled {
			return store.ErrDisabled
		}
		// Back in line under the subscription's current host, which may
		// have changed since the delivery was last sent.
		d, err = scanDelivery(tx.QueryRow(ctx, `UPDATE deliveries
			SET state = 'pending', round_start = attempt_count, round_started_at = $1, next_attempt_at = $1,
			updated_at = $1, host = $2, shard = $3
			WHERE id = $4 RETURNING `+deliveryColumns, now, host, core.ShardOf(host), id))
		if err != nil {
			return err
		}
		if err := writeAudit(ctx, tx, d.TenantID); err != nil {
			return err
		}
		return s.notify(ctx, tx, store.Due{SubscriptionID: d.SubscriptionID, Shard: d.Shard})
	})
	if err != nil {
		return core.Delivery{}, mapErr(err)
	}
	return d, nil
}

// jobColumns are a job's delivery and event, from deliveries d and events e.
const jobColumns = `d.id, d.event_id, d.subscription_id, d.tenant_id, d.event_type, d.host, d.shard,
	d.state, d.attempt_count, d.round_start, d.next_attempt_at, d.last_status, d.last_error, d.sequence,
	d.created_at, d.updated_at, d.ordering_key,
	e.id, e.tenant_id, e.type, e.payload, e.idempotency_key, e.ordering_key, e.created_at`

// sendingSub holds a refill's queries to a subscription that may send.
const sendingSub = `EXISTS (SELECT 1 FROM subscriptions WHERE id = $1 AND state = 'active' AND deleted_at IS NULL)`

// dueQuery is a refill's first look, in two parts of
// deliveries_subscription_due, each up to $4 rows by (next_attempt_at, id):
// the unordered rows (sequence 0), every one due; and the ordered rows
// among the first $5 due, each kept only if it heads its ordering key (a
// probe of deliveries_key_line per row: as NOT EXISTS, the planner may take
// it as an anti-join reading the whole line). An ordered backlog
// parks rows behind each key's head, and only $5 of them are walked:
// DeliveryDue takes the heads past them from keyHeadsQuery.
const dueQuery = `(SELECT ` + jobColumns + `
	FROM deliveries d JOIN events e ON e.id = d.event_id
	WHERE d.subscription_id = $1 AND (d.sequence > 0)::int = 0 AND d.state = 'pending' AND d.next_attempt_at <= $2
	AND d.id <> ALL($3::text[]) AND ` + sendingSub + `
	ORDER BY d.next_attempt_at, d.id LIMIT $4)
	UNION ALL
	(SELECT ` + jobColumns + `
	FROM (SELECT * FROM deliveries
		WHERE subscription_id = $1 AND (sequence > 0)::int = 1 AND state = 'pending' AND next_attempt_at <= $2
		ORDER BY next_attempt_at, id LIMIT $5) d
	JOIN events e ON e.id = d.event_id
	WHERE d.id <> ALL($3::text[]) AND ` + sendingSub + `
	AND d.sequence = (SELECT p.sequence FROM deliveries p
		WHERE p.subscription_id = d.subscription_id AND p.ordering_key = d.ordering_key
		AND p.state = 'pending' AND p.sequence > 0
		ORDER BY p.sequence LIMIT 1)
	ORDER BY d.next_attempt_at, d.id LIMIT $4)`

// nextDueQuery answers when the subscription's next pending row falls due
// after $2 (a probe into each part of deliveries_subscription_due), and
// how many of its ordered rows are due by $2, counted up to $3: when all $3
// are, dueQuery's walk of them stopped short.
const nextDueQuery = `SELECT
	CASE WHEN ` + sendingSub + ` THEN LEAST(
		(SELECT next_attempt_at FROM deliveries
			WHERE subscription_id = $1 AND (sequence > 0)::int = 0 AND state = 'pending' AND next_attempt_at > $2
			ORDER BY next_attempt_at LIMIT 1),
		(SELECT next_attempt_at FROM deliveries
			WHERE subscription_id = $1 AND (sequence > 0)::int = 1 AND state = 'pending' AND next_attempt_at > $2
			ORDER BY next_attempt_at LIMIT 1)) END,
	(SELECT count(*) FROM (SELECT 1 FROM deliveries
		WHERE subscription_id = $1 AND (sequence > 0)::int = 1 AND state = 'pending' AND next_attempt_at <= $2
		LIMIT $3) w)`

// keyHeadsQuery takes each ordering key's head, the pending row of least
// sequence, skipping from key to key through deliveries_key_line (one probe
// per key, whatever each key's backlog), and keeps the due ones.
const keyHeadsQuery = `WITH RECURSIVE k(key) AS (
		(SELECT ordering_key FROM deliveries
			WHERE subscription_id = $1 AND state = 'pending' AND sequence > 0
			ORDER BY ordering_key LIMIT 1)
		UNION ALL
		SELECT (SELECT d.ordering_key FROM deliveries d
			WHERE d.subscription_id = $1 AND d.state = 'pending' AND d.sequence > 0 AND d.ordering_key > k.key
			ORDER BY d.ordering_key LIMIT 1)
		FROM k WHERE k.key IS NOT NULL)
	SELECT ` + jobColumns + `
	FROM k
	CROSS JOIN LATERAL (SELECT * FROM deliveries h
		WHERE h.subscription_id = $1 AND h.ordering_key = k.key AND h.state = 'pending' AND h.sequence > 0
		ORDER BY h.sequence LIMIT 1) d
	JOIN events e ON e.id = d.event_id
	WHERE k.key IS NOT NULL AND d.next_attempt_at <= $2 AND d.id <> ALL($3::text[]) AND ` + sendingSub + `
	ORDER BY d.next_attempt_at, d.id LIMIT $4`

// DeliveryDue treats Limit <= 0 as 100. Exclude applies to the jobs only: the
// next-due time looks past Now, where in-flight work never is. The first
// look and the next-due time go in one round trip; the heads past a long
// walk (store.OrderedShort) in a second.
func (s *Store) DeliveryDue(ctx context.Context, p store.DeliveryDueParams) ([]core.Job, time.Time, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	excl, walk := orEmpty(p.Exclude), store.OrderedWalk(limit, len(p.Exclude))
	jobs, later, orderedDue, err := s.firstLook(ctx, p, excl, limit, walk)
	if err != nil {
		return nil, time.Time{}, err
	}
	if orderedDue >= walk && store.OrderedShort(jobs, limit) {
		heads, err := collectJobs(s.pool.Query(ctx, keyHeadsQuery, p.SubscriptionID, p.Now, excl, limit))
		if err != nil {
			return nil, time.Time{}, err
		}
		jobs = append(jobs, heads...)
	}
	return store.FirstDue(jobs, limit), tm(later), nil
}

// firstLook sends dueQuery and nextDueQuery in one round trip: the jobs,
// the next-due time, and how many ordered rows are due (up to walk).
func (s *Store) firstLook(ctx context.Context, p store.DeliveryDueParams, excl []string, limit, walk int) ([]core.Job, pgtype.Timestamptz, int, error) {
	b := &pgx.Batch{}
	b.Queue(dueQuery, p.SubscriptionID, p.Now, excl, limit, walk)
	b.Queue(nextDueQuery, p.SubscriptionID, p.Now, walk)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	var later pgtype.Timestamptz
	var orderedDue int
	jobs, err := collectJobs(br.Query())
	if err == nil {
		err = br.QueryRow().Scan(&later, &orderedDue)
	}
	return jobs, later, orderedDue, err
}

func collectJobs(rows pgx.Rows, err error) ([]core.Job, error) {
	if err != nil {
		return nil, err
	}
	jobs := []core.Job{}
	var j core.Job
	d, e := &j.Delivery, &j.Event
	var next, c, u, ec pgtype.Timestamptz
	_, err = pgx.ForEachRow(rows, []any{&d.ID, &d.EventID, &d.SubscriptionID, &d.TenantID, &d.EventType, &d.Host,
		&d.Shard, &d.State, &d.AttemptCount, &d.RoundStart, &next, &d.LastStatus, &d.LastError,
		&d.Sequence, &c, &u, &d.OrderingKey,
		&e.ID, &e.TenantID, &e.Type, &e.Payload, &e.IdempotencyKey, &e.OrderingKey, &ec}, func() error {
		d.NextAttemptAt, d.CreatedAt, d.UpdatedAt, e.CreatedAt = tm(next), tm(c), tm(u), tm(ec)
		jobs = append(jobs, j) // pgx gives every row a fresh payload slice
		return nil
	})
	return jobs, err
}

// allPendingQuery takes each active subscription's earliest pending row
// from deliveries_subscription_due: a probe into each of its two parts per
// subscription, whatever its backlog. NULL: none pending (filtered in Go,
// where a WHERE would run the probes twice).
const allPendingQuery = `SELECT s.id, s.host, s.ramp_at, s.ramp_base, CASE WHEN s.last_failure_status = 410 AND s.failing_since IS NOT NULL THEN s.last_failure_at END, LEAST(
		(SELECT d.next_attempt_at FROM deliveries d
			WHERE d.subscription_id = s.id AND (d.sequence > 0)::int = 0 AND d.state = 'pending'
			ORDER BY d.next_attempt_at LIMIT 1),
		(SELECT d.next_attempt_at FROM deliveries d
			WHERE d.subscription_id = s.id AND (d.sequence > 0)::int = 1 AND d.state = 'pending'
			ORDER BY d.next_attempt_at LIMIT 1))
	FROM subscriptions s
	WHERE s.state = 'active' AND s.deleted_at IS NULL`

// shardPendingQuery lists the (shard, subscription) pairs with pending work
// on the given shards by skipping through deliveries_shard_due: each step is
// one index probe that lands on the next subscription's earliest row, so
// the cost follows the number of pairs, not the backlog.
const shardPendingQuery = `WITH RECURSIVE pairs (shard, subscription_id, next) AS (
		SELECT f.shard, f.subscription_id, f.next_attempt_at
		FROM unnest($1::int[]) AS x(shard)
		CROSS JOIN LATERAL (SELECT d.shard, d.subscription_id, d.next_attempt_at FROM deliveries d
			WHERE d.state = 'pending' AND d.shard = x.shard
			ORDER BY d.subscription_id, d.next_attempt_at LIMIT 1) f
	UNION ALL
		SELECT f.shard, f.subscription_id, f.next_attempt_at
		FROM pairs p
		CROSS JOIN LATERAL (SELECT d.shard, d.subscription_id, d.next_attempt_at FROM deliveries d
			WHERE d.state = 'pending' AND d.shard = p.shard AND d.subscription_id > p.subscription_id
			ORDER BY d.subscription_id, d.next_attempt_at LIMIT 1) f
	)
	SELECT s.id, s.host, s.ramp_at, s.ramp_base, CASE WHEN s.last_failure_status = 410 AND s.failing_since IS NOT NULL THEN s.last_failure_at END, min(p.next)
	FROM pairs p JOIN subscriptions s ON s.id = p.subscription_id
	WHERE s.state = 'active' AND s.deleted_at IS NULL
	GROUP BY s.id`

func (s *Store) DeliveryPendingSubscriptions(ctx context.Context, shards []int) ([]store.SubscriptionDue, error) {
	var rows pgx.Rows
	if shards == nil {
		rows, _ = s.pool.Query(ctx, allPendingQuery)
	} else {
		rows, _ = s.pool.Query(ctx, shardPendingQuery, shards)
	}
	out := []store.SubscriptionDue{}
	var d store.SubscriptionDue
	var next, rampAt, goneAt pgtype.Timestamptz
	_, err := pgx.ForEachRow(rows, []any{&d.SubscriptionID, &d.Host, &rampAt, &d.RampBase, &goneAt, &next}, func() error {
		if !next.Valid {
			return nil // nothing pending
		}
		d.NextAttemptAt, d.RampAt, d.GoneAt = tm(next), time.Time{}, time.Time{}
		if rampAt.Valid {
			d.RampAt = tm(rampAt)
		}
		if goneAt.Valid {
			d.GoneAt = tm(goneAt)
		}
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) SubscriptionShedSet(ctx context.Context, id string, since time.Time) (time.Time, error) {
	var set any // NULL clears
	if !since.IsZero() {
		set = since
	}
	var was pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, `UPDATE subscriptions s
		SET shed_since = CASE WHEN $2::timestamptz IS NULL THEN NULL ELSE coalesce(old.shed_since, $2) END
		FROM (SELECT id, shed_since FROM subscriptions WHERE id = $1 FOR UPDATE) old
		WHERE s.id = old.id RETURNING old.shed_since`, id, set).Scan(&was)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil || !was.Valid {
		return time.Time{}, mapErr(err)
	}
	return tm(was), nil
}

func (s *Store) SubscriptionsShed(ctx context.Context) (map[string]time.Time, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id, shed_since FROM subscriptions WHERE shed_since IS NOT NULL AND deleted_at IS NULL`)
	out := map[string]time.Time{}
	var id string
	var since pgtype.Timestamptz
	_, err := pgx.ForEachRow(rows, []any{&id, &since}, func() error {
		out[id] = tm(since)
		return nil
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}

func (s *Store) SubscriptionRampSet(ctx context.Context, id string, at time.Time, base float64) error {
	_, err := s.pool.Exec(ctx, `UPDATE subscriptions SET ramp_at = $1, ramp_base = $2 WHERE id = $3`, at, base, id)
	return mapErr(err)
}

// DeliveryRehost locks the subscription row as SubscriptionUpdate does, so
// a host change running beside it is either seen whole or waits.
func (s *Store) DeliveryRehost(ctx context.Context, subscriptionID string) (int, error) {
	n := 0
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var host string
		err := tx.QueryRow(ctx, `SELECT host FROM subscriptions WHERE id = $1 AND deleted_at IS NULL
			FOR NO KEY UPDATE`, subscriptionID).Scan(&host)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		shard := core.ShardOf(host)
		tag, err := tx.Exec(ctx, `UPDATE deliveries SET host = $1, shard = $2
			WHERE subscription_id = $3 AND state = 'pending' AND host <> $1`, host, shard, subscriptionID)
		if err != nil {
			return err
		}
		if n = int(tag.RowsAffected()); n == 0 {
			return nil
		}
		return s.notify(ctx, tx, store.Due{SubscriptionID: subscriptionID, Shard: shard})
	})
	return n, mapErr(err)
}

// DeliveryExpire works in batches so one call never holds many row locks long.
func (s *Store) DeliveryExpire(ctx context.Context, subscriptionID string, cutoff, now time.Time, reason string) (int, error) {
	const step = 1000
	total := 0
	for {
		tag, err := s.pool.Exec(ctx, `UPDATE deliveries SET state = 'failed', last_error = $1, updated_at = $2
			WHERE id IN (SELECT id FROM deliveries
				WHERE subscription_id = $3 AND state = 'pending' AND round_started_at < $4 LIMIT $5)
			AND state = 'pending'`,
			reason, now, subscriptionID, cutoff, step)
		if err != nil {
			return total, mapErr(err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < step {
			return total, nil
		}
	}
}

// statsColumns are DeliveryStats' columns of subscription s: each count
// and oldest reads a partial pending or failed index.
const statsColumns = `s.id, s.failing_since,
	(SELECT count(*) FROM deliveries WHERE subscription_id = s.id AND state = 'pending'),
	(SELECT min(created_at) FROM deliveries WHERE subscription_id = s.id AND state = 'pending'),
	LEAST((SELECT min(next_attempt_at) FROM deliveries WHERE subscription_id = s.id AND (sequence > 0)::int = 0 AND state = 'pending'),
		(SELECT min(next_attempt_at) FROM deliveries WHERE subscription_id = s.id AND (sequence > 0)::int = 1 AND state = 'pending')),
	(SELECT count(*) FROM deliveries WHERE subscription_id = s.id AND state = 'failed'),
	(SELECT min(created_at) FROM deliveries WHERE subscription_id = s.id AND state = 'failed'),
	s.last_failure_at, s.last_failure_status, s.last_failure_error, s.last_failure_response`

func scanStats(row pgx.Row) (string, store.DeliveryStats, error) {
	var st store.DeliveryStats
	var id string
	var oldestPending, nextAttempt, oldestFailed, failingSince, lastFailure pgtype.Timestamptz
	err := row.Scan(&id, &failingSince, &st.Pending, &oldestPending, &nextAttempt, &st.Failed, &oldestFailed,
		&lastFailure, &st.LastFailure.Status, &st.LastFailure.Error, &st.LastFailure.Response)
	st.OldestPendingAt, st.NextAttemptAt, st.OldestFailedAt = tm(oldestPending), tm(nextAttempt), tm(oldestFailed)
	st.FailingSince, st.LastFailure.At = tm(failingSince), tm(lastFailure)
	return id, st, err
}

func (s *Store) DeliveryStats(ctx context.Context, tenantID, subscriptionID string) (store.DeliveryStats, error) {
	_, st, err := scanStats(s.pool.QueryRow(ctx, `SELECT `+statsColumns+`
		FROM subscriptions s WHERE s.id = $1 AND s.deleted_at IS NULL AND ($2 = '' OR s.tenant_id = $2)`,
		subscriptionID, tenantID))
	if err != nil {
		return store.DeliveryStats{}, mapErr(err)
	}
	return st, nil
}

func (s *Store) DeliveryStatsList(ctx context.Context, tenantID string, ids []string) (map[string]store.DeliveryStats, error) {
	out := make(map[string]store.DeliveryStats, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+statsColumns+`
		FROM subscriptions s WHERE s.id = ANY($1) AND s.deleted_at IS NULL AND ($2 = '' OR s.tenant_id = $2)`,
		ids, tenantID)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		id, st, err := scanStats(rows)
		if err != nil {
			return nil, mapErr(err)
		}
		out[id] = st
	}
	return out, mapErr(rows.Err())
}

// recordFailingSQL keeps each subscription's failing_since and
// last_failure_at from one batch's Outcome (see store.Outcomes); a healthy
// subscription's row is not written. Subscriptions come sorted by ID, so
// two writers lock them in one order.
const recordFailingSQL = `UPDATE subscriptions s SET
		failing_since = CASE
			WHEN v.ok_at IS NOT NULL THEN v.first_fail
			WHEN s.failing_since IS NULL OR s.last_failure_at < v.first_fail - interval '1 day' THEN v.first_fail
			ELSE s.failing_since END,
		last_failure_status = CASE WHEN v.last_fail > coalesce(s.last_failure_at, '-infinity') THEN v.status
			ELSE s.last_failure_status END,
		last_failure_error = CASE WHEN v.last_fail > coalesce(s.last_failure_at, '-infinity') THEN v.error
			ELSE s.last_failure_error END,
		last_failure_response = CASE WHEN v.last_fail > coalesce(s.last_failure_at, '-infinity') THEN v.response
			ELSE s.last_failure_response END,
		last_failure_at = CASE WHEN v.last_fail IS NULL THEN s.last_failure_at
			ELSE greatest(s.last_failure_at, v.last_fail) END
	FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[], $5::int[], $6::text[], $7::text[])
		AS v(id, ok_at, first_fail, last_fail, status, error, response)
	WHERE s.id = v.id AND (s.failing_since IS NOT NULL OR v.last_fail IS NOT NULL)`

const (
	// recordMovedSQL moves each delivery on from its attempt (if it is
	// still pending and its attempt_count is below N) and inserts the
	// attempts of those it moved, numbered N. An UPDATE ... FROM changes a
	// row at most once, so each delivery appears once per call.
	recordMovedSQL = `WITH r AS (
			SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::text[], $6::timestamptz[],
				$7::timestamptz[], $8::timestamptz[], $9::bigint[], $10::text[], $11::text[])
				AS r(id, n, status, error, state, next, now, started, dur, response, headers)),
		moved AS (
			UPDATE deliveries d SET attempt_count = r.n, last_status = r.status, last_error = r.error,
				state = r.state, next_attempt_at = r.next, updated_at = r.now
			FROM r WHERE d.id = r.id AND d.state = 'pending' AND d.attempt_count < r.n
			RETURNING d.id)
		INSERT INTO attempts (delivery_id, n, started_at, duration_ns, status_code, error, response, response_headers)
		SELECT r.id, r.n, r.started, r.dur, r.status, r.error, r.response, r.headers FROM r JOIN moved USING (id)
		ON CONFLICT (delivery_id, n) DO NOTHING`
	// recordOvertakenSQL runs after recordMovedSQL, when some result of the
	// call did not record its attempt, on every result of the call: those
	// whose attempt is not recorded yet (same start and duration) did not
	// move their delivery on. They were still sends, so
	// each is inserted under the delivery's next free number and counted in
	// attempt_count; the state is left alone, but for a delivery written
	// skipped while its attempt ran (its subscription disabled or deleted
	// meanwhile) whose attempt delivered ($8): its endpoint has it, so it
	// is delivered. The UPDATE's row lock orders
	// nodes doing this for one delivery at once (a lock waiter reads the new
	// attempt_count), and a delivery retention removed is skipped.
	recordOvertakenSQL = `WITH r AS (
			SELECT r.*, row_number() OVER (PARTITION BY r.id ORDER BY r.ord) AS k
			FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::int[], $5::text[], $6::text[], $7::text[], $8::bool[])
				WITH ORDINALITY AS r(id, started, dur, status, error, response, headers, delivered, ord)
			WHERE NOT EXISTS (SELECT 1 FROM attempts a
				WHERE a.delivery_id = r.id AND a.started_at = r.started AND a.duration_ns = r.dur)),
		c AS (SELECT id, count(*) AS k, bool_or(delivered) AS delivered,
				(array_agg(status ORDER BY ord DESC) FILTER (WHERE delivered))[1] AS status
			FROM r GROUP BY id),
		bumped AS (
			UPDATE deliveries d SET attempt_count = greatest(d.attempt_count,
				coalesce((SELECT max(a.n) FROM attempts a WHERE a.delivery_id = d.id), 0)) + c.k,
				last_status = CASE WHEN c.delivered AND d.state = 'skipped' THEN c.status ELSE d.last_status END,
				last_error = CASE WHEN c.delivered AND d.state = 'skipped' THEN '' ELSE d.last_error END,
				state = CASE WHEN c.delivered AND d.state = 'skipped' THEN 'delivered' ELSE d.state END
			FROM c WHERE d.id = c.id
			RETURNING d.id, d.attempt_count - c.k AS top)
		INSERT INTO attempts (delivery_id, n, started_at, duration_ns, status_code, error, response, response_headers)
		SELECT r.id, b.top + r.k, r.started, r.dur, r.status, r.error, r.response, r.headers FROM r JOIN bumped b USING (id)`
)

// DeliveryRecordResults sends one recordMovedSQL per occurrence of a
// delivery, in order, as if the results were applied one by one, in one
// round trip; then, only if some result did not record its attempt,
// recordOvertakenSQL for those.
func (s *Store) DeliveryRecordResults(ctx context.Context, rs []store.AttemptResult) error {
	if len(rs) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	var rounds [][]store.AttemptResult
	seen := map[string]int{}
	for _, r := range rs {
		k := seen[r.Attempt.DeliveryID]
		seen[r.Attempt.DeliveryID] = k + 1
		if k == len(rounds) {
			rounds = append(rounds, nil)
		}
		rounds[k] = append(rounds[k], r)
	}
	for _, round := range rounds {
		m := len(round)
		ids, states, errs, resps := make([]string, m), make([]string, m), make([]string, m), make([]string, m)
		headers := make([]string, m)
		ns, codes, durs := make([]int32, m), make([]int32, m), make([]int64, m)
		next, now, started := make([]pgtype.Timestamptz, m), make([]time.Time, m), make([]time.Time, m)
		for i, r := range round {
			a := r.Attempt
			ids[i], ns[i], codes[i], errs[i] = a.DeliveryID, int32(a.N), int32(a.StatusCode), a.Error
			states[i], next[i], now[i] = string(r.State), ts(r.NextAttemptAt), r.Now
			started[i], durs[i], resps[i], headers[i] = a.StartedAt, int64(a.Duration), a.Response, a.ResponseHeaders
		}
		b.Queue(recordMovedSQL, ids, ns, codes, errs, states, next, now, started, durs, resps, headers)
	}
	outs := store.Outcomes(rs)
	subIDs := make([]string, len(outs))
	okAt, firstFail, lastFail := make([]pgtype.Timestamptz, len(outs)), make([]pgtype.Timestamptz, len(outs)), make([]pgtype.Timestamptz, len(outs))
	failStatus, failErr, failResp := make([]int32, len(outs)), make([]string, len(outs)), make([]string, len(outs))
	for i, o := range outs {
		subIDs[i], okAt[i], firstFail[i], lastFail[i] = o.SubscriptionID, ts(o.LastSuccess), ts(o.FirstFailure), ts(o.LastFailure)
		failStatus[i], failErr[i], failResp[i] = int32(o.Last.Status), o.Last.Error, o.Last.Response
	}
	b.Queue(recordFailingSQL, subIDs, okAt, firstFail, lastFail, failStatus, failErr, failResp)
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		br := tx.SendBatch(ctx, b)
		var recorded int64
		for range rounds {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return err
			}
			recorded += tag.RowsAffected()
		}
		if _, err := br.Exec(); err != nil { // recordFailingSQL
			br.Close()
			return fmt.Errorf("noting whether subscriptions fail: %w", err)
		}
		if err := br.Close(); err != nil {
			return err
		}
		if recorded == int64(len(rs)) {
			return nil
		}
		n := len(rs)
		ids, errs, resps, headers := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		codes, durs, started := make([]int32, n), make([]int64, n), make([]time.Time, n)
		delivered := make([]bool, n)
		for i, r := range rs {
			a := r.Attempt
			ids[i], started[i], durs[i] = a.DeliveryID, a.StartedAt, int64(a.Duration)
			codes[i], errs[i], resps[i], headers[i] = int32(a.StatusCode), a.Error, a.Response, a.ResponseHeaders
			delivered[i] = r.State == core.DeliveryDelivered
		}
		_, err := tx.Exec(ctx, recordOvertakenSQL, ids, started, durs, codes, errs, resps, headers, delivered)
		return err
	}))
}

func (s *Store) DeliveryPendingCounts(ctx context.Context, min int) (map[string]int, error) {
	rows, _ := s.pool.Query(ctx, `SELECT subscription_id, count(*) FROM deliveries
		WHERE state = 'pending' GROUP BY subscription_id HAVING count(*) >= $1`, min)
	out := map[string]int{}
	var id string
	var n int
	_, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		out[id] = n
		return nil
	})
	if err != nil {
		return nil, mapErr(err)
	}
	return out, nil
}
