// Package sqlite is hookd's embedded store: one SQLite file in WAL mode with
// synchronous=FULL, so a nil error from a write means it is on disk.
//
// Times are stored as INTEGER unix nanoseconds (UTC), zero time as 0, and come
// back in UTC with nanosecond precision.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
	zs "zombiezen.com/go/sqlite"

	"hookd/internal/seal"
	"hookd/internal/store"
)

var _ store.Store = (*Store)(nil)

// Store implements store.Store. SQLite allows one writer at a time, so writes
// take turns in Go (wlock) instead of fighting over SQLITE_BUSY, and reads go
// through a pool that WAL lets run beside the writer. Ingest and result
// batches write through d (direct.go), everything else through w.
type Store struct {
	w      *sql.DB       // exactly one connection; BEGIN IMMEDIATE
	d      *zs.Conn      // the hot writes' connection
	wlock  chan struct{} // held by the one transaction writing, on w or d
	closed bool          // by Close, under wlock
	r      *sql.DB       // read-only pool

	stmts map[string]*sql.Stmt // hotReads, prepared once on r at Open

	rides riders // result batches waiting to be written (rides.go)

	keys         *seal.Keyring // seals and opens subscriptions' secrets and headers
	sealedAtOpen int           // subscriptions Open found in the clear (SealedAtOpen)

	path string      // the database file's path
	file os.FileInfo // what path named at Open: writes stop if it names another (stillAtPath)
}

// hotReads are the dispatcher's refill queries: parsing them cost as much
// as running them (0.71 of a refill's 1.70 s in a 10 s profile under heavy
// ingest).
var hotReads = []string{dueQuery, nextDueQuery, orderedDueQuery, keyHeadsQuery}

// rowChunks are the row counts a multi-row statement is prepared for; n rows
// go out as the fewest statements (10 = 8 + 2). One statement per row costs
// a round through database/sql and the VDBE set-up per row; a chunk pays it once.
var rowChunks = []int{32, 16, 8, 4, 2, 1}

// multiRow is a statement whose VALUES list repeats once per row, its text
// made once for each size in rowChunks (sqls[i] has rowChunks[i] rows).
type multiRow struct {
	cols int
	sqls []string
}

// newMultiRow builds head + n × row + tail, e.g. "INSERT INTO t (a, b) VALUES",
// "(?, ?)", "ON CONFLICT ...".
func newMultiRow(head, row, tail string, cols int) multiRow {
	m := multiRow{cols: cols}
	for _, k := range rowChunks {
		m.sqls = append(m.sqls, head+" "+strings.TrimSuffix(strings.Repeat(row+", ", k), ", ")+" "+tail)
	}
	return m
}

// pragmas are applied by the driver to every new pooled connection.
const pragmas = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(ON)&_pragma=temp_store(MEMORY)"

func dsn(path string, readOnly bool) (string, error) {
	// The driver cuts its parameters at the first '?', and "file:" would turn
	// the path into a URI; refuse both rather than open the wrong file.
	if path == "" || strings.ContainsRune(path, '?') || strings.HasPrefix(path, "file:") {
		return "", fmt.Errorf("sqlite: unsupported database path %q", path)
	}
	d := path + "?" + pragmas
	if readOnly {
		return d + "&_query_only=1", nil
	}
	// IMMEDIATE takes the write lock at BEGIN, so a transaction never fails
	// half-way on a lock upgrade.
	return d + "&_txlock=immediate", nil
}

func openWriter(ctx context.Context, path string) (*sql.DB, error) {
	d, err := dsn(path, false)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", d)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// SealedUnder names the key the first sealed secret of the database at path
// names, "" if it holds none (or no subscriptions yet): whether its missing
// key file may be made anew, or must be restored. The file must exist; it
// is only read.
func SealedUnder(ctx context.Context, path string) (string, error) {
	d, err := dsn(path, true)
	if err != nil {
		return "", err
	}
	db, err := sql.Open("sqlite", d)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'subscriptions'`).Scan(&tables); err != nil || tables == 0 {
		return "", err
	}
	var v string
	err = db.QueryRowContext(ctx, `SELECT secret FROM subscriptions WHERE substr(secret, 1, ?1) = ?2 LIMIT 1`,
		len(seal.Prefix), seal.Prefix).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	id, _ := seal.KeyOf(v)
	return id, err
}

// Open opens (creating if needed) the database file at path and brings its
// schema up to date. Subscriptions' secrets and headers are sealed and
// opened with keys; plaintext a release before sealing left is sealed here
// (resealAtOpen). The file, its -wal and -shm are made readable by their
// owner only.
func Open(ctx context.Context, path string, keys *seal.Keyring) (*Store, error) {
	if keys == nil {
		return nil, errors.New("sqlite: no keyring to seal secrets with")
	}
	if err := ownerOnly(path); err != nil {
		return nil, err
	}
	w, err := openWriter(ctx, path)
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, w); err != nil {
		w.Close()
		return nil, err
	}
	d, _ := dsn(path, true)
	r, err := sql.Open("sqlite", d)
	if err != nil {
		w.Close()
		return nil, err
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	dc, err := openDirect(path)
	if err != nil {
		w.Close()
		r.Close()
		return nil, err
	}
	file, err := os.Stat(path)
	if err != nil {
		w.Close()
		r.Close()
		dc.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	st := &Store{w: w, d: dc, wlock: make(chan struct{}, 1), r: r, stmts: map[string]*sql.Stmt{}, keys: keys, path: path, file: file}
	for _, q := range hotReads {
		p, err := r.PrepareContext(ctx, q)
		if err != nil {
			st.Close()
			return nil, fmt.Errorf("sqlite: prepare: %w", err)
		}
		st.stmts[q] = p
	}
	if err := st.finishFollowUps(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("sqlite: skipping what a crash left pending: %w", err)
	}
	if err := st.resealAtOpen(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("sqlite: sealing secrets stored in the clear: %w", err)
	}
	return st, nil
}

// Migrate brings the schema of the database at path up to date and closes it.
func Migrate(ctx context.Context, path string) error {
	if err := ownerOnly(path); err != nil {
		return err
	}
	w, err := openWriter(ctx, path)
	if err != nil {
		return err
	}
	defer w.Close()
	return migrate(ctx, w)
}

// Close waits for the write in progress, if any. A write after it fails
// (store.ErrUnavailable); the direct writer would use freed memory.
func (s *Store) Close() error {
	s.takeWriter(context.Background())
	defer s.unlockWriter()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, st := range s.stmts {
		st.Close()
	}
	return errors.Join(s.r.Close(), s.d.Close(), s.w.Close())
}

// writeTx runs fn in one write transaction on w and commits it; any error
// rolls everything back.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.lockWriter(ctx); err != nil {
		return err
	}
	defer s.unlockWriter()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// batch commits fn (nil: nothing of its own) on the direct writer with the
// result batches waiting to ride (rides.go), and tells each batch how it
// went; fn must be safe to run twice.
func (s *Store) batch(ctx context.Context, fn func(c *zs.Conn) error) error {
	rs := s.rides.take()
	if len(rs) == 0 {
		if fn == nil {
			return nil
		}
		return s.directTx(ctx, fn)
	}
	// The riders' work is not the carrier's: a carrier whose caller went
	// away must not fail them, nor they it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rideTimeout)
	defer cancel()
	if fn == nil {
		ctx = rctx
	}
	var rideErr error
	err := s.directTx(ctx, func(c *zs.Conn) error {
		for _, r := range rs {
			if rideErr = recordResults(c, r.rs); rideErr != nil {
				return rideErr
			}
		}
		if fn == nil {
			return nil
		}
		return fn(c)
	})
	if err == nil {
		done(rs, nil)
		return nil
	}
	// Keep them apart: each result batch alone, then fn again if it was
	// the results that failed.
	for _, r := range rs {
		done([]*ride{r}, s.directTx(rctx, func(c *zs.Conn) error { return recordResults(c, r.rs) }))
	}
	if fn != nil && rideErr != nil {
		return s.directTx(ctx, fn)
	}
	return err
}

// queryStrings runs a query of one text column in tx and returns its rows.
func queryStrings(ctx context.Context, db interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, q string, args ...any) ([]string, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// ns converts a time to stored form: unix nanoseconds, 0 for the zero time.
// Nanoseconds in an int64 reach from 1677 to 2262; a time past either end
// is stored as that end (UnixNano would wrap: 9999-12-31 came back as 1816,
// and a replay from then resent deliveries outside its window).
func ns(t time.Time) int64 {
	switch {
	case t.IsZero():
		return 0
	case t.Before(minNs):
		return math.MinInt64
	case t.After(maxNs):
		return math.MaxInt64
	}
	return t.UnixNano()
}

var minNs, maxNs = time.Unix(0, math.MinInt64), time.Unix(0, math.MaxInt64)

// tm is the inverse of ns.
func tm(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.Unix(0, v).UTC()
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// mapErr turns driver errors the interface names into store errors.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	// The two APIs' errors carry the same (extended) result codes.
	code := -1
	if se := (*sqlite.Error)(nil); errors.As(err, &se) {
		code = se.Code()
	} else if c := zs.ErrCode(err); c != zs.ResultError {
		code = int(c)
	}
	switch code {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w: %v", store.ErrConflict, err)
	}
	switch code & 0xff { // the primary code of an extended one
	case sqlite3.SQLITE_FULL:
		return fmt.Errorf("%w: %w", store.ErrFull, err)
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN:
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	if errors.Is(err, context.DeadlineExceeded) { // the writer did not come free in time
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}
