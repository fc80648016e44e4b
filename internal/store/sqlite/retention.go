package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

const (
	nsPerDay  = int64(24 * time.Hour)
	nsPerHour = int64(time.Hour)
)

// Purge runs on the one writer, so nothing changes a delivery between the
// choice of events and their removal.
func (s *Store) Purge(ctx context.Context, cutoff time.Time, after store.PurgeCursor, limit int) (store.PurgeResult, error) {
	var res store.PurgeResult
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res = store.PurgeResult{Next: after}
		rows, err := tx.QueryContext(ctx, `SELECT e.id, e.created_at,
				NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND d.state = 'pending')
			FROM events e INDEXED BY events_created
			WHERE e.created_at < ?1 AND e.created_at >= ?2 AND (e.created_at > ?2 OR e.id > ?3)
			ORDER BY e.created_at, e.id LIMIT ?4`, ns(cutoff), ns(after.CreatedAt), after.EventID, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			var created int64
			var done bool
			if err := rows.Scan(&id, &created, &done); err != nil {
				return err
			}
			res.Looked++
			res.Next = store.PurgeCursor{CreatedAt: tm(created), EventID: id}
			if done {
				ids = append(ids, id)
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		if res.Removed = len(ids); res.Removed == 0 {
			return nil
		}
		batch, _ := json.Marshal(ids)
		for _, q := range []string{
			`INSERT INTO daily_counts (subscription_id, day, delivered, failed, skipped, attempts)
				SELECT subscription_id, created_at / ?2, sum(state = 'delivered'), sum(state = 'failed'),
					sum(state = 'skipped'), sum(attempt_count)
				FROM deliveries WHERE event_id IN (SELECT value FROM json_each(?1))
				GROUP BY subscription_id, created_at / ?2 ORDER BY 1, 2
				ON CONFLICT (subscription_id, day) DO UPDATE SET delivered = delivered + excluded.delivered,
					failed = failed + excluded.failed, skipped = skipped + excluded.skipped,
					attempts = attempts + excluded.attempts`,
			`INSERT INTO hourly_counts (subscription_id, hour, delivered, failed, skipped, attempts)
				SELECT subscription_id, created_at / ?3, sum(state = 'delivered'), sum(state = 'failed'),
					sum(state = 'skipped'), sum(attempt_count)
				FROM deliveries WHERE event_id IN (SELECT value FROM json_each(?1))
				GROUP BY subscription_id, created_at / ?3 ORDER BY 1, 2
				ON CONFLICT (subscription_id, hour) DO UPDATE SET delivered = delivered + excluded.delivered,
					failed = failed + excluded.failed, skipped = skipped + excluded.skipped,
					attempts = attempts + excluded.attempts`,
			`DELETE FROM attempts WHERE delivery_id IN
				(SELECT id FROM deliveries WHERE event_id IN (SELECT value FROM json_each(?1)))`,
			`DELETE FROM deliveries WHERE event_id IN (SELECT value FROM json_each(?1))`,
			`DELETE FROM events WHERE id IN (SELECT value FROM json_each(?1))`,
		} {
			if _, err := tx.ExecContext(ctx, q, string(batch), nsPerDay, nsPerHour); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.PurgeResult{}, mapErr(err)
	}
	return res, nil
}

func (s *Store) DailyCounts(ctx context.Context, subscriptionID string) ([]core.DailyCount, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT day, delivered, failed, skipped, attempts FROM daily_counts
		WHERE subscription_id = ? ORDER BY day`, subscriptionID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []core.DailyCount{}
	for rows.Next() {
		c := core.DailyCount{SubscriptionID: subscriptionID}
		var day int64
		if err := rows.Scan(&day, &c.Delivered, &c.Failed, &c.Skipped, &c.Attempts); err != nil {
			return nil, err
		}
		c.Day = time.Unix(0, day*nsPerDay).UTC()
		out = append(out, c)
	}
	return out, rows.Err()
}
