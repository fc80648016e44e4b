package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

const subColumns = `id, tenant_id, url, host, event_types, secret, prev_secret, prev_secret_expires_at,
	ordered, retry_schedule, timeout_ns, max_concurrency, rate_limit, retry_status_codes,
	state, disabled_reason, created_at, updated_at, headers, uid, svix`

// subRow holds a subscription's columns in stored form.
type subRow struct {
	eventTypes, schedule, codes string
	ordered                     int
	prevExp, timeout, c, u      int64
	sealed                      store.Sealed
	svix                        string
}

func (s *Store) encodeSub(sub core.Subscription) (subRow, error) {
	r := subRow{ordered: b2i(sub.Ordered), prevExp: ns(sub.PrevSecretExpiresAt),
		timeout: int64(sub.Timeout), c: ns(sub.CreatedAt), u: ns(sub.UpdatedAt)}
	var err error
	if r.sealed, err = store.SealSubscription(s.keys, sub); err != nil {
		return r, err
	}
	et, err := json.Marshal(sub.EventTypes)
	if err != nil {
		return r, err
	}
	// Durations as Go strings ("5s") so the column reads well; nil stays
	// null because a nil schedule means the default and an empty one none.
	var sched []string
	if sub.RetrySchedule != nil {
		sched = core.FormatDurations(sub.RetrySchedule)
	}
	sc, err := json.Marshal(sched)
	if err != nil {
		return r, err
	}
	codes, err := json.Marshal(sub.RetryStatusCodes)
	if err != nil {
		return r, err
	}
	r.eventTypes, r.schedule, r.codes = string(et), string(sc), string(codes)
	r.svix = store.EncodeSvix(sub)
	return r, nil
}

type scanner interface{ Scan(dest ...any) error }

func (s *Store) scanSub(sc scanner) (core.Subscription, error) {
	var sub core.Subscription
	var r subRow
	if err := sc.Scan(&sub.ID, &sub.TenantID, &sub.URL, &sub.Host, &r.eventTypes, &r.sealed.Secret,
		&r.sealed.PrevSecret, &r.prevExp, &r.ordered, &r.schedule, &r.timeout, &sub.MaxConcurrency,
		&sub.RateLimit, &r.codes, &sub.State, &sub.DisabledReason, &r.c, &r.u, &r.sealed.Headers, &sub.UID, &r.svix); err != nil {
		return sub, err
	}
	if err := store.DecodeSvix(r.svix, &sub); err != nil {
		return sub, err
	}
	if err := store.OpenSubscription(s.keys, &sub, r.sealed); err != nil {
		return sub, err
	}
	sub.PrevSecretExpiresAt = tm(r.prevExp)
	sub.Ordered = r.ordered != 0
	sub.Timeout = time.Duration(r.timeout)
	sub.CreatedAt, sub.UpdatedAt = tm(r.c), tm(r.u)
	if err := json.Unmarshal([]byte(r.eventTypes), &sub.EventTypes); err != nil {
		return sub, fmt.Errorf("subscription %s event_types: %w", sub.ID, err)
	}
	var sched []string
	if err := json.Unmarshal([]byte(r.schedule), &sched); err != nil {
		return sub, fmt.Errorf("subscription %s retry_schedule: %w", sub.ID, err)
	}
	if sched != nil {
		sub.RetrySchedule = make([]time.Duration, len(sched))
		for i, v := range sched {
			d, err := time.ParseDuration(v)
			if err != nil {
				return sub, fmt.Errorf("subscription %s retry_schedule: %w", sub.ID, err)
			}
			sub.RetrySchedule[i] = d
		}
	}
	if err := json.Unmarshal([]byte(r.codes), &sub.RetryStatusCodes); err != nil {
		return sub, fmt.Errorf("subscription %s retry_status_codes: %w", sub.ID, err)
	}
	return sub, nil
}

func (s *Store) SubscriptionCreate(ctx context.Context, sub core.Subscription) error {
	return s.SubscriptionCreateWithin(ctx, sub, 0)
}

func (s *Store) SubscriptionCreateWithin(ctx context.Context, sub core.Subscription, max int) error {
	r, err := s.encodeSub(sub)
	if err != nil {
		return err
	}
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		// The one writer connection takes every write in turn: the count
		// holds until the commit.
		if max > 0 {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM subscriptions INDEXED BY subscriptions_tenant
				WHERE tenant_id = ? AND deleted_at IS NULL`, sub.TenantID).Scan(&n); err != nil {
				return err
			}
			if n >= max {
				return store.ErrLimit
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO subscriptions (`+subColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			sub.ID, sub.TenantID, sub.URL, sub.Host, r.eventTypes, r.sealed.Secret, r.sealed.PrevSecret, r.prevExp,
			r.ordered, r.schedule, r.timeout, sub.MaxConcurrency, sub.RateLimit, r.codes,
			string(sub.State), sub.DisabledReason, r.c, r.u, r.sealed.Headers, sub.UID, r.svix)
		if err != nil {
			return err
		}
		return writeAudit(ctx, tx, sub.TenantID)
	}))
}

func (s *Store) SubscriptionGet(ctx context.Context, tenantID, id string) (core.Subscription, error) {
	sub, err := s.scanSub(s.r.QueryRowContext(ctx, `SELECT `+subColumns+` FROM subscriptions
		WHERE id = ? AND (? = '' OR tenant_id = ?) AND deleted_at IS NULL`, id, tenantID, tenantID))
	if err != nil {
		return core.Subscription{}, mapErr(err)
	}
	return sub, nil
}

func (s *Store) SubscriptionList(ctx context.Context, p store.SubscriptionListParams) (store.Page[core.Subscription], error) {
	limit := store.PageLimit(p.Limit)
	// One row more than the page tells whether another page exists.
	rows, err := s.r.QueryContext(ctx, subscriptionListQuery(p.Failing), p.TenantID, p.TenantID, p.Cursor, limit+1)
	if err != nil {
		return store.Page[core.Subscription]{}, mapErr(err)
	}
	subs, err := s.collectSubs(rows)
	if err != nil {
		return store.Page[core.Subscription]{}, mapErr(err)
	}
	return store.PageOf(subs, limit, func(x core.Subscription) string { return x.ID }), nil
}

// subscriptionListQuery pages subscriptions; the failing ones come from
// subscriptions_failing (the query names its condition, so it is used).
func subscriptionListQuery(failing bool) string {
	q := `SELECT ` + subColumns + ` FROM subscriptions
		WHERE (? = '' OR tenant_id = ?) AND id > ? AND deleted_at IS NULL`
	if failing {
		q += ` AND failing_since > 0`
	}
	return q + ` ORDER BY id LIMIT ?`
}

func (s *Store) SubscriptionListAll(ctx context.Context) ([]core.Subscription, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+subColumns+` FROM subscriptions WHERE deleted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return s.collectSubs(rows)
}

func (s *Store) collectSubs(rows *sql.Rows) ([]core.Subscription, error) {
	defer rows.Close()
	subs := []core.Subscription{}
	for rows.Next() {
		sub, err := s.scanSub(rows)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
	}
	return subs, rows.Err()
}

func (s *Store) SubscriptionUpdate(ctx context.Context, sub core.Subscription) error {
	return s.updateSub(ctx, sub, nil)
}

func (s *Store) SubscriptionDisable(ctx context.Context, sub core.Subscription, notice []byte) error {
	if sub.State != core.SubDisabled || notice == nil {
		return fmt.Errorf("subscription %s: a disable with its notice, not %s", sub.ID, sub.State)
	}
	return s.updateSub(ctx, sub, notice)
}

// updateSub is SubscriptionUpdate, recording notice (nil: none) with it.
func (s *Store) updateSub(ctx context.Context, sub core.Subscription, notice []byte) error {
	r, err := s.encodeSub(sub)
	if err != nil {
		return err
	}
	var oldHost, tenant string
	err = mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		var oldState core.SubscriptionState
		err := tx.QueryRowContext(ctx, `SELECT host, tenant_id, state FROM subscriptions
			WHERE id = ? AND (? = '' OR tenant_id = ?) AND deleted_at IS NULL`,
			sub.ID, sub.TenantID, sub.TenantID).Scan(&oldHost, &tenant, &oldState)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE subscriptions SET url = ?, host = ?, event_types = ?,
			secret = ?, prev_secret = ?, prev_secret_expires_at = ?, ordered = ?, retry_schedule = ?,
			timeout_ns = ?, max_concurrency = ?, rate_limit = ?, retry_status_codes = ?, state = ?,
			disabled_reason = ?, updated_at = ?, headers = ?, uid = ?, svix = ?
			WHERE id = ? AND (? = '' OR tenant_id = ?) AND deleted_at IS NULL`,
			sub.URL, sub.Host, r.eventTypes, r.sealed.Secret, r.sealed.PrevSecret, r.prevExp, r.ordered, r.schedule,
			r.timeout, sub.MaxConcurrency, sub.RateLimit, r.codes, string(sub.State),
			sub.DisabledReason, r.u, r.sealed.Headers, sub.UID, r.svix, sub.ID, sub.TenantID, sub.TenantID)
		if err := mustAffect(res, err); err != nil {
			return err
		}
		if sub.State == core.SubActive && oldState != core.SubActive {
			if err := restartFailing(ctx, tx, sub.ID); err != nil {
				return err
			}
		}
		if notice != nil {
			if err := oweDisabled(ctx, tx, sub.ID, notice); err != nil {
				return err
			}
		}
		return writeAudit(ctx, tx, tenant)
	}))
	switch {
	case err != nil:
		return err
	case sub.State == core.SubDisabled:
		s.followUp(ctx, sub.ID, sub.UpdatedAt, skipPending)
	case sub.Host != oldHost:
		s.followUp(ctx, sub.ID, sub.UpdatedAt, movePending)
	}
	return nil
}

func (s *Store) SubscriptionTested(ctx context.Context, sub core.Subscription) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error { return writeAudit(ctx, tx, sub.TenantID) }))
}

func (s *Store) SubscriptionDelete(ctx context.Context, tenantID, id string, now time.Time) error {
	err := mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		var tenant string
		err := tx.QueryRowContext(ctx, `UPDATE subscriptions SET deleted_at = ?, updated_at = ?
			WHERE id = ? AND (? = '' OR tenant_id = ?) AND deleted_at IS NULL RETURNING tenant_id`,
			ns(now), ns(now), id, tenantID, tenantID).Scan(&tenant)
		if err != nil {
			return err
		}
		return writeAudit(ctx, tx, tenant)
	}))
	if err != nil {
		return err
	}
	s.followUp(ctx, id, now, skipPending)
	return nil
}

// followBatch is how many pending deliveries one follow-up transaction
// changes. One statement over a backlog of a million held the only writer
// for seconds (ingest for everyone waited) and its statement journal in
// memory (+130 MB for 200,000 rows).
const followBatch = 1000

type followWork int

const (
	skipPending followWork = iota // a disabled or deleted subscription's are skipped
	movePending                   // a live one's move to its current host
)

// A move walks a subscription's deliveries a batch at a time by
// (created_at, id), which never change, and moves the pending ones of each.
const (
	moveBatchSQL = `SELECT created_at, id FROM deliveries INDEXED BY deliveries_subscription_created
		WHERE subscription_id = ?1 AND (created_at, id) > (?2, ?3) ORDER BY created_at, id LIMIT ?4`
	moveSQL = `UPDATE deliveries INDEXED BY deliveries_subscription_created SET host = ?1, shard = ?2
		WHERE subscription_id = ?3 AND (created_at, id) > (?4, ?5) AND (created_at, id) <= (?6, ?7)
		AND state = 'pending' AND host <> ?1`
)

// followUp brings a subscription's pending deliveries in line with its row
// once that has committed, in transactions of followBatch: skipped (not
// sent, still replayable) once it is disabled or deleted, or moved to its
// current host, so they are admitted and sharded under the host they will
// hit. Each batch re-reads the row and stops once the row no longer calls
// for the work, so a change made meanwhile wins. The row change is what
// the caller asked for and it has committed: neither the caller going away
// nor a failed batch undoes it. What is left pending is never sent
// (dispatch sends only active subscriptions' work), and Open finishes it.
func (s *Store) followUp(ctx context.Context, subID string, now time.Time, work followWork) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	var after struct { // where a move's walk is
		created int64
		id      string
	}
	for {
		var n int64
		next := after // after, once the batch is committed (fn may run twice)
		err := s.writeTx(ctx, func(tx *sql.Tx) error {
			var host, state string
			var deleted bool
			err := tx.QueryRowContext(ctx, `SELECT host, state, deleted_at IS NOT NULL FROM subscriptions WHERE id = ?`,
				subID).Scan(&host, &state, &deleted)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			gone := deleted || state == string(core.SubDisabled)
			if gone != (work == skipPending) {
				return nil // n stays 0: the row changed again, and its own call follows up
			}
			var res sql.Result
			if gone {
				res, err = tx.ExecContext(ctx, `UPDATE deliveries SET state = 'skipped', updated_at = ?
					WHERE id IN (SELECT id FROM deliveries INDEXED BY deliveries_subscription_due
						WHERE subscription_id = ? AND state = 'pending' LIMIT ?)`,
					ns(now), subID, followBatch)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			}
			// The batch is the next followBatch deliveries, moved or not, so
			// the walk ends however many there are.
			rows, err := tx.QueryContext(ctx, moveBatchSQL,
				subID, after.created, after.id, followBatch)
			if err != nil {
				return err
			}
			defer rows.Close()
			for n = 0; rows.Next(); n++ {
				if err := rows.Scan(&next.created, &next.id); err != nil {
					return err
				}
			}
			if err := rows.Err(); err != nil || n == 0 {
				return err
			}
			_, err = tx.ExecContext(ctx, moveSQL,
				host, core.ShardOf(host), subID, after.created, after.id, next.created, next.id)
			return err
		})
		if err != nil || n < followBatch {
			return
		}
		after = next
	}
}

// finishFollowUps skips what a crash left pending of disabled or deleted
// subscriptions (followUp commits in batches). A move of host cut short
// needs nothing here: with one node owning every shard, a pending
// delivery's host column is not read.
func (s *Store) finishFollowUps(ctx context.Context) error {
	rows, err := s.r.QueryContext(ctx, `SELECT s.id FROM subscriptions s
		WHERE (s.state = 'disabled' OR s.deleted_at IS NOT NULL)
		AND EXISTS (SELECT 1 FROM deliveries d INDEXED BY deliveries_subscription_due
			WHERE d.subscription_id = s.id AND d.state = 'pending')`)
	if err != nil {
		return err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		s.followUp(ctx, id, time.Now().UTC(), skipPending)
	}
	return nil
}

// mustAffect turns "no row matched" into ErrNotFound.
func mustAffect(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotFound
	}
	return nil
}
