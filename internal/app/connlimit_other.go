//go:build !unix

package app

// DefaultMaxConns: a bound with no file limit to read it from.
func DefaultMaxConns() int { return 4096 }
