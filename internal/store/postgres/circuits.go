package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"hookd/internal/store"
)

var _ store.CircuitBoard = (*Store)(nil)

func (s *Store) CircuitsPublish(ctx context.Context, cs []store.HostCircuit) error {
	if len(cs) == 0 {
		return nil
	}
	hosts, open, retry := make([]string, len(cs)), make([]bool, len(cs)), make([]pgtype.Timestamptz, len(cs))
	for i, c := range cs {
		hosts[i], open[i], retry[i] = c.Host, c.Open, ts(c.RetryAt)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO host_circuits (host, open, retry_at, updated_at)
		SELECT h, o, r, now() FROM unnest($1::text[], $2::bool[], $3::timestamptz[]) AS x(h, o, r)
		ON CONFLICT (host) DO UPDATE SET open = EXCLUDED.open, retry_at = EXCLUDED.retry_at,
			updated_at = EXCLUDED.updated_at`, hosts, open, retry)
	return mapErr(err)
}

func (s *Store) CircuitGet(ctx context.Context, host string) (store.HostCircuit, bool, error) {
	c := store.HostCircuit{Host: host}
	var retry pgtype.Timestamptz
	err := s.pool.QueryRow(ctx, `SELECT open, retry_at, updated_at FROM host_circuits WHERE host = $1`, host).
		Scan(&c.Open, &retry, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, mapErr(err)
	}
	c.RetryAt = tm(retry)
	return c, true, nil
}
