package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/store"
)

var _ store.CircuitBoard = (*Store)(nil)

// Circuits live in host_circuits, keyed in its host column: a host's
// "host:port" or an endpoint's subscription ID.

func (s *Store) CircuitsPublish(ctx context.Context, cs []store.Circuit) error {
	// One statement may not touch a row twice: the last of a key wins.
	last := make(map[string]int, len(cs))
	for i, c := range cs {
		last[c.Key] = i
	}
	if len(last) < len(cs) {
		var once []store.Circuit
		for i, c := range cs {
			if last[c.Key] == i {
				once = append(once, c)
			}
		}
		cs = once
	}
	if len(cs) == 0 {
		return nil
	}
	keys, open := make([]string, len(cs)), make([]bool, len(cs))
	retry, paused := make([]int64, len(cs)), make([]int64, len(cs))
	cut, ceiling := make([]float64, len(cs)), make([]float64, len(cs))
	for i, c := range cs {
		keys[i], open[i], retry[i], paused[i] = c.Key, c.Open, c.RetryIn.Microseconds(), c.PausedFor.Microseconds()
		cut[i], ceiling[i] = c.CutRate, c.CutCeiling
	}
	// Keys in order, so two nodes publishing one key at once cannot
	// deadlock; times by this server's clock.
	_, err := s.pool.Exec(ctx, `INSERT INTO host_circuits (host, open, retry_at, paused_until, cut_rate, cut_ceiling, updated_at)
		SELECT k, o, CASE WHEN o THEN now() + r * interval '1 microsecond' END,
			CASE WHEN p > 0 THEN now() + p * interval '1 microsecond' END, c, m, now()
		FROM unnest($1::text[], $2::bool[], $3::bigint[], $4::bigint[], $5::float8[], $6::float8[]) AS x(k, o, r, p, c, m) ORDER BY k
		ON CONFLICT (host) DO UPDATE SET open = EXCLUDED.open, retry_at = EXCLUDED.retry_at,
			paused_until = EXCLUDED.paused_until, cut_rate = EXCLUDED.cut_rate, cut_ceiling = EXCLUDED.cut_ceiling,
			updated_at = EXCLUDED.updated_at`, keys, open, retry, paused, cut, ceiling)
	return mapErr(err)
}

func (s *Store) CircuitsGet(ctx context.Context, keys []string) ([]store.Circuit, error) {
	rows, err := s.pool.Query(ctx, `SELECT host, open,
			coalesce((extract(epoch FROM retry_at - now()) * 1e6)::bigint, 0),
			greatest(coalesce((extract(epoch FROM paused_until - now()) * 1e6)::bigint, 0), 0),
			cut_rate, cut_ceiling, (extract(epoch FROM now() - updated_at) * 1e6)::bigint
		FROM host_circuits WHERE host = ANY($1::text[])`, keys)
	if err != nil {
		return nil, mapErr(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Circuit, error) {
		var c store.Circuit
		var retryUs, pausedUs, ageUs int64
		err := row.Scan(&c.Key, &c.Open, &retryUs, &pausedUs, &c.CutRate, &c.CutCeiling, &ageUs)
		us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
		c.RetryIn, c.PausedFor, c.Age = us(retryUs), us(pausedUs), us(ageUs)
		return c, err
	})
	return out, mapErr(err)
}
