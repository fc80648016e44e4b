package sqlite

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"

	zs "zombiezen.com/go/sqlite"
)

// A commit whose gathered WAL frames cannot be written (the disk full, or
// here the file-size limit, which fails the write as a full disk would)
// fails, and SQLite publishes nothing of it: the connection goes on, and
// the files hold every commit before and after it and none of it. The
// limit is set in a child process, so it binds no other test.
func TestWALVFSFailedWriteFailsTheCommit(t *testing.T) {
	if dir := os.Getenv("HOOKD_WALVFS_CHILD"); dir != "" {
		if err := walvfsFullChild(dir); err != nil {
			fmt.Println("child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestWALVFSFailedWriteFailsTheCommit$")
	cmd.Env = append(os.Environ(), "HOOKD_WALVFS_CHILD="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	c, err := zs.OpenConn(filepath.Join(dir, "h.db"), zs.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkRows(t, "after the failed commit", c, map[int64][]byte{1: []byte("before"), 3: []byte("after")})
}

func walvfsFullChild(dir string) error {
	path := filepath.Join(dir, "h.db")
	c, err := zs.OpenConn(path, zs.OpenReadWrite, zs.OpenCreate, zs.OpenWAL)
	if err != nil {
		return err
	}
	c.Close()
	w, err := openDirect(path)
	if err != nil {
		return err
	}
	defer w.Close()
	if _, err := execDirect(w, "CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB NOT NULL)"); err != nil {
		return err
	}
	if err := insertRow(w, 1, []byte("before")); err != nil {
		return err
	}

	// Writes past the limit fail with EFBIG instead of a SIGXFSZ.
	signal.Ignore(syscall.SIGXFSZ)
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		return err
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		return err
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: uint64(fi.Size()) + 4096, Max: was.Max}); err != nil {
		return err
	}
	err = insertRow(w, 2, bytes.Repeat([]byte{2}, 256<<10))
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &was); rerr != nil {
		return rerr
	}
	if err == nil {
		return fmt.Errorf("a commit past the file-size limit succeeded")
	}
	if !w.AutocommitEnabled() {
		execDirect(w, "ROLLBACK")
	}
	return insertRow(w, 3, []byte("after"))
}

// insertRow commits one row of t.
func insertRow(c *zs.Conn, id int64, b []byte) error {
	if _, err := execDirect(c, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	st, err := c.Prepare("INSERT INTO t (id, b) VALUES (?, ?)")
	if err != nil {
		return err
	}
	st.BindInt64(1, id)
	st.BindBytes(2, b)
	_, err = st.Step()
	st.Reset()
	if err != nil {
		execDirect(c, "ROLLBACK")
		return err
	}
	_, err = execDirect(c, "COMMIT")
	return err
}
