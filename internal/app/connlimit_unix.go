//go:build unix

package app

import "syscall"

// DefaultMaxConns is half the files the process may open: the other half
// is for deliveries, the store and everything else.
func DefaultMaxConns() int {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur == 0 {
		return 4096
	}
	return int(max(64, min(l.Cur/2, 1<<20)))
}
