package sqlite

import "syscall"

// umask sets the process's umask and returns the previous one. Tests that
// call it must not run in parallel.
func umask(m int) int { return syscall.Umask(m) }
