package sqlite

import (
	"context"
	"database/sql"
	"time"

	"hookd/internal/store"
)

func (s *Store) SubscriptionsFailing(ctx context.Context, before, lastAfter time.Time) ([]store.FailingSubscription, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, tenant_id, url, host, failing_since, last_failure_at FROM subscriptions
		WHERE failing_since > 0 AND failing_since <= ? AND last_failure_at >= ? AND state = 'active' AND deleted_at IS NULL
		ORDER BY id`, ns(before), ns(lastAfter))
	if err != nil {
		return nil, mapErr(err)
	}
	return collectFailing(rows)
}

func (s *Store) SubscriptionsRecovered(ctx context.Context) ([]store.FailingSubscription, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, tenant_id, url, host, alert_since, last_failure_at FROM subscriptions
		WHERE alert_state = 'failing' AND failing_since = 0 ORDER BY id`)
	if err != nil {
		return nil, mapErr(err)
	}
	return collectFailing(rows)
}

func collectFailing(rows *sql.Rows) ([]store.FailingSubscription, error) {
	defer rows.Close()
	var out []store.FailingSubscription
	for rows.Next() {
		var f store.FailingSubscription
		var since, last int64
		if err := rows.Scan(&f.ID, &f.TenantID, &f.URL, &f.Host, &since, &last); err != nil {
			return nil, err
		}
		f.FailingSince, f.LastFailureAt = tm(since), tm(last)
		out = append(out, f)
	}
	return out, mapErr(rows.Err())
}

func (s *Store) SubscriptionAlert(ctx context.Context, id string, failing bool, now time.Time, every time.Duration) (bool, error) {
	var moved bool
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var res sql.Result
		var err error
		if failing {
			res, err = tx.ExecContext(ctx, `UPDATE subscriptions SET alert_state = 'failing', alerted_at = ?1,
				alert_since = CASE WHEN failing_since > 0 THEN failing_since ELSE ?1 END
				WHERE id = ?2 AND alert_state <> 'failing' AND alerted_at <= ?3`, ns(now), id, ns(now.Add(-every)))
		} else {
			res, err = tx.ExecContext(ctx, `UPDATE subscriptions SET alert_state = 'ok'
				WHERE id = ? AND alert_state = 'failing'`, id)
		}
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		moved = n == 1
		return err
	})
	return moved, mapErr(err)
}

// restartFailing starts a subscription turned back on (to active from
// paused or disabled) on a clean slate: it is judged on its attempts from
// then on, so what failed before it was turned off neither disables it
// again nor is announced as recovered, and its next failing alert is not
// held back by one sent before. Its last failure is kept.
func restartFailing(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `UPDATE subscriptions SET failing_since = 0, alert_state = 'ok', alert_since = 0, alerted_at = 0 WHERE id = ?`, id)
	return err
}

// oweDisabled records the hookd.subscription.disabled a disable owes.
func oweDisabled(ctx context.Context, tx *sql.Tx, id string, notice []byte) error {
	_, err := tx.ExecContext(ctx, `UPDATE subscriptions SET disabled_notice = ? WHERE id = ?`, string(notice), id)
	return err
}

func (s *Store) Notices(ctx context.Context) ([]store.Notice, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, tenant_id, host, url, disabled_notice FROM subscriptions
		INDEXED BY subscriptions_disabled_notice WHERE disabled_notice IS NOT NULL AND deleted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, mapErr(err)
	}
	var out []store.Notice
	for rows.Next() {
		var n store.Notice
		var payload string
		if err := rows.Scan(&n.SubscriptionID, &n.TenantID, &n.Host, &n.URL, &payload); err != nil {
			rows.Close()
			return nil, mapErr(err)
		}
		n.Disabled = []byte(payload)
		out = append(out, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mapErr(err)
	}
	rows, err = s.r.QueryContext(ctx, `SELECT `+replayJobColumns+`,
		(SELECT host FROM subscriptions s WHERE s.id = subscription_id), (SELECT url FROM subscriptions s WHERE s.id = subscription_id)
		FROM replay_jobs INDEXED BY replay_jobs_completed_notice
		WHERE completed_notice = 1 AND subscription_id IN (SELECT id FROM subscriptions WHERE deleted_at IS NULL) ORDER BY id`)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	for rows.Next() {
		var n store.Notice
		var err error
		if n.Job, err = scanReplayJob(scanAlso{rows, []any{&n.Host, &n.URL}}); err != nil {
			return nil, mapErr(err)
		}
		n.SubscriptionID, n.TenantID = n.Job.SubscriptionID, n.Job.TenantID
		out = append(out, n)
	}
	return out, mapErr(rows.Err())
}

// scanAlso scans a row's columns after those its caller names into also.
type scanAlso struct {
	sc   scanner
	also []any
}

func (x scanAlso) Scan(dest ...any) error { return x.sc.Scan(append(dest, x.also...)...) }

func (s *Store) NoticeSent(ctx context.Context, n store.Notice) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		if n.Job.ID != "" {
			_, err := tx.ExecContext(ctx, `UPDATE replay_jobs SET completed_notice = 0 WHERE id = ?`, n.Job.ID)
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE subscriptions SET disabled_notice = NULL WHERE id = ? AND disabled_notice = ?`,
			n.SubscriptionID, string(n.Disabled))
		return err
	}))
}
