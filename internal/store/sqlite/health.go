package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	zs "zombiezen.com/go/sqlite"

	"hookd/internal/core"
	"hookd/internal/store"
)

func (s *Store) HealthPing(ctx context.Context) error {
	// An idle node notices a removed file too, not only its next write.
	if err := s.stillAtPath(); err != nil {
		return err
	}
	var one int
	if err := s.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("sqlite: ping: %w", mapErr(err))
	}
	return nil
}

// probeFiller is the largest payload an event may carry: rewriting the
// row allocates its pages before it frees the old ones, so the probe
// commits only where the largest event would. A smaller one fitted in the
// free pages of a full file and said ready while events answered 507.
const probeFiller = core.MaxPayloadBytes

func (s *Store) HealthWrite(ctx context.Context) error {
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO health_probe (id, at, filler) VALUES (1, ?, zeroblob(?))
			ON CONFLICT (id) DO UPDATE SET at = excluded.at, filler = excluded.filler`,
			time.Now().UnixNano(), probeFiller)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: probe write: %w", mapErr(err))
	}
	return nil
}

// LimitPages caps the database at n pages (PRAGMA max_page_count, on both
// writer connections, until they close; SQLite never caps below the pages
// in use) and returns the cap in force. Tests fill the store with it:
// writes that need a new page then fail as on a full disk. Capping also
// drops the probe's row and takes up every free page (table limit_fill,
// dropped by the next LimitPages): a rewrite of the probe's row reuses the
// pages it frees, and free pages would take a write a full disk refuses,
// so an idle node's probe found a capped store writable once it had
// written its row before the cap.
func (s *Store) LimitPages(ctx context.Context, n int64) (int64, error) {
	if err := s.lockWriter(ctx); err != nil {
		return 0, err
	}
	defer s.unlockWriter()
	for _, q := range []string{`DELETE FROM health_probe`, `DROP TABLE IF EXISTS limit_fill`} {
		if _, err := s.w.ExecContext(ctx, q); err != nil {
			return 0, fmt.Errorf("sqlite: limit pages: %w", err)
		}
	}
	q := fmt.Sprintf(`PRAGMA max_page_count = %d`, n)
	var got int64
	if err := s.w.QueryRowContext(ctx, q).Scan(&got); err != nil {
		return 0, fmt.Errorf("sqlite: max_page_count: %w", err)
	}
	if _, err := queryRowDirect(s.d, q, nil, func(st *zs.Stmt) { got = min(got, st.ColumnInt64(0)) }); err != nil {
		return 0, fmt.Errorf("sqlite: max_page_count: %w", err)
	}
	var pages int64
	if err := s.w.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		return 0, fmt.Errorf("sqlite: page_count: %w", err)
	}
	if got > pages {
		return got, nil // room to grow: nothing to take up
	}
	// The table, then a page a row, until none is free (bounded: the cap
	// stops growth).
	for q := `CREATE TABLE limit_fill (b BLOB)`; ; q = `INSERT INTO limit_fill (b) VALUES (zeroblob(3000))` {
		_, err := s.w.ExecContext(ctx, q)
		if errors.Is(mapErr(err), store.ErrFull) {
			return got, nil
		}
		if err != nil {
			return 0, fmt.Errorf("sqlite: limit pages: %w", err)
		}
	}
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
