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
	created_at, updated_at, states, rate, cancelled_at`

func scanReplayJob(sc scanner) (core.ReplayJob, error) {
	var j core.ReplayJob
	var since, until, c, u, cancelled int64
	var types, states, state string
	if err := sc.Scan(&j.ID, &j.TenantID, &j.SubscriptionID, &since, &until, &types, &state,
		&j.Replayed, &j.Cursor, &c, &u, &states, &j.Rate, &cancelled); err != nil {
		return j, err
	}
	j.Since, j.Until, j.CreatedAt, j.UpdatedAt, j.CancelledAt = tm(since), tm(until), tm(c), tm(u), tm(cancelled)
	j.State = replayState(state, cancelled != 0)
	if err := json.Unmarshal([]byte(types), &j.EventTypes); err != nil {
		return j, err
	}
	if err := json.Unmarshal([]byte(states), &j.States); err != nil {
		return j, err
	}
	return j, nil
}

// replayState reads a job's state as stored: a cancelled job is written
// done with cancelled_at set (see migration 0010).
func replayState(state string, cancelled bool) core.ReplayState {
	switch {
	case state == "running":
		return core.ReplayRunning
	case cancelled:
		return core.ReplayCancelled
	}
	return core.ReplayDone
}

// jsonList is a list as a JSON array, never null.
func jsonList[T any](xs []T) string {
	if xs == nil {
		xs = []T{}
	}
	b, _ := json.Marshal(xs) // strings only: cannot fail
	return string(b)
}

func (s *Store) ReplayJobCreate(ctx context.Context, j core.ReplayJob) error {
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		// The one writer connection takes every write in turn: what runs
		// stays so until the commit.
		var running int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM replay_jobs INDEXED BY replay_jobs_subscription
			WHERE subscription_id = ? AND state = 'running'`, j.SubscriptionID).Scan(&running); err != nil {
			return err
		}
		if running > 0 {
			return store.ErrConflict
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO replay_jobs (`+replayJobColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, 'running', 0, '', ?, ?, ?, ?, 0)`,
			j.ID, j.TenantID, j.SubscriptionID, ns(j.Since), ns(j.Until), jsonList(j.EventTypes),
			ns(j.CreatedAt), ns(j.UpdatedAt), jsonList(j.States), j.Rate)
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
	return collectReplayJobs(rows)
}

func collectReplayJobs(rows *sql.Rows) ([]core.ReplayJob, error) {
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
	q := `SELECT ` + replayJobColumns + ` FROM replay_jobs INDEXED BY replay_jobs_subscription
		WHERE subscription_id = ? AND (? = '' OR tenant_id = ?)`
	args := []any{p.SubscriptionID, p.TenantID, p.TenantID}
	if p.Cursor != "" {
		q += ` AND id < ?`
		args = append(args, p.Cursor)
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY id DESC LIMIT ?`, append(args, limit+1)...)
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
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var err error
		j, err = scanReplayJob(tx.QueryRowContext(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs
			WHERE id = ? AND (? = '' OR tenant_id = ?)
			AND subscription_id IN (SELECT id FROM subscriptions WHERE deleted_at IS NULL)`, id, tenantID, tenantID))
		if err != nil {
			return err
		}
		if j.State != core.ReplayRunning {
			return store.ErrConflict
		}
		j.State, j.CancelledAt, j.UpdatedAt = core.ReplayCancelled, now, now
		if _, err := tx.ExecContext(ctx, `UPDATE replay_jobs SET state = 'done', cancelled_at = ?1, updated_at = ?1
			WHERE id = ?2`, ns(now), id); err != nil {
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

// replayStepSQL is a job's next batch: its subscription's deliveries after
// (?8, ?2) by (created_at, id), with an ID over ?9 if that is set, in its
// window, states and types.
const replayStepSQL = `SELECT id FROM deliveries INDEXED BY deliveries_subscription_created
	WHERE subscription_id = ?1 AND (created_at, id) > (?8, ?2) AND (?9 = '' OR id > ?9)
	AND state IN (SELECT value FROM json_each(?7))
	AND created_at >= ?3 AND (?4 = 0 OR created_at < ?4)
	AND (json_array_length(?5) = 0 OR event_type IN (SELECT value FROM json_each(?5)))
	ORDER BY created_at, id LIMIT ?6`

func (s *Store) ReplayJobStep(ctx context.Context, id string, limit int, now time.Time) (core.ReplayJob, []string, error) {
	var j core.ReplayJob
	var ids []string
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		ids = nil
		// Read in the step's own write transaction: a cancel committed
		// before it is seen, and one after it waits for it.
		var err error
		if j, err = scanReplayJob(tx.QueryRowContext(ctx, `SELECT `+replayJobColumns+` FROM replay_jobs WHERE id = ?`, id)); err != nil {
			return err
		}
		if j.State != core.ReplayRunning {
			return store.ErrConflict
		}
		var host string
		var subState core.SubscriptionState
		var deleted sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT host, state, deleted_at FROM subscriptions WHERE id = ?`,
			j.SubscriptionID).Scan(&host, &subState, &deleted); err != nil {
			return err
		}
		// Deleted or disabled since it began: it ends, putting nothing back
		// (a disabled subscription sends nothing), and no notice is owed.
		gone := deleted.Valid || subState == core.SubDisabled
		if !gone {
			// The walk is by (created_at, id) from the cursor, the last ID
			// put back. Once retention removed that row, it goes on from
			// Since among the later IDs: IDs are made after their creation
			// time, so a delivery made after the cursor's has a later one.
			from, at, after := ns(j.Since), "", ""
			if j.Cursor != "" {
				err := tx.QueryRowContext(ctx, `SELECT created_at FROM deliveries WHERE id = ?`, j.Cursor).Scan(&from)
				switch {
				case errors.Is(err, sql.ErrNoRows):
					after = j.Cursor
				case err != nil:
					return err
				default:
					at = j.Cursor
				}
			}
			ids, err = queryStrings(ctx, tx, replayStepSQL, j.SubscriptionID, at, ns(j.Since), ns(j.Until), jsonList(j.EventTypes), limit,
				jsonList(j.States), from, after)
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
		state, owed := "running", false
		if len(ids) < limit {
			j.State, state, owed = core.ReplayDone, "done", !gone
		}
		j.UpdatedAt = now
		_, err = tx.ExecContext(ctx, `UPDATE replay_jobs SET replayed = ?, cursor = ?, state = ?, updated_at = ?, completed_notice = ?
			WHERE id = ?`, j.Replayed, j.Cursor, state, ns(now), b2i(owed), id)
		return err
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		return j, nil, err
	case errors.Is(err, sql.ErrNoRows):
		return j, nil, store.ErrNotFound
	case err != nil:
		return j, nil, mapErr(err)
	}
	return j, ids, nil
}

func (s *Store) DeliveryUntried(ctx context.Context, ids []string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM deliveries
		WHERE id IN (SELECT value FROM json_each(?)) AND state = 'pending' AND attempt_count = round_start`,
		jsonList(ids))
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, mapErr(err)
		}
		out = append(out, id)
	}
	return out, mapErr(rows.Err())
}
