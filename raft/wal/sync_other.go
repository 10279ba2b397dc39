//go:build !linux

package wal

import (
	"os"
	"time"
)

func fdatasync(f *os.File) error { return f.Sync() }

// blockThread sleeps for d (FaultFS's slow disk); only Linux blocks the thread itself.
func blockThread(d time.Duration) { time.Sleep(d) }
