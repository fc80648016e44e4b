package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

const subColumns = `id, tenant_id, url, host, event_types, secret, prev_secret, prev_secret_expires_at,
	ordered, retry_schedule, timeout_ns, max_concurrency, rate_limit, retry_status_codes,
	state, disabled_reason, created_at, updated_at`

// subRow holds a subscription's columns in stored form.
type subRow struct {
	eventTypes, schedule, codes string
	ordered                     int
	prevExp, timeout, c, u      int64
}

func encodeSub(sub core.Subscription) (subRow, error) {
	r := subRow{ordered: b2i(sub.Ordered), prevExp: ns(sub.PrevSecretExpiresAt),
		timeout: int64(sub.Timeout), c: ns(sub.CreatedAt), u: ns(sub.UpdatedAt)}
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
	return r, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanSub(sc scanner) (core.Subscription, error) {
	var sub core.Subscription
	var r subRow
	if err := sc.Scan(&sub.ID, &sub.TenantID, &sub.URL, &sub.Host, &r.eventTypes, &sub.Secret,
		&sub.PrevSecret, &r.prevExp, &r.ordered, &r.schedule, &r.timeout, &sub.MaxConcurrency,
		&sub.RateLimit, &r.codes, &sub.State, &sub.DisabledReason, &r.c, &r.u); err != nil {
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
	r, err := encodeSub(sub)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO subscriptions (`+subColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sub.ID, sub.TenantID, sub.URL, sub.Host, r.eventTypes, sub.Secret, sub.PrevSecret, r.prevExp,
		r.ordered, r.schedule, r.timeout, sub.MaxConcurrency, sub.RateLimit, r.codes,
		string(sub.State), sub.DisabledReason, r.c, r.u)
	return mapErr(err)
}

func (s *Store) SubscriptionGet(ctx context.Context, tenantID, id string) (core.Subscription, error) {
	sub, err := scanSub(s.r.QueryRowContext(ctx, `SELECT `+subColumns+` FROM subscriptions
		WHERE id = ? AND (? = '' OR tenant_id = ?) AND deleted_at IS NULL`, id, tenantID, tenantID))
	if err != nil {
		return core.Subscription{}, mapErr(err)
	}
	return sub, nil
}

func (s *Store) SubscriptionList(ctx context.Context, p store.SubscriptionListParams) (store.Page[core.Subscription], error) {
	limit := store.PageLimit(p.Limit)
	// One row more than the page tells whether another page exists.
	rows, err := s.r.QueryContext(ctx, `SELECT `+subColumns+` FROM subscriptions
		WHERE (? = '' OR tenant_id = ?) AND id > ? AND deleted_at IS NULL
		ORDER BY id LIMIT ?`, p.TenantID, p.TenantID, p.Cursor, limit+1)
	if err != nil {
		return store.Page[core.Subscription]{}, err
	}
	subs, err := collectSubs(rows)
	if err != nil {
		return store.Page[core.Subscription]{}, err
	}
	return store.PageOf(subs, limit, func(x core.Subscription) string { return x.ID }), nil
}

func (s *Store) SubscriptionListAll(ctx context.Context) ([]core.Subscription, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+subColumns+` FROM subscriptions WHERE deleted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return collectSubs(rows)
}

func collectSubs(rows *sql.Rows) ([]core.Subscription, error) {
	defer rows.Close()
	subs := []core.Subscription{}
	for rows.Next() {
		sub, err := scanSub(rows)
		if err != nil {
			return nil, err
		}
		subs = append(subs, sub)
	}
	return subs, rows.Err()
}

func (s *Store) SubscriptionUpdate(ctx context.Context, sub core.Subscription) error {
	r, err := encodeSub(sub)
	if err != nil {
		return err
	}
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		var oldHost string
		err := tx.QueryRowContext(ctx, `SELECT host FROM subscriptions
			WHERE id = ? AND (? = '' OR tenant_id = ?) AND deleted_at IS NULL`,
			sub.ID, sub.TenantID, sub.TenantID).Scan(&oldHost)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE subscriptions SET url = ?, host = ?, event_types = ?,
			secret = ?, prev_secret = ?, prev_secret_expires_at = ?, ordered = ?, retry_schedule = ?,
			timeout_ns = ?, max_concurrency = ?, rate_limit = ?, retry_status_codes = ?, state = ?,
			disabled_reason = ?, updated_at = ?
			WHERE id = ? AND (? = '' OR tenant_id = ?) AND deleted_at IS NULL`,
			sub.URL, sub.Host, r.eventTypes, sub.Secret, sub.PrevSecret, r.prevExp, r.ordered, r.schedule,
			r.timeout, sub.MaxConcurrency, sub.RateLimit, r.codes, string(sub.State),
			sub.DisabledReason, r.u, sub.ID, sub.TenantID, sub.TenantID)
		if err := mustAffect(res, err); err != nil {
			return err
		}
		if sub.State == core.SubDisabled {
			return skipPending(ctx, tx, sub.ID, sub.UpdatedAt)
		}
		if sub.Host != oldHost {
			// Pending work follows the endpoint to its new host, so it is
			// admitted (and sharded) under the host it will really hit.
			_, err = tx.ExecContext(ctx, `UPDATE deliveries SET host = ?, shard = ?
				WHERE subscription_id = ? AND state = 'pending'`, sub.Host, core.ShardOf(sub.Host), sub.ID)
			return err
		}
		return nil
	}))
}

func (s *Store) SubscriptionDelete(ctx context.Context, tenantID, id string, now time.Time) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE subscriptions SET deleted_at = ?, updated_at = ?
			WHERE id = ? AND (? = '' OR tenant_id = ?) AND deleted_at IS NULL`,
			ns(now), ns(now), id, tenantID, tenantID)
		if err := mustAffect(res, err); err != nil {
			return err
		}
		return skipPending(ctx, tx, id, now)
	}))
}

// skipPending moves a subscription's pending deliveries to skipped: they will
// not be sent, but stay replayable.
func skipPending(ctx context.Context, tx *sql.Tx, subID string, now time.Time) error {
	_, err := tx.ExecContext(ctx, `UPDATE deliveries SET state = 'skipped', updated_at = ?
		WHERE subscription_id = ? AND state = 'pending'`, ns(now), subID)
	return err
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
