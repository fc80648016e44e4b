package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/store"
)

var _ store.CircuitBoard = (*Store)(nil)

func (s *Store) CircuitsPublish(ctx context.Context, cs []store.HostCircuit) error {
	if len(cs) == 0 {
		return nil
	}
	hosts, open, retry := make([]string, len(cs)), make([]bool, len(cs)), make([]int64, len(cs))
	for i, c := range cs {
		hosts[i], open[i], retry[i] = c.Host, c.Open, c.RetryIn.Microseconds()
	}
	// Hosts in order, so two nodes publishing one host at once cannot
	// deadlock; retry_at by this server's clock.
	_, err := s.pool.Exec(ctx, `INSERT INTO host_circuits (host, open, retry_at, updated_at)
		SELECT h, o, CASE WHEN o THEN now() + r * interval '1 microsecond' END, now()
		FROM unnest($1::text[], $2::bool[], $3::bigint[]) AS x(h, o, r) ORDER BY h
		ON CONFLICT (host) DO UPDATE SET open = EXCLUDED.open, retry_at = EXCLUDED.retry_at,
			updated_at = EXCLUDED.updated_at`, hosts, open, retry)
	return mapErr(err)
}

func (s *Store) CircuitGet(ctx context.Context, host string) (store.HostCircuit, bool, error) {
	c := store.HostCircuit{Host: host}
	var retryUs, ageUs int64
	err := s.pool.QueryRow(ctx, `SELECT open,
			coalesce((extract(epoch FROM retry_at - now()) * 1e6)::bigint, 0),
			(extract(epoch FROM now() - updated_at) * 1e6)::bigint
		FROM host_circuits WHERE host = $1`, host).Scan(&c.Open, &retryUs, &ageUs)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, false, nil
	}
	if err != nil {
		return c, false, mapErr(err)
	}
	c.RetryIn, c.Age = time.Duration(retryUs)*time.Microsecond, time.Duration(ageUs)*time.Microsecond
	return c, true, nil
}
