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
// writes that need a new page then fail as on a full disk.
func (s *Store) LimitPages(ctx context.Context, n int64) (int64, error) {
	if err := s.lockWriter(ctx); err != nil {
		return 0, err
	}
	defer s.unlockWriter()
	q := fmt.Sprintf(`PRAGMA max_page_count = %d`, n)
	var got int64
	if err := s.w.QueryRowContext(ctx, q).Scan(&got); err != nil {
		return 0, fmt.Errorf("sqlite: max_page_count: %w", err)
	}
	if _, err := queryRowDirect(s.d, q, nil, func(st *zs.Stmt) { got = min(got, st.ColumnInt64(0)) }); err != nil {
		return 0, fmt.Errorf("sqlite: max_page_count: %w", err)
	}
	return got, nil
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
