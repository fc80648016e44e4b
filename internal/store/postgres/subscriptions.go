package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

const subColumns = `id, tenant_id, url, host, event_types, secret, prev_secret, prev_secret_expires_at,
	ordered, retry_schedule, timeout_ns, max_concurrency, rate_limit, retry_status_codes,
	state, disabled_reason, created_at, updated_at, headers, uid, svix`

// schedule stores durations as Go strings ("5s") so the column reads well;
// nil stays NULL because a nil schedule means the default and an empty one none.
func schedule(sub core.Subscription) []string {
	if sub.RetrySchedule == nil {
		return nil
	}
	return core.FormatDurations(sub.RetrySchedule)
}

func (s *Store) scanSub(row pgx.Row) (core.Subscription, error) {
	var sub core.Subscription
	var prevExp, c, u pgtype.Timestamptz
	var sched []string
	var timeout int64
	var sealed store.Sealed
	var svix string
	if err := row.Scan(&sub.ID, &sub.TenantID, &sub.URL, &sub.Host, &sub.EventTypes, &sealed.Secret,
		&sealed.PrevSecret, &prevExp, &sub.Ordered, &sched, &timeout, &sub.MaxConcurrency,
		&sub.RateLimit, &sub.RetryStatusCodes, &sub.State, &sub.DisabledReason, &c, &u, &sealed.Headers, &sub.UID, &svix); err != nil {
		return sub, err
	}
	if err := store.DecodeSvix(svix, &sub); err != nil {
		return sub, err
	}
	if err := store.OpenSubscription(s.keys, &sub, sealed); err != nil {
		return sub, err
	}
	sub.PrevSecretExpiresAt = tm(prevExp)
	sub.Timeout = time.Duration(timeout)
	sub.CreatedAt, sub.UpdatedAt = tm(c), tm(u)
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
	return sub, nil
}

// changed is the notification that makes every other node reload its
// subscription registry.
func changed(id string) store.Due { return store.Due{Kind: store.DueSubscription, SubscriptionID: id} }

func (s *Store) SubscriptionCreate(ctx context.Context, sub core.Subscription) error {
	return s.SubscriptionCreateWithin(ctx, sub, 0)
}

func (s *Store) SubscriptionCreateWithin(ctx context.Context, sub core.Subscription, max int) error {
	sealed, err := store.SealSubscription(s.keys, sub)
	if err != nil {
		return err
	}
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		if max > 0 {
			// Creates of one tenant take turns on every node (the lock ends
			// with the transaction), so the count holds until the commit.
			if err := takeTurn(ctx, tx, "subscriptions.create."+sub.TenantID); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM subscriptions WHERE tenant_id = $1 AND deleted_at IS NULL`,
				sub.TenantID).Scan(&n); err != nil {
				return err
			}
			if n >= max {
				return store.ErrLimit
			}
		}
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO subscriptions (`+subColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`,
			sub.ID, sub.TenantID, sub.URL, sub.Host, sub.EventTypes, sealed.Secret, sealed.PrevSecret, ts(sub.PrevSecretExpiresAt),
			sub.Ordered, schedule(sub), int64(sub.Timeout), sub.MaxConcurrency, sub.RateLimit, sub.RetryStatusCodes,
			string(sub.State), sub.DisabledReason, sub.CreatedAt, sub.UpdatedAt, sealed.Headers, sub.UID, store.EncodeSvix(sub))
		s.queueNotify(b, []store.Due{changed(sub.ID)})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		return writeAudit(ctx, tx, sub.TenantID)
	}))
}

func (s *Store) SubscriptionGet(ctx context.Context, tenantID, id string) (core.Subscription, error) {
	sub, err := s.scanSub(s.pool.QueryRow(ctx, `SELECT `+subColumns+` FROM subscriptions
		WHERE id = $1 AND ($2 = '' OR tenant_id = $2) AND deleted_at IS NULL`, id, tenantID))
	if err != nil {
		return core.Subscription{}, mapErr(err)
	}
	return sub, nil
}

func (s *Store) SubscriptionList(ctx context.Context, p store.SubscriptionListParams) (store.Page[core.Subscription], error) {
	limit := store.PageLimit(p.Limit)
	// One row more than the page tells whether another page exists.
	rows, err := s.pool.Query(ctx, subscriptionListQuery(p.Failing), p.TenantID, p.Cursor, limit+1)
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
		WHERE ($1 = '' OR tenant_id = $1) AND id > $2 AND deleted_at IS NULL`
	if failing {
		q += ` AND failing_since IS NOT NULL`
	}
	return q + ` ORDER BY id LIMIT $3`
}

func (s *Store) SubscriptionListAll(ctx context.Context) ([]core.Subscription, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+subColumns+` FROM subscriptions WHERE deleted_at IS NULL ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return s.collectSubs(rows)
}

func (s *Store) collectSubs(rows pgx.Rows) ([]core.Subscription, error) {
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
	sealed, err := store.SealSubscription(s.keys, sub)
	if err != nil {
		return err
	}
	err = mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		// Locked: two nodes updating one subscription take turns, so the
		// "did the host or state change" decisions below hold. NO KEY: rows
		// referencing it need not wait for their foreign key checks; ingest
		// and this wait for each other through ingest's FOR SHARE (lockSubsSQL).
		var oldHost, tenant string
		var oldState core.SubscriptionState
		err := tx.QueryRow(ctx, `SELECT host, state, tenant_id FROM subscriptions
			WHERE id = $1 AND ($2 = '' OR tenant_id = $2) AND deleted_at IS NULL FOR NO KEY UPDATE`,
			sub.ID, sub.TenantID).Scan(&oldHost, &oldState, &tenant)
		if err != nil {
			return err
		}
		if err := writeAudit(ctx, tx, tenant); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE subscriptions SET url = $2, host = $3, event_types = $4,
			secret = $5, prev_secret = $6, prev_secret_expires_at = $7, ordered = $8, retry_schedule = $9,
			timeout_ns = $10, max_concurrency = $11, rate_limit = $12, retry_status_codes = $13, state = $14,
			disabled_reason = $15, updated_at = $16, headers = $17, uid = $18, svix = $19
			WHERE id = $1`,
			sub.ID, sub.URL, sub.Host, sub.EventTypes, sealed.Secret, sealed.PrevSecret, ts(sub.PrevSecretExpiresAt),
			sub.Ordered, schedule(sub), int64(sub.Timeout), sub.MaxConcurrency, sub.RateLimit, sub.RetryStatusCodes,
			string(sub.State), sub.DisabledReason, sub.UpdatedAt, sealed.Headers, sub.UID, store.EncodeSvix(sub)); err != nil {
			return err
		}
		if sub.State == core.SubActive && oldState != core.SubActive {
			if err := restartFailing(ctx, tx, sub.ID); err != nil {
				return err
			}
		}
		if notice != nil {
			if _, err := tx.Exec(ctx, `UPDATE subscriptions SET disabled_notice = $2 WHERE id = $1`, sub.ID, string(notice)); err != nil {
				return err
			}
		}
		notes := []store.Due{changed(sub.ID)}
		if sub.State == core.SubDisabled {
			return s.notify(ctx, tx, notes...) // its backlog is skipped after the commit
		}
		moved := sub.Host != oldHost
		if moved {
			// Pending work follows the endpoint to its new host, so it is
			// admitted (and sharded) under the host it will really hit.
			if _, err := tx.Exec(ctx, `UPDATE deliveries SET host = $1, shard = $2
				WHERE subscription_id = $3 AND state = 'pending'`, sub.Host, core.ShardOf(sub.Host), sub.ID); err != nil {
				return err
			}
		}
		if sub.State == core.SubActive && (moved || oldState != core.SubActive) {
			// Its pending work is due again, possibly on another node's shard.
			notes = append(notes, store.Due{SubscriptionID: sub.ID, Shard: core.ShardOf(sub.Host)})
		}
		return s.notify(ctx, tx, notes...)
	}))
	if err == nil && sub.State == core.SubDisabled {
		s.skipBacklog(ctx, sub.ID, sub.UpdatedAt)
	}
	return err
}

func (s *Store) SubscriptionTested(ctx context.Context, sub core.Subscription) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error { return writeAudit(ctx, tx, sub.TenantID) }))
}

func (s *Store) SubscriptionDelete(ctx context.Context, tenantID, id string, now time.Time) error {
	err := mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		var tenant string
		err := tx.QueryRow(ctx, `UPDATE subscriptions SET deleted_at = $1, updated_at = $1
			WHERE id = $2 AND ($3 = '' OR tenant_id = $3) AND deleted_at IS NULL RETURNING tenant_id`,
			now, id, tenantID).Scan(&tenant)
		if err != nil {
			return err
		}
		if err := writeAudit(ctx, tx, tenant); err != nil {
			return err
		}
		return s.notify(ctx, tx, changed(id))
	}))
	if err != nil {
		return err
	}
	s.skipBacklog(ctx, id, now)
	return nil
}

// skipBatch is how many pending deliveries one transaction of skipBacklog
// skips. The subscription's row change commits first and alone: ingest
// locks the rows of the subscriptions it writes to (lockSubsSQL), and one
// statement over a large backlog would hold every ingest touching this
// subscription, on every node, for as long as it ran.
const skipBatch = 1000

// skipBacklog skips a disabled or deleted subscription's pending deliveries
// (not sent, still replayable) once its change has committed, in
// transactions of skipBatch. Each shares the row lock and re-reads it, so
// it stops once the subscription is live again (a resume meanwhile) and a
// change waits for the batch in flight. The change itself has committed:
// neither the caller going away nor a failed batch undoes it; what is left
// pending is never sent (dispatch sends only active subscriptions' work)
// and Open finishes it.
func (s *Store) skipBacklog(ctx context.Context, subID string, now time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	for {
		var n int64
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			n = 0
			var gone bool
			err := tx.QueryRow(ctx, `SELECT state = 'disabled' OR deleted_at IS NOT NULL FROM subscriptions
				WHERE id = $1 FOR SHARE`, subID).Scan(&gone)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil || !gone {
				return err
			}
			tag, err := tx.Exec(ctx, `UPDATE deliveries SET state = 'skipped', updated_at = $1
				WHERE id IN (SELECT id FROM deliveries WHERE subscription_id = $2 AND state = 'pending' LIMIT $3)
				AND state = 'pending'`, now, subID, skipBatch)
			n = tag.RowsAffected()
			return err
		})
		if err != nil || n < skipBatch {
			return
		}
	}
}

// finishSkips skips what a crash or a failed batch left pending of
// disabled or deleted subscriptions (skipBacklog commits in batches).
func (s *Store) finishSkips(ctx context.Context) error {
	rows, _ := s.pool.Query(ctx, `SELECT s.id FROM subscriptions s
		WHERE (s.state = 'disabled' OR s.deleted_at IS NOT NULL)
		AND EXISTS (SELECT 1 FROM deliveries d WHERE d.subscription_id = s.id AND d.state = 'pending')`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, id := range ids {
		s.skipBacklog(ctx, id, time.Now().UTC())
	}
	return nil
}

// mustAffect turns "no row matched" into ErrNotFound.
func mustAffect(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotFound
	}
	return nil
}
