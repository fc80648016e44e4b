package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"hookd/internal/core"
)

const nsPerDay = int64(24 * time.Hour)

// Purge runs on the one writer, so nothing changes a delivery between the
// choice of events and their removal.
func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) (int, error) {
	var n int
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		ids, err := queryStrings(ctx, tx, `SELECT e.id FROM events e INDEXED BY events_created
			WHERE e.created_at < ?
			AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND d.state = 'pending')
			ORDER BY e.created_at LIMIT ?`, ns(cutoff), limit)
		if err != nil {
			return err
		}
		if n = len(ids); n == 0 {
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
			`DELETE FROM attempts WHERE delivery_id IN
				(SELECT id FROM deliveries WHERE event_id IN (SELECT value FROM json_each(?1)))`,
			`DELETE FROM deliveries WHERE event_id IN (SELECT value FROM json_each(?1))`,
			`DELETE FROM events WHERE id IN (SELECT value FROM json_each(?1))`,
		} {
			if _, err := tx.ExecContext(ctx, q, string(batch), nsPerDay); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, mapErr(err)
	}
	return n, nil
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
