package wal

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data (and the metadata needed to read it back, like its size)
// without the timestamps fsync would also write.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
