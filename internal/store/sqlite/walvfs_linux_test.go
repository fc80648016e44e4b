package sqlite

import (
	"bytes"
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
		walvfsFullChild(t, dir) // fails the child's run, which the parent reports
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestWALVFSFailedWriteFailsTheCommit$")
	cmd.Env = append(os.Environ(), "HOOKD_WALVFS_CHILD="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	c, err := zs.OpenConn(filepath.Join(dir, "h.db"), zs.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	checkRows(t, "after the failed commit", c, map[int64][]byte{1: []byte("before"), 3: []byte("after")})
}

func walvfsFullChild(t *testing.T, dir string) {
	w := newDirectT(t, dir)
	if err := commitRow(w, 1, []byte("before")); err != nil {
		t.Fatal(err)
	}

	// Writes past the limit fail with EFBIG instead of a SIGXFSZ.
	signal.Ignore(syscall.SIGXFSZ)
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &was); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "h.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: uint64(fi.Size()) + 4096, Max: was.Max}); err != nil {
		t.Fatal(err)
	}
	err = commitRow(w, 2, bytes.Repeat([]byte{2}, 256<<10))
	if rerr := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &was); rerr != nil {
		t.Fatal(rerr)
	}
	if err == nil {
		t.Fatal("a commit past the file-size limit succeeded")
	}
	if !w.AutocommitEnabled() {
		execDirect(w, "ROLLBACK")
	}
	if err := commitRow(w, 3, []byte("after")); err != nil {
		t.Fatal(err)
	}
}

// commitRow commits one row of t, rolling back on failure.
func commitRow(c *zs.Conn, id int64, b []byte) error {
	if _, err := execDirect(c, "BEGIN IMMEDIATE"); err != nil {
		return err
	}
	if err := insertRow(c, id, b); err != nil {
		execDirect(c, "ROLLBACK")
		return err
	}
	_, err := execDirect(c, "COMMIT")
	return err
}
