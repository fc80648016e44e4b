package postgres

import (
	"context"
	"embed"
	"fmt"
	"hookd/internal/store"
	"math"

	"github.com/jackc/pgx/v5"
)

// Migrations are numbered files, NNNN_name.sql, applied in order, each
// recorded in schema_migrations.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

func migrations() ([]store.Migration, error) {
	ms, err := store.Migrations(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return ms, nil
}

// migrate applies every migration not yet recorded, all in one transaction
// (DDL is transactional in PostgreSQL: a failed step leaves nothing behind).
// Running it again is a no-op, so every Open calls it.
func migrate(ctx context.Context, conn *pgx.Conn) error { return migrateTo(ctx, conn, math.MaxInt) }

// migrateTo applies the migrations up to version last (tests build old schemas with it).
func migrateTo(ctx context.Context, conn *pgx.Conn, last int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Nodes starting together queue here instead of racing on CREATE
		// TABLE; the lock is per schema so separate schemas migrate in
		// parallel, and it ends with the transaction.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('hookd.migrate.' || coalesce(current_schema(), '')))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return err
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		done := map[int]bool{}
		for _, v := range applied {
			done[v] = true
			if err := store.CheckNotNewer(ms, v); err != nil {
				return err
			}
		}
		for _, m := range ms {
			if done[m.Version] || m.Version > last {
				continue
			}
			// No arguments: pgx sends it as a simple query, which may
			// hold many statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
				return fmt.Errorf("%s: %w", m.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}
