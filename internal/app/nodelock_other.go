//go:build !unix

package app

import "os"

// lockNode takes no lock where flock(2) is missing: one node per SQLite
// file is then the operator's to keep.
func lockNode(string) (*os.File, error) { return nil, nil }
