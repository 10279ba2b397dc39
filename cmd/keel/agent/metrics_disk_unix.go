//go:build unix

package agent

import "golang.org/x/sys/unix"

// freeBytes is the space of dir's file system available to this process.
func freeBytes(dir string) (uint64, error) {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return 0, err
	}
	return uint64(s.Bavail) * uint64(s.Bsize), nil
}
