package postgres

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"hookd/internal/store"
)

// A notification's payload is "<token> <what>": the token names the Store
// instance that wrote it, so Listen can skip its own. <what> is
// "<shard> <subscription ID>" for due deliveries, "sub <subscription ID>"
// for a subscription change, "leases" for a change of shard shares and
// "key <key ID>" for a revoked API key.
func (s *Store) payloads(ds []store.Due) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		switch d.Kind {
		case store.DueSubscription:
			out[i] = s.token + " sub " + d.SubscriptionID
		case store.DueLeases:
			out[i] = s.token + " leases"
		case store.DueKeyRevoked:
			out[i] = s.token + " key " + d.KeyID
		default:
			out[i] = s.token + " " + strconv.Itoa(d.Shard) + " " + d.SubscriptionID
		}
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

func (s *Store) parse(payload string) (store.Due, bool) {
	tok, rest, ok := strings.Cut(payload, " ")
	if !ok || tok == s.token {
		return store.Due{}, false
	}
	if rest == "leases" {
		return store.Due{Kind: store.DueLeases}, true
	}
	if sub, ok := strings.CutPrefix(rest, "sub "); ok && sub != "" {
		return store.Due{Kind: store.DueSubscription, SubscriptionID: sub}, true
	}
	if key, ok := strings.CutPrefix(rest, "key "); ok && key != "" {
		return store.Due{Kind: store.DueKeyRevoked, KeyID: key}, true
	}
	shard, sub, ok := strings.Cut(rest, " ")
	n, err := strconv.Atoi(shard)
	if !ok || err != nil || sub == "" {
		return store.Due{}, false
	}
	return store.Due{SubscriptionID: sub, Shard: n}, true
}

const (
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 10 * time.Second
	// listenPing is how long a quiet connection waits before it is pinged:
	// a peer that vanished without a FIN is noticed within about this long
	// rather than after TCP keepalive gives up.
	listenPing = 30 * time.Second
)

// Listen holds one connection of its own, outside the pool, for as long as
// ctx lasts, so a LISTEN never takes (or waits for) a pooled connection.
// When the connection fails it reconnects with jittered, doubling backoff.
func (s *Store) Listen(ctx context.Context, fn func(store.Due)) error {
	backoff := listenMinBackoff
	for {
		if s.listenOnce(ctx, fn) {
			backoff = listenMinBackoff // it worked for a while: retry soon
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, listenMaxBackoff)
	}
}

// listenOnce connects, listens and passes notifications on until the
// connection fails or ctx ends. It reports whether it got as far as listening.
func (s *Store) listenOnce(ctx context.Context, fn func(store.Due)) bool {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return false
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return false
	}
	if s.onListen != nil {
		s.onListen(conn.PgConn().PID())
	}
	// What was sent before this LISTEN (or while reconnecting) is lost:
	// the caller catches up from the store.
	fn(store.Due{Kind: store.DueResumed})
	for {
		wctx, cancel := context.WithTimeout(ctx, listenPing)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			if d, ok := s.parse(n.Payload); ok {
				fn(d)
			}
		case ctx.Err() != nil:
			return true
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return true
			}
		default:
			return true
		}
	}
}
