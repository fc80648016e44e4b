package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	zs "zombiezen.com/go/sqlite"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) DeliveryGet(ctx context.Context, tenantID, id string) (core.Delivery, []core.Attempt, error) {
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return core.Delivery{}, nil, err
	}
	defer tx.Rollback()
	var roundStarted int64
	d, err := scanDelivery(withExtra(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+`, round_started_at FROM deliveries
		WHERE id = ? AND (? = '' OR tenant_id = ?)`, id, tenantID, tenantID), &roundStarted))
	if err != nil {
		return core.Delivery{}, nil, mapErr(err)
	}
	d.RoundStartedAt = tm(roundStarted)
	rows, err := tx.QueryContext(ctx, `SELECT delivery_id, n, started_at, duration_ns, status_code, error, response,
		response_headers FROM attempts WHERE delivery_id = ? ORDER BY n`, id)
	if err != nil {
		return core.Delivery{}, nil, err
	}
	defer rows.Close()
	as := []core.Attempt{}
	for rows.Next() {
		var a core.Attempt
		var started, dur int64
		if err := rows.Scan(&a.DeliveryID, &a.N, &started, &dur, &a.StatusCode, &a.Error, &a.Response, &a.ResponseHeaders); err != nil {
			return core.Delivery{}, nil, err
		}
		a.StartedAt, a.Duration = tm(started), time.Duration(dur)
		as = append(as, a)
	}
	if err := rows.Err(); err != nil {
		return core.Delivery{}, nil, err
	}
	return d, as, nil
}

// withExtra scans sc's columns after those given into extra.
func withExtra(sc scanner, extra ...any) scanner { return extraScanner{sc, extra} }

type extraScanner struct {
	scanner
	extra []any
}

func (e extraScanner) Scan(dest ...any) error { return e.scanner.Scan(append(dest, e.extra...)...) }

// deliveryListQuery builds DeliveryList's query; tests check its plan.
// cursorAt is the cursor row's created_at, or 0 if that row is gone.
func deliveryListQuery(p store.DeliveryListParams, limit int, cursorAt int64) (string, []any) {
	// Walks deliveries_subscription_created backwards, by (created_at, id);
	// a cursor is the last row's ID, placed by its own created_at. Once
	// retention removed that row, the walk takes the IDs before it: IDs
	// are made after their creation time, so they are in the same order,
	// and none was created after the cursor's millisecond was over.
	q := `SELECT ` + deliveryColumns + ` FROM deliveries INDEXED BY deliveries_subscription_created WHERE subscription_id = ?`
	args := []any{p.SubscriptionID}
	if p.TenantID != "" {
		q += ` AND tenant_id = ?`
		args = append(args, p.TenantID)
	}
	if p.State != "" {
		q += ` AND state = ?`
		args = append(args, string(p.State))
	}
	if p.EventType != "" {
		q += ` AND event_type = ?`
		args = append(args, p.EventType)
	}
	if !p.Since.IsZero() {
		q += ` AND created_at >= ?`
		args = append(args, ns(p.Since))
	}
	if !p.Until.IsZero() {
		q += ` AND created_at < ?`
		args = append(args, ns(p.Until))
	}
	switch {
	case p.Cursor != "" && cursorAt != 0:
		q += ` AND (created_at, id) < (?, ?)`
		args = append(args, cursorAt, p.Cursor)
	case p.Cursor != "":
		if t, ok := core.IDTime(p.Cursor); ok {
			q += ` AND created_at < ?`
			args = append(args, ns(t.Add(time.Millisecond)))
		}
		q += ` AND id < ?`
		args = append(args, p.Cursor)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	return q, append(args, limit+1)
}

func (s *Store) DeliveryList(ctx context.Context, p store.DeliveryListParams) (store.Page[core.Delivery], error) {
	limit := store.PageLimit(p.Limit)
	var cursorAt int64
	if p.Cursor != "" {
		err := s.r.QueryRowContext(ctx, `SELECT created_at FROM deliveries WHERE id = ?`, p.Cursor).Scan(&cursorAt)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return store.Page[core.Delivery]{}, mapErr(err)
		}
	}
	q, args := deliveryListQuery(p, limit, cursorAt)
	rows, err := s.r.QueryContext(ctx, q, args...)
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
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var state core.DeliveryState
		var host string
		var subState core.SubscriptionState
		var deleted sql.NullInt64
		err := tx.QueryRowContext(ctx, `SELECT d.state, s.host, s.state, s.deleted_at FROM deliveries d
			JOIN subscriptions s ON s.id = d.subscription_id
			WHERE d.id = ? AND (? = '' OR d.tenant_id = ?)`, id, tenantID, tenantID).Scan(&state, &host, &subState, &deleted)
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
		d, err = scanDelivery(tx.QueryRowContext(ctx, `UPDATE deliveries
			SET state = 'pending', round_start = attempt_count, round_started_at = ?, next_attempt_at = ?,
			updated_at = ?, host = ?, shard = ?
			WHERE id = ? RETURNING `+deliveryColumns, ns(now), ns(now), ns(now), host, core.ShardOf(host), id))
		if err != nil {
			return err
		}
		return writeAudit(ctx, tx, d.TenantID)
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

// activeSub holds a refill's queries to a subscription that may send.
const activeSub = `EXISTS (SELECT 1 FROM subscriptions WHERE id = ?1 AND state = 'active' AND deleted_at IS NULL)`

// headOnly keeps an ordered row d only while no earlier row of its ordering
// key is pending: one seek of deliveries_key_line.
const headOnly = `NOT EXISTS (SELECT 1 FROM deliveries p INDEXED BY deliveries_key_line
	WHERE p.subscription_id = d.subscription_id AND p.ordering_key = d.ordering_key
	AND p.state = 'pending' AND p.sequence > 0 AND p.sequence < d.sequence)`

// dueQuery is a refill's first look, in two parts of
// deliveries_subscription_due, each up to ?4 rows by (next_attempt_at, id):
// the unordered rows (sequence 0), every one due; and the ordered rows
// among the first ?5 due, each kept only if it heads its ordering key. An
// ordered backlog parks rows behind each key's head, and only ?5 of them
// are walked: DeliveryDue takes the heads past them from keyHeadsQuery.
// Tests check the plan.
const dueQuery = `SELECT * FROM (SELECT ` + jobColumns + `
	FROM deliveries d INDEXED BY deliveries_subscription_due
	JOIN events e ON e.id = d.event_id
	WHERE d.subscription_id = ?1 AND (d.sequence > 0) = 0 AND d.state = 'pending' AND d.next_attempt_at <= ?2
	AND d.id NOT IN (SELECT value FROM json_each(?3)) AND ` + activeSub + `
	ORDER BY d.next_attempt_at, d.id LIMIT ?4)
	UNION ALL
	SELECT * FROM (SELECT ` + jobColumns + `
	FROM (SELECT * FROM deliveries INDEXED BY deliveries_subscription_due
		WHERE subscription_id = ?1 AND (sequence > 0) = 1 AND state = 'pending' AND next_attempt_at <= ?2
		ORDER BY next_attempt_at, id LIMIT ?5) d
	JOIN events e ON e.id = d.event_id
	WHERE d.id NOT IN (SELECT value FROM json_each(?3)) AND ` + activeSub + ` AND ` + headOnly + `
	ORDER BY d.next_attempt_at, d.id LIMIT ?4)`

// nextDueQuery answers when the subscription's next pending row falls due
// after ?2 (a seek into each part of deliveries_subscription_due), and
// whether it has ordered rows pending at all.
const nextDueQuery = `SELECT
	(SELECT min(n) FROM (
		SELECT * FROM (SELECT next_attempt_at AS n FROM deliveries INDEXED BY deliveries_subscription_due
			WHERE subscription_id = ?1 AND (sequence > 0) = 0 AND state = 'pending' AND next_attempt_at > ?2
			ORDER BY next_attempt_at LIMIT 1)
		UNION ALL
		SELECT * FROM (SELECT next_attempt_at FROM deliveries INDEXED BY deliveries_subscription_due
			WHERE subscription_id = ?1 AND (sequence > 0) = 1 AND state = 'pending' AND next_attempt_at > ?2
			ORDER BY next_attempt_at LIMIT 1))
	WHERE ` + activeSub + `),
	EXISTS (SELECT 1 FROM deliveries INDEXED BY deliveries_subscription_due
		WHERE subscription_id = ?1 AND (sequence > 0) = 1 AND state = 'pending')`

// orderedDueQuery counts the subscription's ordered rows due by ?2, up to
// ?3: when all ?3 are, dueQuery's walk of them stopped short.
const orderedDueQuery = `SELECT count(*) FROM (SELECT 1 FROM deliveries INDEXED BY deliveries_subscription_due
	WHERE subscription_id = ?1 AND (sequence > 0) = 1 AND state = 'pending' AND next_attempt_at <= ?2
	LIMIT ?3)`

// keyHeadsQuery takes each ordering key's head, the pending row of least
// sequence, skipping from key to key through deliveries_key_line (one seek
// per key, whatever each key's backlog), and keeps the due ones.
const keyHeadsQuery = `WITH RECURSIVE k(key) AS (
		SELECT (SELECT ordering_key FROM deliveries INDEXED BY deliveries_key_line
			WHERE subscription_id = ?1 AND state = 'pending' AND sequence > 0
			ORDER BY ordering_key LIMIT 1)
		UNION ALL
		SELECT (SELECT ordering_key FROM deliveries INDEXED BY deliveries_key_line
			WHERE subscription_id = ?1 AND state = 'pending' AND sequence > 0 AND ordering_key > k.key
			ORDER BY ordering_key LIMIT 1)
		FROM k WHERE k.key IS NOT NULL)
	SELECT ` + jobColumns + `
	FROM k
	JOIN deliveries d ON d.id = (SELECT id FROM deliveries INDEXED BY deliveries_key_line
		WHERE subscription_id = ?1 AND ordering_key = k.key AND state = 'pending' AND sequence > 0
		ORDER BY sequence LIMIT 1)
	JOIN events e ON e.id = d.event_id
	WHERE k.key IS NOT NULL AND d.next_attempt_at <= ?2
	AND d.id NOT IN (SELECT value FROM json_each(?3)) AND ` + activeSub + `
	ORDER BY d.next_attempt_at, d.id LIMIT ?4`

// DeliveryDue treats Limit <= 0 as 100. Exclude applies to the jobs only: the
// next-due time looks past Now, where in-flight work never is. The queries
// need not see one snapshot: the next-due time is when to look again, and
// what commits between them is handed over or woken for by its writer.
func (s *Store) DeliveryDue(ctx context.Context, p store.DeliveryDueParams) ([]core.Job, time.Time, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	// The exclusions travel as one JSON array parameter, so their number is
	// not limited by SQLite's bound-parameter cap.
	excl := p.Exclude
	if excl == nil {
		excl = []string{}
	}
	ex, err := json.Marshal(excl)
	if err != nil {
		return nil, time.Time{}, err
	}
	now, walk := ns(p.Now), store.OrderedWalk(limit, len(excl))
	jobs, err := collectJobs(s.stmts[dueQuery].QueryContext(ctx, p.SubscriptionID, now, string(ex), limit, walk))
	if err != nil {
		return nil, time.Time{}, err
	}
	var next sql.NullInt64
	var ordered bool
	if err := s.stmts[nextDueQuery].QueryRowContext(ctx, p.SubscriptionID, now).Scan(&next, &ordered); err != nil {
		return nil, time.Time{}, err
	}
	if ordered && store.OrderedShort(jobs, limit) {
		var due int
		if err := s.stmts[orderedDueQuery].QueryRowContext(ctx, p.SubscriptionID, now, walk).Scan(&due); err != nil {
			return nil, time.Time{}, err
		}
		if due >= walk {
			heads, err := collectJobs(s.stmts[keyHeadsQuery].QueryContext(ctx, p.SubscriptionID, now, string(ex), limit))
			if err != nil {
				return nil, time.Time{}, err
			}
			jobs = append(jobs, heads...)
		}
	}
	return store.FirstDue(jobs, limit), tm(next.Int64), nil
}

func collectJobs(rows *sql.Rows, err error) ([]core.Job, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	jobs := []core.Job{}
	for rows.Next() {
		var j core.Job
		d, e := &j.Delivery, &j.Event
		var next, c, u, ec int64
		if err := rows.Scan(&d.ID, &d.EventID, &d.SubscriptionID, &d.TenantID, &d.EventType, &d.Host,
			&d.Shard, &d.State, &d.AttemptCount, &d.RoundStart, &next, &d.LastStatus, &d.LastError,
			&d.Sequence, &c, &u, &d.OrderingKey,
			&e.ID, &e.TenantID, &e.Type, &e.Payload, &e.IdempotencyKey, &e.OrderingKey, &ec); err != nil {
			return nil, err
		}
		d.NextAttemptAt, d.CreatedAt, d.UpdatedAt, e.CreatedAt = tm(next), tm(c), tm(u), tm(ec)
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}

// pendingSubscriptionsQuery takes each active subscription's earliest
// pending row from deliveries_subscription_due: a seek into each of its two
// parts per subscription, whatever its backlog. Both NULL: none pending
// (filtered in Go, where a WHERE would run the seeks twice).
const pendingSubscriptionsQuery = `SELECT s.id, s.host, s.ramp_at, s.ramp_base,
	CASE WHEN s.last_failure_status = 410 AND s.failing_since > 0 THEN s.last_failure_at ELSE 0 END,
	(SELECT d.next_attempt_at FROM deliveries d INDEXED BY deliveries_subscription_due
		WHERE d.subscription_id = s.id AND (d.sequence > 0) = 0 AND d.state = 'pending'
		AND (?1 IS NULL OR d.shard IN (SELECT value FROM json_each(?1)))
		ORDER BY d.next_attempt_at LIMIT 1) AS unordered,
	(SELECT d.next_attempt_at FROM deliveries d INDEXED BY deliveries_subscription_due
		WHERE d.subscription_id = s.id AND (d.sequence > 0) = 1 AND d.state = 'pending'
		AND (?1 IS NULL OR d.shard IN (SELECT value FROM json_each(?1)))
		ORDER BY d.next_attempt_at LIMIT 1) AS ordered
	FROM subscriptions s
	WHERE s.state = 'active' AND s.deleted_at IS NULL`

// earliest is the lesser of two times of which either may be missing (0).
func earliest(a, b sql.NullInt64) int64 {
	if !a.Valid || (b.Valid && b.Int64 < a.Int64) {
		return b.Int64
	}
	return a.Int64
}

func (s *Store) DeliveryPendingSubscriptions(ctx context.Context, shards []int) ([]store.SubscriptionDue, error) {
	var filter any // NULL: every shard
	if shards != nil {
		b, err := json.Marshal(shards)
		if err != nil {
			return nil, err
		}
		filter = string(b)
	}
	rows, err := s.r.QueryContext(ctx, pendingSubscriptionsQuery, filter)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.SubscriptionDue{}
	for rows.Next() {
		var d store.SubscriptionDue
		var unordered, ordered sql.NullInt64
		var rampAt, goneAt int64
		if err := rows.Scan(&d.SubscriptionID, &d.Host, &rampAt, &d.RampBase, &goneAt, &unordered, &ordered); err != nil {
			return nil, err
		}
		if rampAt != 0 {
			d.RampAt = tm(rampAt)
		}
		if goneAt != 0 {
			d.GoneAt = tm(goneAt)
		}
		if !unordered.Valid && !ordered.Valid {
			continue // nothing pending
		}
		d.NextAttemptAt = tm(earliest(unordered, ordered))
		out = append(out, d)
	}
	return out, rows.Err()
}

func (s *Store) SubscriptionRampSet(ctx context.Context, id string, at time.Time, base float64) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE subscriptions SET ramp_at = ?, ramp_base = ? WHERE id = ?`, ns(at), base, id)
		return err
	}))
}

func (s *Store) SubscriptionShedSet(ctx context.Context, id string, since time.Time) (time.Time, error) {
	var was int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT shed_since FROM subscriptions WHERE id = ?`, id).Scan(&was)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil
		case err != nil:
			return err
		case (was == 0) == since.IsZero():
			return nil // kept already, or nothing to clear
		}
		_, err = tx.ExecContext(ctx, `UPDATE subscriptions SET shed_since = ? WHERE id = ?`, ns(since), id)
		return err
	})
	return tm(was), mapErr(err)
}

func (s *Store) SubscriptionsShed(ctx context.Context) (map[string]time.Time, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, shed_since FROM subscriptions WHERE shed_since <> 0 AND deleted_at IS NULL`)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	out := map[string]time.Time{}
	for rows.Next() {
		var id string
		var since int64
		if err := rows.Scan(&id, &since); err != nil {
			return nil, mapErr(err)
		}
		out[id] = tm(since)
	}
	return out, mapErr(rows.Err())
}

func (s *Store) DeliveryRehost(ctx context.Context, subscriptionID string) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var host string
		err := tx.QueryRowContext(ctx, `SELECT host FROM subscriptions WHERE id = ? AND deleted_at IS NULL`,
			subscriptionID).Scan(&host)
		if errors.Is(err, sql.ErrNoRows) {
			n = 0
			return nil
		}
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE deliveries SET host = ?, shard = ?
			WHERE subscription_id = ? AND state = 'pending' AND host <> ?`,
			host, core.ShardOf(host), subscriptionID, host)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), mapErr(err)
}

// DeliveryExpire works in batches so one call never holds the writer long.
func (s *Store) DeliveryExpire(ctx context.Context, subscriptionID string, cutoff, now time.Time, reason string) (int, error) {
	total := 0
	for {
		var n int64
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, `UPDATE deliveries SET state = 'failed', last_error = ?, updated_at = ?
				WHERE id IN (SELECT id FROM deliveries INDEXED BY deliveries_subscription_due
					WHERE subscription_id = ? AND state = 'pending' AND round_started_at < ? LIMIT 1000)`,
				reason, ns(now), subscriptionID, ns(cutoff))
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, mapErr(err)
		}
		total += int(n)
		if n < 1000 {
			return total, nil
		}
	}
}

// statsColumns are DeliveryStats' columns of subscription s: each count
// and oldest an index seek over the partial pending or failed index (the
// next attempt one into each part of deliveries_subscription_due).
const statsColumns = `s.id, s.failing_since,
	(SELECT count(*) FROM deliveries INDEXED BY deliveries_subscription_due WHERE subscription_id = s.id AND state = 'pending'),
	(SELECT min(created_at) FROM deliveries INDEXED BY deliveries_subscription_due WHERE subscription_id = s.id AND state = 'pending'),
	(SELECT min(next_attempt_at) FROM deliveries INDEXED BY deliveries_subscription_due WHERE subscription_id = s.id AND (sequence > 0) = 0 AND state = 'pending'),
	(SELECT min(next_attempt_at) FROM deliveries INDEXED BY deliveries_subscription_due WHERE subscription_id = s.id AND (sequence > 0) = 1 AND state = 'pending'),
	(SELECT count(*) FROM deliveries INDEXED BY deliveries_subscription_failed WHERE subscription_id = s.id AND state = 'failed'),
	(SELECT min(created_at) FROM deliveries INDEXED BY deliveries_subscription_failed WHERE subscription_id = s.id AND state = 'failed'),
	s.last_failure_at, s.last_failure_status, s.last_failure_error, s.last_failure_response`

func scanStats(sc scanner) (string, store.DeliveryStats, error) {
	var st store.DeliveryStats
	var id string
	var oldestPending, nextUnordered, nextOrdered, oldestFailed sql.NullInt64
	var failingSince, lastFailure int64
	err := sc.Scan(&id, &failingSince, &st.Pending, &oldestPending, &nextUnordered, &nextOrdered, &st.Failed, &oldestFailed,
		&lastFailure, &st.LastFailure.Status, &st.LastFailure.Error, &st.LastFailure.Response)
	st.OldestPendingAt, st.NextAttemptAt, st.OldestFailedAt = tm(oldestPending.Int64), tm(earliest(nextUnordered, nextOrdered)), tm(oldestFailed.Int64)
	st.FailingSince, st.LastFailure.At = tm(failingSince), tm(lastFailure)
	return id, st, err
}

func (s *Store) DeliveryStats(ctx context.Context, tenantID, subscriptionID string) (store.DeliveryStats, error) {
	_, st, err := scanStats(s.r.QueryRowContext(ctx, `SELECT `+statsColumns+`
		FROM subscriptions s WHERE s.id = ? AND s.deleted_at IS NULL AND (? = '' OR s.tenant_id = ?)`,
		subscriptionID, tenantID, tenantID))
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
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+statsColumns+`
		FROM subscriptions s WHERE s.id IN (SELECT value FROM json_each(?)) AND s.deleted_at IS NULL
		AND (? = '' OR s.tenant_id = ?)`, string(list), tenantID, tenantID)
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

// insertAttempts inserts the attempts of results that move their delivery
// on, numbered N: its condition is updateResults's, and it runs just before
// it in the same transaction. (A delivery retention removed while its
// attempt ran fails it too, so the foreign key never fails the batch.)
var insertAttempts = newMultiRow(
	`INSERT INTO attempts (delivery_id, n, started_at, duration_ns, status_code, error, response, response_headers)
		SELECT * FROM (VALUES`,
	`(?, ?, ?, ?, ?, ?, ?, ?)`,
	`) AS v WHERE EXISTS (SELECT 1 FROM deliveries d WHERE d.id = v.column1
			AND d.state = 'pending' AND d.attempt_count < v.column2)
		ON CONFLICT (delivery_id, n) DO NOTHING`,
	8)

// updateResults moves each delivery on from its attempt. A delivery
// updated twice by one statement would take an arbitrary one of its rows,
// so DeliveryRecordResults never puts a delivery twice in one statement.
var updateResults = newMultiRow(
	`UPDATE deliveries SET attempt_count = v.column1, last_status = v.column2, last_error = v.column3,
		state = v.column4, next_attempt_at = v.column5, updated_at = v.column6 FROM (VALUES`,
	`(?, ?, ?, ?, ?, ?, ?)`,
	`) AS v WHERE deliveries.id = v.column7 AND deliveries.state = 'pending'
		AND deliveries.attempt_count < v.column1`,
	7)

func (s *Store) DeliveryRecordResults(ctx context.Context, rs []store.AttemptResult) error {
	if len(rs) == 0 {
		return nil
	}
	return mapErr(s.rides.wait(ctx, s, rs))
}

// recordResults writes one batch of results in c's transaction: each
// result that moves its delivery on, its attempt numbered N; then, if some
// did not (another node recorded the delivery meanwhile, or the call is a
// retry whose first commit did land), each of those through
// recordOvertaken.
func recordResults(c *zs.Conn, rs []store.AttemptResult) error {
	ins := make([]any, 0, len(rs)*insertAttempts.cols)
	upd := make([]any, 0, len(rs)*updateResults.cols)
	var moved int64
	write := func() error {
		n, err := execRows(c, insertAttempts, ins)
		if err != nil {
			return err
		}
		moved += n
		if _, err := execRows(c, updateResults, upd); err != nil {
			return err
		}
		ins, upd = ins[:0], upd[:0]
		return nil
	}
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		a := r.Attempt
		if seen[a.DeliveryID] {
			if err := write(); err != nil {
				return err
			}
			seen = map[string]bool{}
		}
		seen[a.DeliveryID] = true
		ins = append(ins, a.DeliveryID, a.N, ns(a.StartedAt), int64(a.Duration), a.StatusCode, a.Error, a.Response, a.ResponseHeaders)
		upd = append(upd, a.N, a.StatusCode, a.Error, string(r.State), ns(r.NextAttemptAt), ns(r.Now), a.DeliveryID)
	}
	if err := write(); err != nil {
		return err
	}
	if moved < int64(len(rs)) {
		// recordOvertaken passes over the attempts just written (already recorded).
		for _, r := range rs {
			if err := recordOvertaken(c, r.Attempt, r.State == core.DeliveryDelivered); err != nil {
				return err
			}
		}
	}
	return recordFailing(c, rs)
}

// failingSQL keeps a subscription's failing_since and last failure (its
// time, status, error and answer, from the batch's latest failed attempt
// when it is newer) from one batch's Outcome; a healthy subscription's row
// is not written.
const failingSQL = `UPDATE subscriptions SET
	failing_since = CASE
		WHEN ?1 > 0 THEN ?2
		WHEN failing_since = 0 OR last_failure_at < ?2 - 86400000000000 THEN ?2
		ELSE failing_since END,
	last_failure_status = CASE WHEN ?3 > last_failure_at THEN ?5 ELSE last_failure_status END,
	last_failure_error = CASE WHEN ?3 > last_failure_at THEN ?6 ELSE last_failure_error END,
	last_failure_response = CASE WHEN ?3 > last_failure_at THEN ?7 ELSE last_failure_response END,
	last_failure_at = max(last_failure_at, ?3)
	WHERE id = ?4 AND (failing_since > 0 OR ?3 > 0)`

// recordFailing applies the batch's outcomes to their subscriptions.
func recordFailing(c *zs.Conn, rs []store.AttemptResult) error {
	for _, o := range store.Outcomes(rs) {
		if _, err := execDirect(c, failingSQL, ns(o.LastSuccess), ns(o.FirstFailure), ns(o.LastFailure), o.SubscriptionID,
			o.Last.Status, o.Last.Error, o.Last.Response); err != nil {
			return fmt.Errorf("noting whether a subscription fails: %w", err)
		}
	}
	return nil
}

// recordOvertaken records the attempt of a result that did not move its
// delivery on: it was still a send (e.g. by a node whose lease lapsed while
// it ran, after the new owner had recorded the delivery), so it is kept
// under the next free number and counted in attempt_count, and the
// delivery's state is left alone, but for one: a delivery written skipped
// while its attempt ran (its subscription disabled or deleted meanwhile)
// whose attempt delivered is delivered, since its endpoint has it (stats
// and a replay of skipped ones would count or send it again). An attempt
// already recorded (same start and duration: a retried call whose first
// commit landed) is not written twice; a delivery retention removed
// meanwhile is skipped.
func recordOvertaken(c *zs.Conn, a core.Attempt, delivered bool) error {
	var n int
	found, err := queryRowDirect(c, overtakenSQL, []any{a.DeliveryID, ns(a.StartedAt), int64(a.Duration), delivered, a.StatusCode},
		func(st *zs.Stmt) { n = st.ColumnInt(0) })
	if err == nil && found {
		_, err = execDirect(c, insertAttemptSQL, a.DeliveryID, n, ns(a.StartedAt), int64(a.Duration), a.StatusCode,
			a.Error, a.Response, a.ResponseHeaders)
	}
	if err != nil {
		return fmt.Errorf("recording an overtaken attempt of %s: %w", a.DeliveryID, err)
	}
	return nil
}

const (
	// overtakenSQL counts an overtaken attempt in its delivery and returns
	// the number it gets; no row if it was recorded already.
	overtakenSQL = `UPDATE deliveries SET attempt_count = max(attempt_count,
			coalesce((SELECT max(n) FROM attempts WHERE delivery_id = ?1), 0)) + 1,
			last_status = CASE WHEN ?4 AND state = 'skipped' THEN ?5 ELSE last_status END,
			last_error = CASE WHEN ?4 AND state = 'skipped' THEN '' ELSE last_error END,
			state = CASE WHEN ?4 AND state = 'skipped' THEN 'delivered' ELSE state END
		WHERE id = ?1 AND NOT EXISTS (SELECT 1 FROM attempts
			WHERE delivery_id = ?1 AND started_at = ?2 AND duration_ns = ?3)
		RETURNING attempt_count`
	insertAttemptSQL = `INSERT INTO attempts (delivery_id, n, started_at, duration_ns, status_code, error, response,
		response_headers) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
)

func (s *Store) DeliveryPendingCounts(ctx context.Context, min int) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT subscription_id, count(*) FROM deliveries INDEXED BY deliveries_subscription_due
		WHERE state = 'pending' GROUP BY subscription_id HAVING count(*) >= ?`, min)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}
