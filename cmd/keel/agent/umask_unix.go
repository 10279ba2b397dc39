//go:build unix

package agent

import "syscall"

// restrictUmask makes every file the process creates private to its user (see
// private.go); it returns the previous mask.
func restrictUmask() int { return syscall.Umask(0o077) }
