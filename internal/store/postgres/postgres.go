// Package postgres is hookd's shared store: any number of hookd nodes use one
// PostgreSQL database, split the dispatch work by shard leases (Leaser) and
// hand new work to each other with LISTEN/NOTIFY (Notifier).
//
// Times are timestamptz: microsecond precision, returned in UTC; a NULL time
// column means the zero time.Time. The URL is a libpq-style postgres:// URL;
// parameters pgx does not know (search_path, application_name, ...) are set
// on every connection, so a deployment (or a test) can live in its own schema.
package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"hookd/internal/core"
	"hookd/internal/seal"
	"hookd/internal/store"
)

var (
	_ store.Store    = (*Store)(nil)
	_ store.Leaser   = (*Store)(nil)
	_ store.Notifier = (*Store)(nil)
)

// Store implements store.Store, store.Leaser and store.Notifier.
type Store struct {
	pool *pgxpool.Pool
	// token marks this instance's notifications, so Listen can skip them
	// (its own writes are handed off in-process).
	token string
	// channel is the NOTIFY channel, one per schema: deployments (and tests)
	// in different schemas of one database do not wake each other.
	channel string

	// onListen, when set (tests), is called each time Listen has a
	// connection listening, with that connection's backend PID.
	onListen func(pid uint32)
	// callerClock (tests) times leases by ShardLeases' now instead of the
	// database's clock, so a test can step time.
	callerClock bool
	// resealRead, when set (tests), runs in SubscriptionReseal between
	// reading a batch and writing it.
	resealRead func()

	keys         *seal.Keyring // seals and opens subscriptions' secrets and headers
	sealedAtOpen int           // subscriptions Open found in the clear (SealedAtOpen)

	stopKeeping context.CancelFunc // ends keepPartitions
	kept        chan struct{}      // closed when keepPartitions returns
}

// config parses url for the pool. Defaults hookd relies on are added only
// where the URL does not say otherwise.
func config(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	rp := cfg.ConnConfig.RuntimeParams
	// A nil error from a write means it is durable (the 202 promise), even
	// if the server default was relaxed.
	if _, ok := rp["synchronous_commit"]; !ok {
		rp["synchronous_commit"] = "on"
	}
	if _, ok := rp["application_name"]; !ok {
		rp["application_name"] = "hookd"
	}
	// pgx's default (max(4, NumCPU)) is tight for ingest, result writes,
	// dispatch reads and the API running at once.
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = int32(max(10, 4*runtime.GOMAXPROCS(0)))
	}
	return cfg, nil
}

// Open connects to the database at url and brings its schema up to date.
// Subscriptions' secrets and headers are sealed and opened with keys (every
// node needs the same); plaintext a release before sealing left is sealed
// here.
func Open(ctx context.Context, url string, keys *seal.Keyring) (*Store, error) {
	if keys == nil {
		return nil, errors.New("postgres: no keyring to seal secrets with")
	}
	cfg, err := config(url)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s, err := open(ctx, pool, keys)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

func open(ctx context.Context, pool *pgxpool.Pool, keys *seal.Keyring) (*Store, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Release()
	if err := migrate(ctx, conn.Conn()); err != nil {
		return nil, err
	}
	// One lease row per shard, so taking a shard is an UPDATE of an
	// existing row that FOR UPDATE SKIP LOCKED can lock.
	if _, err := conn.Exec(ctx, `INSERT INTO shard_leases (shard) SELECT generate_series(0, $1::int - 1)
		ON CONFLICT (shard) DO NOTHING`, core.NumShards); err != nil {
		return nil, fmt.Errorf("postgres: shard rows: %w", err)
	}
	var schema string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	var tok [8]byte
	rand.Read(tok[:])
	s := &Store{pool: pool, token: hex.EncodeToString(tok[:]), channel: channelFor(schema), keys: keys}
	if err := s.finishSkips(ctx); err != nil {
		return nil, fmt.Errorf("postgres: skipping what a crash left pending: %w", err)
	}
	if err := s.resealAtOpen(ctx); err != nil {
		return nil, fmt.Errorf("postgres: sealing secrets stored in the clear: %w", err)
	}
	if err := s.ensurePartitions(ctx, time.Now()); err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	s.stopKeeping, s.kept = cancel, make(chan struct{})
	go s.keepPartitions(kctx)
	return s, nil
}

// Migrate brings the schema of the database at url up to date.
func Migrate(ctx context.Context, url string) error {
	cfg, err := config(url)
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return migrate(ctx, conn)
}

func (s *Store) Close() error {
	s.stopKeeping()
	<-s.kept
	s.pool.Close()
	return nil
}

// channelFor names the NOTIFY channel of a schema. Channel names are
// identifiers (at most 63 bytes); a long schema name is hashed.
func channelFor(schema string) string {
	const base = "hookd_due"
	if schema == "" || schema == "public" {
		return base
	}
	if c := base + "_" + schema; len(c) <= 63 {
		return c
	}
	h := fnv.New64a()
	h.Write([]byte(schema))
	return fmt.Sprintf("%s_%016x", base, h.Sum64())
}

// maxTxTries bounds the retries of a transaction PostgreSQL aborted to break
// a deadlock or a serialization conflict between nodes; retrying is then
// the documented remedy, and every tx function here can simply run again.
const maxTxTries = 4

// inTx runs fn in one read-committed transaction and commits it; any error
// rolls everything back. fn must not keep results of a failed try.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	var err error
	for try := 1; ; try++ {
		err = pgx.BeginFunc(ctx, s.pool, fn)
		if try == maxTxTries || !retryable(err) || ctx.Err() != nil {
			return err
		}
	}
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001") // deadlock_detected, serialization_failure
}

// mapErr turns driver errors the interface names into store errors.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505": // unique_violation
			return fmt.Errorf("%w: %v", store.ErrConflict, err)
		case pe.Code == "53100": // disk_full
			return fmt.Errorf("%w: %w", store.ErrFull, err)
		case unavailableCode(pe.Code):
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	if unreachable(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// unavailableCode: the server refuses work for now, not this statement:
// connection exceptions (08), insufficient resources (53: too many
// connections, out of memory), shutting down or starting (57P01-57P03), a
// read-only standby after a failover (25006).
func unavailableCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", "25006":
		return true
	}
	return false
}

// unreachable: no answer from the server at all. The connection could
// not be made (refused, reset, DNS), was lost mid-call, or none came free
// in the pool within the deadline.
func unreachable(err error) bool {
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed)
}

// ts is a nullable time parameter: NULL for the zero time.
func ts(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// tm reads a nullable time column back: UTC, or the zero time for NULL.
func tm(v pgtype.Timestamptz) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return v.Time.UTC()
}

// orEmpty keeps a nil list from becoming a NULL array parameter where the
// SQL needs an empty one (x <> ALL(NULL) is never true).
func orEmpty[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}
