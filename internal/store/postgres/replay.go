package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

const replayJobColumns = `id, tenant_id, subscription_id, since, until, event_types, state, replayed, cursor,
	created_at, updated_at`

func scanReplayJob(row pgx.Row) (core.ReplayJob, error) {
	var j core.ReplayJob
	var since, until, c, u pgtype.Timestamptz
	var state string
	if err := row.Scan(&j.ID, &j.TenantID, &j.SubscriptionID, &since, &until, &j.EventTypes, &state,
		&j.Replayed, &j.Cursor, &c, &u); err != nil {
		return j, err
	}
	j.Since, j.Until, j.CreatedAt, j.UpdatedAt = tm(since), tm(until), tm(c), tm(u)
	j.Done = state == "done"
	return j, nil
}

func (s *Store) ReplayJobCreate(ctx context.Context, j core.ReplayJob) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO replay_jobs (`+replayJobColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, 'running', 0, '', $7, $8)`,
			j.ID, j.TenantID, j.SubscriptionID, j.Since, ts(j.Until), orEmpty(j.EventTypes), j.CreatedAt, j.UpdatedAt)
		if err != nil {
			return err
		}
		return writeAudit(ctx, tx, j.TenantID)
	}))
}

func (s *Store) ReplayJobGet(ctx context.Context, tenantID, id string) (core.ReplayJob, error) {
	j, err := scanReplayJob(s.pool.QueryRow(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs
		WHERE id = $1 AND ($2 = '' OR tenant_id = $2)
		AND subscription_id IN (SELECT id FROM subscriptions WHERE deleted_at IS NULL)`, id, tenantID))
	return j, mapErr(err)
}

func (s *Store) ReplayJobsRunning(ctx context.Context) ([]core.ReplayJob, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs
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
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// FOR UPDATE: if two nodes step one job at once, the second waits
		// and continues from the first one's cursor.
		var err error
		if j, err = scanReplayJob(tx.QueryRow(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs WHERE id = $1 FOR UPDATE`, id)); err != nil {
			return err
		}
		if j.Done {
			return nil
		}
		var host string
		var deleted pgtype.Timestamptz
		if err := tx.QueryRow(ctx, `SELECT host, deleted_at FROM subscriptions WHERE id = $1`,
			j.SubscriptionID).Scan(&host, &deleted); err != nil {
			return err
		}
		var considered, replayed int
		if !deleted.Valid {
			// One statement picks the batch and puts it back in line. A row
			// another transaction changed meanwhile is re-checked by the
			// UPDATE and left alone, but still counts as considered.
			var last pgtype.Text
			err := tx.QueryRow(ctx, `WITH cand AS (
					SELECT id FROM deliveries
					WHERE subscription_id = $4 AND id > $5 AND state IN ('failed', 'skipped')
					AND created_at >= $6 AND ($7::timestamptz IS NULL OR created_at < $7)
					AND (cardinality($8::text[]) = 0 OR event_type = ANY($8))
					ORDER BY id LIMIT $9),
				upd AS (
					UPDATE deliveries d SET state = 'pending', round_start = attempt_count,
					round_started_at = $1, next_attempt_at = $1, updated_at = $1, host = $2, shard = $3
					FROM cand WHERE d.id = cand.id AND d.state IN ('failed', 'skipped')
					RETURNING d.id)
				SELECT (SELECT count(*) FROM cand), (SELECT max(id) FROM cand), (SELECT count(*) FROM upd)`,
				now, host, core.ShardOf(host), j.SubscriptionID, j.Cursor, j.Since, ts(j.Until), orEmpty(j.EventTypes), limit).
				Scan(&considered, &last, &replayed)
			if err != nil {
				return err
			}
			if last.Valid {
				j.Cursor = last.String
			}
		}
		j.Replayed += replayed
		j.Done = considered < limit
		j.UpdatedAt = now
		state := "running"
		if j.Done {
			state = "done"
		}
		if _, err := tx.Exec(ctx, `UPDATE replay_jobs SET replayed = $1, cursor = $2, state = $3, updated_at = $4 WHERE id = $5`,
			j.Replayed, j.Cursor, state, now, id); err != nil {
			return err
		}
		if replayed > 0 {
			return s.notify(ctx, tx, store.Due{SubscriptionID: j.SubscriptionID, Shard: core.ShardOf(host)})
		}
		return nil
	})
	return j, mapErr(err)
}
