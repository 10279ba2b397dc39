package wal

import (
	"os"
	"syscall"
	"time"
)

// fdatasync flushes f's data (and the metadata needed to read it back, like its size)
// without the timestamps fsync would also write.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// blockThread holds the calling OS thread in the kernel for d, as a slow fdatasync
// does (FaultFS's slow disk).
func blockThread(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR { // the rest, after a signal
	}
}
