package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/store"
)

const failingColumns = `id, tenant_id, url, host, failing_since, last_failure_at`

func (s *Store) SubscriptionsFailing(ctx context.Context, before, lastAfter time.Time) ([]store.FailingSubscription, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+failingColumns+` FROM subscriptions
		WHERE failing_since <= $1 AND last_failure_at >= $2 AND state = 'active' AND deleted_at IS NULL
		ORDER BY id`, before, lastAfter)
	return collectFailing(rows)
}

func (s *Store) SubscriptionsRecovered(ctx context.Context) ([]store.FailingSubscription, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id, tenant_id, url, host, alert_since, last_failure_at FROM subscriptions
		WHERE alert_state = 'failing' AND failing_since IS NULL ORDER BY id`)
	return collectFailing(rows)
}

func collectFailing(rows pgx.Rows) ([]store.FailingSubscription, error) {
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.FailingSubscription, error) {
		var f store.FailingSubscription
		var since, last pgtype.Timestamptz
		err := row.Scan(&f.ID, &f.TenantID, &f.URL, &f.Host, &since, &last)
		f.FailingSince, f.LastFailureAt = tm(since), tm(last)
		return f, err
	})
	return out, mapErr(err)
}

func (s *Store) SubscriptionAlert(ctx context.Context, id string, failing bool, now time.Time, every time.Duration) (bool, error) {
	q, args := `UPDATE subscriptions SET alert_state = 'ok' WHERE id = $1 AND alert_state = 'failing'`, []any{id}
	if failing {
		q = `UPDATE subscriptions SET alert_state = 'failing', alerted_at = $2, alert_since = coalesce(failing_since, $2)
			WHERE id = $1 AND alert_state <> 'failing' AND (alerted_at IS NULL OR alerted_at <= $3)`
		args = append(args, now, now.Add(-every))
	}
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return false, mapErr(err)
	}
	return tag.RowsAffected() == 1, nil
}

// restartFailing starts a subscription turned back on (to active from
// paused or disabled) on a clean slate: it is judged on its attempts from
// then on, so what failed before it was turned off neither disables it
// again nor is announced as recovered, and its next failing alert is not
// held back by one sent before. Its last failure is kept.
func restartFailing(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `UPDATE subscriptions SET failing_since = NULL, alert_state = 'ok', alert_since = NULL, alerted_at = NULL WHERE id = $1`, id)
	return err
}

func (s *Store) Notices(ctx context.Context) ([]store.Notice, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id, tenant_id, host, url, disabled_notice FROM subscriptions
		WHERE disabled_notice IS NOT NULL AND deleted_at IS NULL ORDER BY id`)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Notice, error) {
		var n store.Notice
		var payload string
		err := row.Scan(&n.SubscriptionID, &n.TenantID, &n.Host, &n.URL, &payload)
		n.Disabled = []byte(payload)
		return n, err
	})
	if err != nil {
		return nil, mapErr(err)
	}
	rows, _ = s.pool.Query(ctx, `SELECT `+replayJobColumns+`,
		(SELECT host FROM subscriptions s WHERE s.id = subscription_id), (SELECT url FROM subscriptions s WHERE s.id = subscription_id)
		FROM replay_jobs
		WHERE completed_notice AND subscription_id IN (SELECT id FROM subscriptions WHERE deleted_at IS NULL) ORDER BY id`)
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Notice, error) {
		var n store.Notice
		var err error
		n.Job, err = scanReplayJob(scanAlso{row, []any{&n.Host, &n.URL}})
		n.SubscriptionID, n.TenantID = n.Job.SubscriptionID, n.Job.TenantID
		return n, err
	})
	return append(out, jobs...), mapErr(err)
}

// scanAlso scans a row's columns after those its caller names into also.
type scanAlso struct {
	row  pgx.Row
	also []any
}

func (x scanAlso) Scan(dest ...any) error { return x.row.Scan(append(dest, x.also...)...) }

func (s *Store) NoticeSent(ctx context.Context, n store.Notice) error {
	q, args := `UPDATE subscriptions SET disabled_notice = NULL WHERE id = $1 AND disabled_notice = $2`, []any{n.SubscriptionID, string(n.Disabled)}
	if n.Job.ID != "" {
		q, args = `UPDATE replay_jobs SET completed_notice = false WHERE id = $1`, []any{n.Job.ID}
	}
	_, err := s.pool.Exec(ctx, q, args...)
	return mapErr(err)
}
