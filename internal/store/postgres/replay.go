package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/core"
	"hookd/internal/store"
)

const replayJobColumns = `id, tenant_id, subscription_id, since, until, event_types, state, replayed, cursor,
	created_at, updated_at, states, rate, cancelled_at`

func scanReplayJob(row pgx.Row) (core.ReplayJob, error) {
	var j core.ReplayJob
	var since, until, c, u, cancelled pgtype.Timestamptz
	var state string
	var states []string
	if err := row.Scan(&j.ID, &j.TenantID, &j.SubscriptionID, &since, &until, &j.EventTypes, &state,
		&j.Replayed, &j.Cursor, &c, &u, &states, &j.Rate, &cancelled); err != nil {
		return j, err
	}
	j.Since, j.Until, j.CreatedAt, j.UpdatedAt, j.CancelledAt = tm(since), tm(until), tm(c), tm(u), tm(cancelled)
	// A cancelled job is written done with cancelled_at set (migration 0011).
	switch {
	case state == "running":
		j.State = core.ReplayRunning
	case cancelled.Valid:
		j.State = core.ReplayCancelled
	default:
		j.State = core.ReplayDone
	}
	j.States = make([]core.DeliveryState, len(states))
	for i, s := range states {
		j.States[i] = core.DeliveryState(s)
	}
	return j, nil
}

func stateNames(states []core.DeliveryState) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

func (s *Store) ReplayJobCreate(ctx context.Context, j core.ReplayJob) error {
	return mapErr(s.inTx(ctx, func(tx pgx.Tx) error {
		// Creates of one subscription's jobs take turns on every node, so
		// what runs stays so until the commit.
		if err := takeTurn(ctx, tx, "replay_jobs.create."+j.SubscriptionID); err != nil {
			return err
		}
		var running bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM replay_jobs WHERE subscription_id = $1 AND state = 'running')`,
			j.SubscriptionID).Scan(&running); err != nil {
			return err
		}
		if running {
			return store.ErrConflict
		}
		_, err := tx.Exec(ctx, `INSERT INTO replay_jobs (`+replayJobColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, 'running', 0, '', $7, $8, $9, $10, NULL)`,
			j.ID, j.TenantID, j.SubscriptionID, j.Since, ts(j.Until), orEmpty(j.EventTypes), j.CreatedAt, j.UpdatedAt,
			stateNames(j.States), j.Rate)
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
	return collectReplayJobs(rows)
}

func collectReplayJobs(rows pgx.Rows) ([]core.ReplayJob, error) {
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

func (s *Store) ReplayJobList(ctx context.Context, p store.ReplayJobListParams) (store.Page[core.ReplayJob], error) {
	limit := store.PageLimit(p.Limit)
	// Walks replay_jobs_subscription backwards; IDs sort by creation.
	rows, err := s.pool.Query(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs
		WHERE subscription_id = $1 AND ($2 = '' OR tenant_id = $2) AND ($3 = '' OR id < $3)
		ORDER BY id DESC LIMIT $4`, p.SubscriptionID, p.TenantID, p.Cursor, limit+1)
	if err != nil {
		return store.Page[core.ReplayJob]{}, mapErr(err)
	}
	jobs, err := collectReplayJobs(rows)
	if err != nil {
		return store.Page[core.ReplayJob]{}, err
	}
	return store.PageOf(jobs, limit, func(j core.ReplayJob) string { return j.ID }), nil
}

func (s *Store) ReplayJobCancel(ctx context.Context, tenantID, id string, now time.Time) (core.ReplayJob, error) {
	var j core.ReplayJob
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		// FOR UPDATE: a step running now finishes first, and every step
		// after reads the job cancelled (ReplayJobStep locks it too).
		var err error
		j, err = scanReplayJob(tx.QueryRow(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs
			WHERE id = $1 AND ($2 = '' OR tenant_id = $2)
			AND subscription_id IN (SELECT id FROM subscriptions WHERE deleted_at IS NULL) FOR UPDATE`, id, tenantID))
		if err != nil {
			return err
		}
		if j.State != core.ReplayRunning {
			return store.ErrConflict
		}
		j.State, j.CancelledAt, j.UpdatedAt = core.ReplayCancelled, now, now
		if _, err := tx.Exec(ctx, `UPDATE replay_jobs SET state = 'done', cancelled_at = $1, updated_at = $1 WHERE id = $2`,
			now, id); err != nil {
			return err
		}
		return writeAudit(ctx, tx, j.TenantID)
	})
	if errors.Is(err, store.ErrConflict) {
		return j, err
	}
	if err != nil {
		return core.ReplayJob{}, mapErr(err)
	}
	return j, nil
}

func (s *Store) ReplayJobStep(ctx context.Context, id string, limit int, now time.Time) (core.ReplayJob, []string, error) {
	var j core.ReplayJob
	var ids []string
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		ids = nil
		// FOR UPDATE: if two nodes step one job at once, the second waits
		// and continues from the first one's cursor; a cancel waits for a
		// step, and a step after it reads the job cancelled.
		var err error
		if j, err = scanReplayJob(tx.QueryRow(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs WHERE id = $1 FOR UPDATE`, id)); err != nil {
			return err
		}
		if j.State != core.ReplayRunning {
			return store.ErrConflict
		}
		var host string
		var subState core.SubscriptionState
		var deleted pgtype.Timestamptz
		if err := tx.QueryRow(ctx, `SELECT host, state, deleted_at FROM subscriptions WHERE id = $1`,
			j.SubscriptionID).Scan(&host, &subState, &deleted); err != nil {
			return err
		}
		// Deleted or disabled since it began: it ends, putting nothing back
		// (a disabled subscription sends nothing), and no notice is owed.
		gone := deleted.Valid || subState == core.SubDisabled
		var considered int
		if !gone {
			// One statement picks the batch and puts it back in line. A row
			// another transaction changed meanwhile is re-checked by the
			// UPDATE and left alone, but still counts as considered.
			//
			// The walk is by (created_at, id) from the cursor, the last ID
			// put back ($5 at $11). Once retention removed that row, it
			// goes on from Since among the later IDs ($12): IDs are made
			// after their creation time, so a delivery made after the
			// cursor's has a later one.
			from, at, after := j.Since, "", ""
			if j.Cursor != "" {
				err := tx.QueryRow(ctx, `SELECT created_at FROM deliveries WHERE id = $1`, j.Cursor).Scan(&from)
				switch {
				case errors.Is(err, pgx.ErrNoRows):
					from, after = j.Since, j.Cursor
				case err != nil:
					return err
				default:
					at = j.Cursor
				}
			}
			var last pgtype.Text
			err := tx.QueryRow(ctx, `WITH cand AS (
					SELECT id, created_at FROM deliveries
					WHERE subscription_id = $4 AND (created_at, id) > ($11, $5) AND ($12 = '' OR id > $12)
					AND state = ANY($10)
					AND created_at >= $6 AND ($7::timestamptz IS NULL OR created_at < $7)
					AND (cardinality($8::text[]) = 0 OR event_type = ANY($8))
					ORDER BY created_at, id LIMIT $9),
				upd AS (
					UPDATE deliveries d SET state = 'pending', round_start = attempt_count,
					round_started_at = $1, next_attempt_at = $1, updated_at = $1, host = $2, shard = $3
					FROM cand WHERE d.id = cand.id AND d.state = ANY($10)
					RETURNING d.id)
				SELECT (SELECT count(*) FROM cand), (SELECT id FROM cand ORDER BY created_at DESC, id DESC LIMIT 1),
					(SELECT coalesce(array_agg(id), '{}') FROM upd)`,
				now, host, core.ShardOf(host), j.SubscriptionID, at, j.Since, ts(j.Until), orEmpty(j.EventTypes), limit,
				stateNames(j.States), from, after).
				Scan(&considered, &last, &ids)
			if err != nil {
				return err
			}
			if last.Valid {
				j.Cursor = last.String
			}
		}
		j.Replayed += len(ids)
		state, owed := "running", false
		if considered < limit {
			j.State, state, owed = core.ReplayDone, "done", !gone
		}
		j.UpdatedAt = now
		if _, err := tx.Exec(ctx, `UPDATE replay_jobs SET replayed = $1, cursor = $2, state = $3, updated_at = $4, completed_notice = $6
			WHERE id = $5`, j.Replayed, j.Cursor, state, now, id, owed); err != nil {
			return err
		}
		if len(ids) > 0 {
			return s.notify(ctx, tx, store.Due{SubscriptionID: j.SubscriptionID, Shard: core.ShardOf(host)})
		}
		return nil
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		return j, nil, err
	case err != nil:
		return j, nil, mapErr(err)
	}
	return j, ids, nil
}

func (s *Store) DeliveryUntried(ctx context.Context, ids []string) ([]string, error) {
	var out []string
	err := s.pool.QueryRow(ctx, `SELECT coalesce(array_agg(id), '{}') FROM deliveries
		WHERE id = ANY($1) AND state = 'pending' AND attempt_count = round_start`, orEmpty(ids)).Scan(&out)
	return out, mapErr(err)
}
