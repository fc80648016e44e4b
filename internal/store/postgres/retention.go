package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

// Purge reads its window of events without locks (kept ones, pending work
// among them, stay unlocked), then claims the candidates with SKIP LOCKED,
// so nodes purging at once take disjoint ones, and locks their deliveries:
// a replay that made one pending meanwhile is seen, and that event is left
// alone.
//
// A pass's first call (after is the zero cursor) first drops the whole days
// past cutoff (dropDays); the batches then remove what is left: the legacy
// partition's rows, and days kept for pending work. It also makes the days
// ahead, as keepPartitions does, so a failure to is logged with the pass's.
func (s *Store) Purge(ctx context.Context, cutoff time.Time, after store.PurgeCursor, limit int) (store.PurgeResult, error) {
	dropped := 0
	if after == (store.PurgeCursor{}) {
		if err := s.ensurePartitions(ctx, time.Now()); err != nil {
			return store.PurgeResult{}, mapErr(err)
		}
		var err error
		if dropped, err = s.dropDays(ctx, cutoff); err != nil {
			return store.PurgeResult{}, mapErr(err)
		}
	}
	var res store.PurgeResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = store.PurgeResult{Next: after}
		// Shared: batches run side by side, never beside a day's drop.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(`+partitionLock+`)`); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `SELECT e.id, e.created_at,
				NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id AND d.state = 'pending')
			FROM events e
			WHERE e.created_at < $1 AND (e.created_at, e.id) > ($2, $3)
			ORDER BY e.created_at, e.id LIMIT $4`, cutoff, after.CreatedAt, after.EventID, limit)
		var ids []string
		var id string
		var created time.Time
		var done bool
		if _, err := pgx.ForEachRow(rows, []any{&id, &created, &done}, func() error {
			res.Looked++
			res.Next = store.PurgeCursor{CreatedAt: created, EventID: id}
			if done {
				ids = append(ids, id)
			}
			return nil
		}); err != nil || len(ids) == 0 {
			return err
		}
		rows, _ = tx.Query(ctx, `SELECT id FROM events WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED`, ids)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		// Locked, the states read are the latest: a replay waits for us.
		busy := map[string]bool{}
		var state string
		rows, _ = tx.Query(ctx, `SELECT event_id, state FROM deliveries WHERE event_id = ANY($1)
			ORDER BY id FOR UPDATE`, ids)
		if _, err := pgx.ForEachRow(rows, []any{&id, &state}, func() error {
			if state == "pending" {
				busy[id] = true
			}
			return nil
		}); err != nil {
			return err
		}
		ids = slices.DeleteFunc(ids, func(id string) bool { return busy[id] })
		if res.Removed = len(ids); res.Removed == 0 {
			return nil
		}
		b := &pgx.Batch{}
		of := `(SELECT * FROM deliveries WHERE event_id = ANY($1))`
		b.Queue(countsSQL(of), ids)
		b.Queue(`DELETE FROM attempts WHERE delivery_id IN (SELECT id FROM deliveries WHERE event_id = ANY($1))`, ids)
		b.Queue(`DELETE FROM deliveries WHERE event_id = ANY($1)`, ids)
		b.Queue(`DELETE FROM event_keys k USING events e WHERE e.id = ANY($1) AND e.idempotency_key <> ''
			AND k.tenant_id = e.tenant_id AND k.idempotency_key = e.idempotency_key AND k.event_id = e.id`, ids)
		b.Queue(`DELETE FROM events WHERE id = ANY($1)`, ids)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return store.PurgeResult{}, mapErr(err)
	}
	res.Removed += dropped
	return res, nil
}

func (s *Store) DailyCounts(ctx context.Context, subscriptionID string) ([]core.DailyCount, error) {
	rows, _ := s.pool.Query(ctx, `SELECT day, delivered, failed, skipped, attempts FROM daily_counts
		WHERE subscription_id = $1 ORDER BY day`, subscriptionID)
	out := []core.DailyCount{}
	var day pgtype.Date
	c := core.DailyCount{SubscriptionID: subscriptionID}
	_, err := pgx.ForEachRow(rows, []any{&day, &c.Delivered, &c.Failed, &c.Skipped, &c.Attempts}, func() error {
		c.Day = day.Time.UTC()
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
