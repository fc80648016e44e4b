package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"hookd/internal/store"
)

// ownerOnly creates the database file at path if it is missing, with mode
// 0600 whatever the umask, and takes group and other access away from it
// and its -wal and -shm (a release before this one made them 0644). SQLite
// creates the -wal and -shm with the database file's mode.
func ownerOnly(path string) error {
	if _, err := dsn(path, false); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil && fi.Mode().Perm() == 0o600 {
			continue
		}
		if err == nil {
			err = os.Chmod(p, 0o600)
		}
		if err != nil {
			return fmt.Errorf("sqlite: making %s readable by its owner only: %w", p, err)
		}
	}
	return nil
}

// resealBatch is how many subscriptions one SubscriptionReseal at Open
// looks at per transaction.
const resealBatch = 500

// resealAtOpen seals what a release before sealing stored in the clear:
// secrets, and credentials in URLs (moved to an Authorization header).
func (s *Store) resealAtOpen(ctx context.Context) error {
	p := store.ResealParams{Limit: resealBatch}
	for {
		res, err := s.SubscriptionReseal(ctx, p)
		if err != nil {
			return err
		}
		s.sealedAtOpen += res.Changed
		if res.Looked < p.Limit {
			return nil
		}
		p.After = res.Next
	}
}

// SealedAtOpen is how many subscriptions Open found with secrets (or URL
// credentials) in the clear, and sealed.
func (s *Store) SealedAtOpen() int { return s.sealedAtOpen }

// SubscriptionVacuum: see store.Store. VACUUM rebuilds the whole file;
// its scratch copy goes to a temporary file, not memory (temp_store).
func (s *Store) SubscriptionVacuum(ctx context.Context) error {
	if err := s.lockWriter(ctx); err != nil {
		return err
	}
	defer s.unlockWriter()
	if _, err := s.w.ExecContext(ctx, `PRAGMA temp_store = FILE`); err != nil {
		return fmt.Errorf("sqlite: vacuum: %w", err)
	}
	defer s.w.ExecContext(context.WithoutCancel(ctx), `PRAGMA temp_store = MEMORY`)
	if _, err := s.w.ExecContext(ctx, `VACUUM`); err != nil {
		return fmt.Errorf("sqlite: vacuum: %w", err)
	}
	var busy, frames, done int
	if err := s.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done); err != nil {
		return fmt.Errorf("sqlite: vacuum: checkpoint: %w", err)
	}
	if busy != 0 {
		return errors.New("sqlite: vacuum: the WAL could not be truncated: another process is reading the database (stop hookd serve first)")
	}
	return nil
}

// SubscriptionReseal: see store.Store. What it replaces is overwritten
// where SQLite frees it (secure_delete) and the WAL is truncated after, so
// few old copies linger; copies SQLite moved while rebalancing pages
// remain until SubscriptionVacuum.
func (s *Store) SubscriptionReseal(ctx context.Context, p store.ResealParams) (store.ResealResult, error) {
	mark := store.ResealMark(s.keys, p.All)
	limit := max(p.Limit, 1)
	var res store.ResealResult
	if _, err := s.w.ExecContext(ctx, `PRAGMA secure_delete = ON`); err != nil {
		return res, err
	}
	defer s.w.ExecContext(context.WithoutCancel(ctx), `PRAGMA secure_delete = OFF`)
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		res = store.ResealResult{Next: p.After}
		rows, err := tx.QueryContext(ctx, `SELECT id, url, secret, prev_secret, headers FROM subscriptions
			WHERE id > ?3 AND (substr(secret, 1, ?1) <> ?2 OR (prev_secret <> '' AND substr(prev_secret, 1, ?1) <> ?2)
				OR (headers <> '' AND substr(headers, 1, ?1) <> ?2) OR instr(url, '@') > 0)
			ORDER BY id LIMIT ?4`, len(mark), mark, p.After, limit)
		if err != nil {
			return err
		}
		var batch []store.ResealRow
		for rows.Next() {
			var r store.ResealRow
			if err := rows.Scan(&r.ID, &r.URL, &r.Secret, &r.PrevSecret, &r.Headers); err != nil {
				rows.Close()
				return err
			}
			batch = append(batch, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range batch {
			res.Looked++
			res.Next = r.ID
			out, changed, err := store.Reseal(s.keys, r, p.All)
			if err != nil {
				return err
			}
			if !changed {
				continue
			}
			// updated_at stays: what the row means is unchanged.
			if _, err := tx.ExecContext(ctx, `UPDATE subscriptions SET url = ?, secret = ?, prev_secret = ?, headers = ?
				WHERE id = ?`, out.URL, out.Secret, out.PrevSecret, out.Headers, out.ID); err != nil {
				return err
			}
			res.Changed++
		}
		return nil
	})
	if err != nil {
		return store.ResealResult{}, fmt.Errorf("sqlite: resealing subscriptions: %w", err)
	}
	if res.Changed > 0 {
		// Best effort: a reader of another process (a running node) may
		// keep the WAL from being truncated now; it is overwritten later.
		// It takes SQLite's write lock: the writers' turn.
		if s.lockWriter(ctx) == nil {
			s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
			s.unlockWriter()
		}
	}
	return res, nil
}
