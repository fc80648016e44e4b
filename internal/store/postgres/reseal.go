package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"hookd/internal/store"
)

// resealBatch is how many subscriptions one SubscriptionReseal at Open
// looks at per transaction.
const resealBatch = 500

// resealAtOpen seals what a release before sealing stored in the clear:
// secrets, and credentials in URLs (moved to an Authorization header).
// Nodes starting together take turns on each row.
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

// SubscriptionVacuum: see store.Store. VACUUM FULL writes the table anew
// and drops its old files; PostgreSQL's WAL (and its archive) still hold
// what was written before.
func (s *Store) SubscriptionVacuum(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `VACUUM FULL subscriptions`); err != nil {
		return fmt.Errorf("postgres: vacuum full subscriptions: %w", err)
	}
	return nil
}

// SubscriptionReseal: see store.Store. The rows are locked as a change
// locks them (FOR NO KEY UPDATE), so a node's change to one waits for the
// batch, or the batch for it and then reads what it wrote. PostgreSQL
// keeps the replaced values in dead rows until VACUUM and in its WAL
// (docs/operations.md).
func (s *Store) SubscriptionReseal(ctx context.Context, p store.ResealParams) (store.ResealResult, error) {
	mark := store.ResealMark(s.keys, p.All)
	limit := max(p.Limit, 1)
	var res store.ResealResult
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		res = store.ResealResult{Next: p.After}
		rows, _ := tx.Query(ctx, `SELECT id, url, secret, prev_secret, headers FROM subscriptions
			WHERE id > $3 AND (left(secret, $1) <> $2 OR (prev_secret <> '' AND left(prev_secret, $1) <> $2)
				OR (headers <> '' AND left(headers, $1) <> $2) OR strpos(url, '@') > 0)
			ORDER BY id LIMIT $4 FOR NO KEY UPDATE`, len(mark), mark, p.After, limit)
		batch, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ResealRow, error) {
			var r store.ResealRow
			err := row.Scan(&r.ID, &r.URL, &r.Secret, &r.PrevSecret, &r.Headers)
			return r, err
		})
		if err != nil {
			return err
		}
		if s.resealRead != nil {
			s.resealRead()
		}
		b := &pgx.Batch{}
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
			// updated_at stays, and no node is told: what the row means is
			// unchanged (credentials in a URL become the Authorization
			// header it was sent with), and each node's reload brings it.
			b.Queue(`UPDATE subscriptions SET url = $2, secret = $3, prev_secret = $4, headers = $5 WHERE id = $1`,
				out.ID, out.URL, out.Secret, out.PrevSecret, out.Headers)
			res.Changed++
		}
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return store.ResealResult{}, fmt.Errorf("postgres: resealing subscriptions: %w", err)
	}
	return res, nil
}
