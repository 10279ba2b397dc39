package wal

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// FaultFS is the operating system's file system with I/O errors injected on demand,
// for fault-injection runs against real processes (keel agent -test-log-faults): while
// the control file exists, the operations it names fail with EIO. Its content is a
// list of words:
//
//	write   WriteAt fails after writing the first half of the buffer (a torn write)
//	sync    File.Sync fails (a failed fdatasync)
//
// Nothing in a normal run uses it.
type FaultFS struct {
	OSFS
	// Control is the path of the control file.
	Control string
}

// faults reads the control file: which operations fail now.
func (f FaultFS) faults() (write, sync bool) {
	b, err := os.ReadFile(f.Control)
	if err != nil {
		return false, false
	}
	for _, w := range strings.Fields(string(b)) {
		switch w {
		case "write":
			write = true
		case "sync":
			sync = true
		}
	}
	return write, sync
}

// Create creates path with faults injected into its writes and syncs.
func (f FaultFS) Create(path string) (File, error) {
	file, err := f.OSFS.Create(path)
	if err != nil {
		return nil, err
	}
	return faultFile{File: file, fs: f}, nil
}

// Open opens path with faults injected into its writes and syncs.
func (f FaultFS) Open(path string) (File, error) {
	file, err := f.OSFS.Open(path)
	if err != nil {
		return nil, err
	}
	return faultFile{File: file, fs: f}, nil
}

type faultFile struct {
	File
	fs FaultFS
}

func (f faultFile) WriteAt(p []byte, off int64) (int, error) {
	if w, _ := f.fs.faults(); w {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, fmt.Errorf("injected: %w", syscall.EIO)
	}
	return f.File.WriteAt(p, off)
}

func (f faultFile) Sync() error {
	if _, s := f.fs.faults(); s {
		return fmt.Errorf("injected: %w", syscall.EIO)
	}
	return f.File.Sync()
}
