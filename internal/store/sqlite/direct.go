package sqlite

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	zs "zombiezen.com/go/sqlite"

	"hookd/internal/store"
)

// The hot writes, every ingest batch and every result batch, go through a
// connection of zombiezen's direct API to the same modernc engine, not
// through database/sql: over the same statements that layer (its locks,
// argument conversion, the driver's per-statement interrupt goroutine and
// their garbage) cost about 30 % of the store's CPU per delivery
// (docs/bench.md). Every other write keeps database/sql's writer; the two
// writers take turns through Store.wlock, so neither meets SQLITE_BUSY.

// openDirect opens the direct writer on the database at path, which
// migrate has brought up to date, with the writer's pragmas.
func openDirect(path string) (*zs.Conn, error) {
	if err := registerWALVFS(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// psow=1 (SQLite's default here, pinned): a FULL commit is not padded
	// to a sector boundary with extra frames; the WAL VFS keeps those whole
	// too (TestWALVFSPaddedCommitIsPublishedWhole).
	uri := (&url.URL{Scheme: "file", Path: abs, RawQuery: "vfs=" + walVFSName + "&psow=1"}).String()
	c, err := zs.OpenConn(uri, zs.OpenReadWrite, zs.OpenWAL, zs.OpenURI)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	c.SetBusyTimeout(5e9)
	// cache_spill off: the WAL VFS may hold frames only of a commit being
	// made (walvfs.go). A spill wrote a transaction's frames early; rolled
	// back, they stayed gathered and were written later over frames the
	// other writer had committed meanwhile.
	for _, p := range []string{"PRAGMA synchronous = FULL", "PRAGMA foreign_keys = ON", "PRAGMA temp_store = MEMORY", "PRAGMA cache_spill = OFF"} {
		if _, err := execDirect(c, p); err != nil {
			c.Close()
			return nil, fmt.Errorf("sqlite: open %s: %s: %w", path, p, err)
		}
	}
	return c, nil
}

// lockWriter waits for the turn to write, or for ctx. A write goes ahead
// only while the database's path still names the file this store opened.
func (s *Store) lockWriter(ctx context.Context) error {
	if err := s.takeWriter(ctx); err != nil {
		return err
	}
	if err := s.stillAtPath(); err != nil {
		s.unlockWriter()
		return err
	}
	return nil
}

// takeWriter waits for the turn to write, or for ctx, whatever the path
// names (Close takes it so).
func (s *Store) takeWriter(ctx context.Context) error {
	select {
	case s.wlock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stillAtPath fails once the database file was removed or replaced under
// the open store: SQLite writes on into the open file, which no path
// reaches, and the next start opens whatever the path names. Every 202
// meanwhile was an event to be lost (a hostile pass: rm h.db under a
// node, events still accepted). One stat a write transaction.
func (s *Store) stillAtPath() error {
	if s.file == nil {
		return nil
	}
	fi, err := os.Stat(s.path)
	if err != nil || !os.SameFile(fi, s.file) {
		return fmt.Errorf("%w: sqlite: the database file %s was removed or replaced while this node had it open; "+
			"nothing is written to the open one, which no path reaches: put the file back, then restart", store.ErrUnavailable, s.path)
	}
	return nil
}

func (s *Store) unlockWriter() { <-s.wlock }

// directTx runs fn in one write transaction on the direct writer and
// commits it, unless ctx ended meanwhile. ctx does not interrupt a
// statement: the batches' statements are short, and zombiezen's interrupt
// costs two goroutine hand-offs a transaction on the writer's path.
func (s *Store) directTx(ctx context.Context, fn func(c *zs.Conn) error) error {
	if err := s.lockWriter(ctx); err != nil {
		return err
	}
	defer s.unlockWriter()
	if s.closed {
		return errClosed
	}
	c := s.d
	if !c.AutocommitEnabled() {
		// A ROLLBACK that failed left a transaction open; BEGIN would fail
		// for good.
		if _, err := execDirect(c, "ROLLBACK"); err != nil {
			return fmt.Errorf("%w: sqlite: rolling back what a failed write left: %w", store.ErrUnavailable, err)
		}
	}
	err := func() error {
		if _, err := execDirect(c, "BEGIN IMMEDIATE"); err != nil {
			return err
		}
		if err := fn(c); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		_, err := execDirect(c, "COMMIT")
		return err
	}()
	if err != nil {
		// SQLite may have rolled back already (a full disk, or a failed
		// COMMIT); ROLLBACK then says there is nothing to, which is no news.
		execDirect(c, "ROLLBACK")
	}
	return err
}

var errClosed = fmt.Errorf("%w: sqlite: the store is closed", store.ErrUnavailable)

// prepDirect returns c's statement for q, prepared once and cached by c.
func prepDirect(c *zs.Conn, q string, args []any) (*zs.Stmt, error) {
	st, err := c.Prepare(q)
	if err != nil {
		return nil, err
	}
	for i, a := range args {
		switch v := a.(type) {
		case string:
			st.BindText(i+1, v)
		case []byte:
			if v == nil { // as database/sql binds it
				st.BindNull(i + 1)
			} else {
				st.BindBytes(i+1, v)
			}
		case nil:
			st.BindNull(i + 1)
		case int:
			st.BindInt64(i+1, int64(v))
		case int64:
			st.BindInt64(i+1, v)
		case bool:
			st.BindBool(i+1, v)
		default:
			st.Reset()
			return nil, fmt.Errorf("sqlite: cannot bind %T", a)
		}
	}
	return st, nil
}

// execDirect runs q with args to its end and returns how many rows it
// changed.
func execDirect(c *zs.Conn, q string, args ...any) (int64, error) {
	st, err := prepDirect(c, q, args)
	if err != nil {
		return 0, err
	}
	defer st.Reset()
	for {
		row, err := st.Step()
		if err != nil {
			return 0, err
		}
		if !row {
			return int64(c.Changes()), nil
		}
	}
}

// queryRowDirect runs q with args and hands its first row, if any, to
// scan; it reports whether there was one.
func queryRowDirect(c *zs.Conn, q string, args []any, scan func(st *zs.Stmt)) (bool, error) {
	st, err := prepDirect(c, q, args)
	if err != nil {
		return false, err
	}
	defer st.Reset()
	row, err := st.Step()
	if err != nil || !row {
		return false, err
	}
	scan(st)
	// Run a RETURNING statement to its end, so all its rows are written.
	for row && err == nil {
		row, err = st.Step()
	}
	return true, err
}

// execRows runs m over rows of m.cols values each, flattened into args,
// as the fewest statements, and returns how many rows they changed.
func execRows(c *zs.Conn, m multiRow, args []any) (int64, error) {
	var changed int64
	for len(args) > 0 {
		n := len(args) / m.cols
		i := len(rowChunks) - 1
		for j, k := range rowChunks {
			if k <= n {
				i = j
				break
			}
		}
		k := rowChunks[i]
		rows, err := execDirect(c, m.sqls[i], args[:k*m.cols]...)
		if err != nil {
			return changed, err
		}
		changed += rows
		args = args[k*m.cols:]
	}
	return changed, nil
}
