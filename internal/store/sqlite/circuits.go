package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"hookd/internal/store"
)

var _ store.CircuitBoard = (*Store)(nil)

// The board's times are this process's clock: one node writes and reads it.

func (s *Store) CircuitsPublish(ctx context.Context, cs []store.Circuit) error {
	if len(cs) == 0 {
		return nil
	}
	now := time.Now()
	return mapErr(s.writeTx(ctx, func(tx *sql.Tx) error {
		for _, c := range cs { // the last of a repeated key wins
			var retry, paused int64
			if c.Open {
				retry = ns(now.Add(c.RetryIn))
			}
			if c.PausedFor > 0 {
				paused = ns(now.Add(c.PausedFor))
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO host_circuits (host, open, retry_at, paused_until, cut_rate, cut_ceiling, updated_at)
				VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (host) DO UPDATE SET open = excluded.open, retry_at = excluded.retry_at,
				paused_until = excluded.paused_until, cut_rate = excluded.cut_rate, cut_ceiling = excluded.cut_ceiling,
				updated_at = excluded.updated_at`,
				c.Key, c.Open, retry, paused, c.CutRate, c.CutCeiling, ns(now)); err != nil {
				return err
			}
		}
		return nil
	}))
}

func (s *Store) CircuitsGet(ctx context.Context, keys []string) ([]store.Circuit, error) {
	list, err := json.Marshal(keys)
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT host, open, retry_at, paused_until, cut_rate, cut_ceiling, updated_at FROM host_circuits
		WHERE host IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, mapErr(err)
	}
	defer rows.Close()
	now := time.Now()
	var out []store.Circuit
	for rows.Next() {
		var c store.Circuit
		var retry, paused, updated int64
		if err := rows.Scan(&c.Key, &c.Open, &retry, &paused, &c.CutRate, &c.CutCeiling, &updated); err != nil {
			return nil, mapErr(err)
		}
		if c.Open {
			c.RetryIn = tm(retry).Sub(now)
		}
		c.PausedFor = max(0, tm(paused).Sub(now))
		c.Age = now.Sub(tm(updated))
		out = append(out, c)
	}
	return out, mapErr(rows.Err())
}
