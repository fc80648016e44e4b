package sqlite

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	zs "zombiezen.com/go/sqlite"
)

// Every commit of the direct writer is in the files when it returns, whole:
// a copy of the database and its WAL taken then (what a kill -9 leaves) and
// a reader on the unix VFS both see every row and byte of it. Commits range
// from one small row to several times the WAL VFS's 1 MiB buffer, so they
// flush in pieces. With synchronous = NORMAL no xSync follows a commit, so
// the commit frame's own write must flush.
func TestWALVFSLeavesEveryCommitInTheFiles(t *testing.T) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		t.Run(sync, func(t *testing.T) {
			dir := t.TempDir()
			w := newDirectT(t, dir, "PRAGMA synchronous = "+sync)
			live, err := zs.OpenConn(filepath.Join(dir, "h.db"), zs.OpenReadOnly)
			if err != nil {
				t.Fatal(err)
			}
			defer live.Close()

			want := map[int64][]byte{}
			id := int64(0)
			for commit, rows := range [][]int{{10}, {4096, 5000}, {256 << 10}, {256 << 10, 256 << 10, 256 << 10, 256 << 10, 256 << 10}, {1}, {100 << 10, 3}} {
				if _, err := execDirect(w, "BEGIN IMMEDIATE"); err != nil {
					t.Fatal(err)
				}
				for _, n := range rows {
					id++
					b := bytes.Repeat([]byte{byte(id), byte(commit)}, n/2+1)[:n]
					insertBlob(t, w, id, b)
					want[id] = b
				}
				if _, err := execDirect(w, "COMMIT"); err != nil {
					t.Fatal(err)
				}
				c := openCopy(t, dir, fmt.Sprintf("copy%d", commit))
				checkRows(t, fmt.Sprintf("commit %d, the files' copy", commit), c, want)
				c.Close()
				checkRows(t, fmt.Sprintf("commit %d, a live reader", commit), live, want)
			}
		})
	}
}

func insertBlob(t *testing.T, c *zs.Conn, id int64, b []byte) {
	t.Helper()
	if err := insertRow(c, id, b); err != nil {
		t.Fatal(err)
	}
}

// insertRow inserts one row of t.
func insertRow(c *zs.Conn, id int64, b []byte) error {
	st, err := c.Prepare("INSERT INTO t (id, b) VALUES (?, ?)")
	if err != nil {
		return err
	}
	defer st.Reset()
	st.BindInt64(1, id)
	st.BindBytes(2, b)
	_, err = st.Step()
	return err
}

func checkRows(t *testing.T, where string, c *zs.Conn, want map[int64][]byte) {
	t.Helper()
	var check string
	if _, err := queryRowDirect(c, "PRAGMA integrity_check", nil, func(st *zs.Stmt) { check = st.ColumnText(0) }); err != nil {
		t.Fatalf("%s: integrity_check: %v", where, err)
	}
	if check != "ok" {
		t.Fatalf("%s: integrity_check: %s", where, check)
	}
	st, err := c.Prepare("SELECT id, b FROM t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Reset()
	got := 0
	for {
		row, err := st.Step()
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if !row {
			break
		}
		id := st.ColumnInt64(0)
		b := make([]byte, st.ColumnLen(1))
		st.ColumnBytes(1, b)
		if !bytes.Equal(b, want[id]) {
			t.Fatalf("%s: row %d has %d bytes unlike the %d written", where, id, len(b), len(want[id]))
		}
		got++
	}
	if got != len(want) {
		t.Fatalf("%s: %d rows, want %d", where, got, len(want))
	}
}

// newDirectT opens the direct writer on a new database dir/h.db, runs
// pragmas on it and makes table t.
func newDirectT(t *testing.T, dir string, pragmas ...string) *zs.Conn {
	t.Helper()
	path := filepath.Join(dir, "h.db")
	c, err := zs.OpenConn(path, zs.OpenReadWrite, zs.OpenCreate, zs.OpenWAL)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	w, err := openDirect(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	for _, q := range append(pragmas, "CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)") {
		if _, err := execDirect(w, q); err != nil {
			t.Fatal(q, err)
		}
	}
	return w
}

// openDirectSmall is newDirectT with a page cache of 20 pages: a
// transaction of more would spill, if it could.
func openDirectSmall(t *testing.T, dir string) *zs.Conn {
	t.Helper()
	return newDirectT(t, dir, "PRAGMA cache_size = 20")
}

// openCopy copies dir's database and WAL, as they are now (what a kill -9
// leaves), to dir/name and opens the copy.
func openCopy(t *testing.T, dir, name string) *zs.Conn {
	t.Helper()
	copyDir := filepath.Join(dir, name)
	if err := os.Mkdir(copyDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"h.db", "h.db-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(copyDir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := zs.OpenConn(filepath.Join(copyDir, "h.db"), zs.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A rolled-back transaction larger than the page cache leaves nothing for
// the WAL VFS to write later: another connection's commits at the same
// WAL offsets, made meanwhile, stay whole. (With cache spills, its early
// frames stayed gathered and a later read by the direct writer wrote them
// over the other's: "file is not a database".)
func TestWALVFSRolledBackTransactionWritesNothingLater(t *testing.T) {
	dir := t.TempDir()
	w := openDirectSmall(t, dir)
	if _, err := execDirect(w, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := execDirect(w, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 200; id++ {
		insertBlob(t, w, id, bytes.Repeat([]byte{1}, 3000))
	}
	if _, err := execDirect(w, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}

	other, err := zs.OpenConn(filepath.Join(dir, "h.db"), zs.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	want := map[int64][]byte{}
	if _, err := execDirect(other, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 99; id++ {
		want[id] = bytes.Repeat([]byte{byte(id)}, 3000)
		insertBlob(t, other, id, want[id])
	}
	if _, err := execDirect(other, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	checkRows(t, "the direct writer, after the other's commit", w, want)
	checkRows(t, "the other connection", other, want)
}

// A transaction that rewrites pages it already wrote commits whole with
// synchronous = NORMAL: what a kill -9 leaves holds all of it. (With cache
// spills, SQLite rewrote the commit frame's header after the commit frame,
// and those 24 bytes stayed gathered: the copy held none of it.)
func TestWALVFSRewrittenPagesCommitWhole(t *testing.T) {
	dir := t.TempDir()
	w := openDirectSmall(t, dir)
	if _, err := execDirect(w, "PRAGMA synchronous = NORMAL"); err != nil {
		t.Fatal(err)
	}
	want := map[int64][]byte{}
	if _, err := execDirect(w, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 199; id++ {
		want[id] = bytes.Repeat([]byte{byte(id)}, 3000)
		insertBlob(t, w, id, want[id])
	}
	for _, id := range []int64{1, 2, 3} {
		want[id] = bytes.Repeat([]byte{0xee}, 3000)
		st, err := w.Prepare("UPDATE t SET b = ? WHERE id = ?")
		if err != nil {
			t.Fatal(err)
		}
		st.BindBytes(1, want[id])
		st.BindInt64(2, id)
		if _, err := st.Step(); err != nil {
			t.Fatal(err)
		}
		st.Reset()
	}
	if _, err := execDirect(w, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	c := openCopy(t, dir, "copy")
	defer c.Close()
	checkRows(t, "the files' copy", c, want)
}

// A FULL commit padded to a sector boundary (psow=0: copies of the commit
// frame, the last split at the sync) is in the WAL file whole when SQLite
// publishes it: another connection reads it, and checkpoints it into the
// database file, right after a WAL restart too, when the file still holds
// an older frame where the padding goes. (Found by a review: the tail
// after the sync stayed gathered, and the other connection copied a torn
// page into the database.)
func TestWALVFSPaddedCommitIsPublishedWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "h.db")
	c, err := zs.OpenConn(path, zs.OpenReadWrite, zs.OpenCreate, zs.OpenWAL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := execDirect(c, "CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := registerWALVFS(); err != nil {
		t.Fatal(err)
	}
	w, err := zs.OpenConn("file:"+path+"?vfs="+walVFSName+"&psow=0", zs.OpenReadWrite, zs.OpenWAL, zs.OpenURI)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, p := range []string{"PRAGMA synchronous = FULL", "PRAGMA cache_spill = OFF", "PRAGMA wal_autocheckpoint = 0"} {
		if _, err := execDirect(w, p); err != nil {
			t.Fatal(p, err)
		}
	}
	other, err := zs.OpenConn(path, zs.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	commit := func(id int64, want map[int64][]byte) {
		t.Helper()
		want[id] = bytes.Repeat([]byte{byte(id)}, 900)
		if _, err := execDirect(w, "BEGIN IMMEDIATE"); err != nil {
			t.Fatal(err)
		}
		insertBlob(t, w, id, want[id])
		if _, err := execDirect(w, "COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint := func(c *zs.Conn) {
		t.Helper()
		if _, err := execDirect(c, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int64][]byte{}
	for id := int64(1); id <= 20; id++ {
		commit(id, want)
		checkRows(t, fmt.Sprintf("commit %d, another connection", id), other, want)
	}
	checkpoint(w)
	checkpoint(other) // all copied back: the next commit restarts the WAL
	commit(21, want)
	checkRows(t, "after the restart, another connection", other, want)
	checkpoint(other)
	w.Close()
	c, err = zs.OpenConn(path, zs.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkRows(t, "reopened", c, want)
}
