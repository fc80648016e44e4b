//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// LockNode takes the lock that makes a database one node's, for hookd
// serve: a second node on the same file would fan events out against its
// own stale list of subscriptions (accepting them with no deliveries) and
// deliver what the first one does. The lock is flock(2) on the database
// file, apart from SQLite's own (fcntl) locks, so hookd rekey and purge,
// which do not take it, still open the file beside a running node. The
// kernel drops it when the process ends, kill -9 included; Close releases
// it.
func LockNode(path string) (*os.File, error) {
	if _, err := dsn(path, false); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600) // made here if new, as Open would
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s to lock it: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("sqlite: %s is served by another hookd node; a SQLite database has one (use PostgreSQL for several nodes)", path)
		}
		return nil, fmt.Errorf("sqlite: lock %s: %w", path, err)
	}
	return f, nil
}
