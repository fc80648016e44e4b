package postgres

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"

	"hookd/internal/store"
)

// A notification's payload is "<token> <shard> <subscription ID>": the
// token names the Store instance that wrote it, so Listen can skip its own.
func (s *Store) payloads(ds []store.Due) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = s.token + " " + strconv.Itoa(d.Shard) + " " + d.SubscriptionID
	}
	return out
}

const notifySQL = `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`

// queueNotify adds the notifications for ds to b. PostgreSQL delivers them
// when (and only if) the transaction commits.
func (s *Store) queueNotify(b *pgx.Batch, ds []store.Due) {
	if len(ds) > 0 {
		b.Queue(notifySQL, s.channel, s.payloads(ds))
	}
}

// notify sends the notifications for ds inside tx.
func (s *Store) notify(ctx context.Context, tx pgx.Tx, ds ...store.Due) error {
	if len(ds) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, notifySQL, s.channel, s.payloads(ds))
	return err
}
