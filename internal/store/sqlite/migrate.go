package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"hookd/internal/store"
	"math"
	"time"
)

// Migrations are numbered files, NNNN_name.sql, applied in order, each in its
// own transaction together with its row in schema_migrations.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

func migrations() ([]store.Migration, error) {
	ms, err := store.Migrations(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return ms, nil
}

// migrate applies every migration not yet recorded. Running it again is a
// no-op, so every Open can call it.
func migrate(ctx context.Context, db *sql.DB) error { return migrateTo(ctx, db, math.MaxInt) }

// migrateTo applies the migrations up to version last (tests build old schemas with it).
func migrateTo(ctx context.Context, db *sql.DB, last int) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	// What is recorded already is skipped without a write transaction: a
	// command opening the file beside a busy node (rekey, purge) would
	// otherwise wait for SQLite's write lock once per migration, each
	// wait bounded by the busy timeout. Migrations are applied in order,
	// so those recorded are every one up to the highest.
	var done int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&done); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	if err := store.CheckNotNewer(ms, done); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	for _, m := range ms {
		if m.Version > last {
			break
		}
		if m.Version <= done {
			continue
		}
		err := func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			// Checked inside the write transaction: two processes migrating
			// the same file at once cannot both apply a step.
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations WHERE version = ?`, m.Version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, time.Now().UnixNano()); err != nil {
				return err
			}
			return tx.Commit()
		}()
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: %w", m.Name, err)
		}
	}
	return nil
}
