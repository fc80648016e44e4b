package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"hookd/internal/core"
	"hookd/internal/store"
)

const replayJobColumns = `id, tenant_id, subscription_id, since, until, event_types, state, replayed, cursor,
	created_at, updated_at`

func scanReplayJob(sc scanner) (core.ReplayJob, error) {
	var j core.ReplayJob
	var since, until, c, u int64
	var types, state string
	if err := sc.Scan(&j.ID, &j.TenantID, &j.SubscriptionID, &since, &until, &types, &state,
		&j.Replayed, &j.Cursor, &c, &u); err != nil {
		return j, err
	}
	j.Since, j.Until, j.CreatedAt, j.UpdatedAt = tm(since), tm(until), tm(c), tm(u)
	j.Done = state == "done"
	if err := json.Unmarshal([]byte(types), &j.EventTypes); err != nil {
		return j, err
	}
	return j, nil
}

func (s *Store) ReplayJobCreate(ctx context.Context, j core.ReplayJob) error {
	types := j.EventTypes
	if types == nil {
		types = []string{}
	}
	b, err := json.Marshal(types)
	if err != nil {
		return err
	}
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO replay_jobs (`+replayJobColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, 'running', 0, '', ?, ?)`,
			j.ID, j.TenantID, j.SubscriptionID, ns(j.Since), ns(j.Until), string(b), ns(j.CreatedAt), ns(j.UpdatedAt))
		if err != nil {
			return err
		}
		return writeAudit(ctx, tx, j.TenantID)
	}))
}

func (s *Store) ReplayJobGet(ctx context.Context, tenantID, id string) (core.ReplayJob, error) {
	j, err := scanReplayJob(s.r.QueryRowContext(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs
		WHERE id = ? AND (? = '' OR tenant_id = ?)
		AND subscription_id IN (SELECT id FROM subscriptions WHERE deleted_at IS NULL)`, id, tenantID, tenantID))
	return j, mapErr(err)
}

func (s *Store) ReplayJobsRunning(ctx context.Context) ([]core.ReplayJob, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs INDEXED BY replay_jobs_running
		WHERE state = 'running' ORDER BY created_at`)
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	out := []core.ReplayJob{}
	for rows.Next() {
		j, err := scanReplayJob(rows)
		if err != nil {
			return nil, mapErr(err)
		}
		out = append(out, j)
	}
	return out, mapErr(rows.Err())
}

func (s *Store) ReplayJobStep(ctx context.Context, id string, limit int, now time.Time) (core.ReplayJob, error) {
	var j core.ReplayJob
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var err error
		if j, err = scanReplayJob(tx.QueryRowContext(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs WHERE id = ?`, id)); err != nil {
			return err
		}
		if j.Done {
			return nil
		}
		var host string
		var deleted sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT host, deleted_at FROM subscriptions WHERE id = ?`,
			j.SubscriptionID).Scan(&host, &deleted); err != nil {
			return err
		}
		types, _ := json.Marshal(j.EventTypes)
		var ids []string
		if !deleted.Valid {
			ids, err = queryStrings(ctx, tx, `SELECT id FROM deliveries INDEXED BY deliveries_subscription
				WHERE subscription_id = ?1 AND id > ?2 AND state IN ('failed', 'skipped')
				AND created_at >= ?3 AND (?4 = 0 OR created_at < ?4)
				AND (json_array_length(?5) = 0 OR event_type IN (SELECT value FROM json_each(?5)))
				ORDER BY id LIMIT ?6`, j.SubscriptionID, j.Cursor, ns(j.Since), ns(j.Until), string(types), limit)
			if err != nil {
				return err
			}
		}
		for _, d := range ids {
			if _, err := tx.ExecContext(ctx, `UPDATE deliveries SET state = 'pending', round_start = attempt_count,
				round_started_at = ?1, next_attempt_at = ?1, updated_at = ?1, host = ?2, shard = ?3 WHERE id = ?4`,
				ns(now), host, core.ShardOf(host), d); err != nil {
				return err
			}
		}
		j.Replayed += len(ids)
		if len(ids) > 0 {
			j.Cursor = ids[len(ids)-1]
		}
		j.Done = len(ids) < limit
		j.UpdatedAt = now
		state := "running"
		if j.Done {
			state = "done"
		}
		_, err = tx.ExecContext(ctx, `UPDATE replay_jobs SET replayed = ?, cursor = ?, state = ?, updated_at = ? WHERE id = ?`,
			j.Replayed, j.Cursor, state, ns(now), id)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return j, store.ErrNotFound
	}
	return j, mapErr(err)
}
