//go:build !unix

package sqlite

import "os"

// LockNode takes no lock where flock(2) is missing: one node per SQLite
// file is then the operator's to keep.
func LockNode(path string) (*os.File, error) {
	_, err := dsn(path, false)
	return nil, err
}
