package postgres

import (
	"context"
	"errors"
	"fmt"

	"hookd/internal/store"
)

func (s *Store) HealthPing(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", mapErr(err))
	}
	return nil
}

func (s *Store) HealthWrite(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO health_probe (id, at) VALUES (1, now())
		ON CONFLICT (id) DO UPDATE SET at = excluded.at`)
	if err != nil {
		return fmt.Errorf("postgres: probe write: %w", mapErr(err))
	}
	return nil
}

func (s *Store) HealthOutage(err error) error {
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrFull) {
		return err
	}
	if m := mapErr(err); errors.Is(m, store.ErrUnavailable) || errors.Is(m, store.ErrFull) {
		return m
	}
	return err
}
