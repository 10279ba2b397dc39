package wal

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// FaultFS is the operating system's file system with I/O errors injected on demand,
// for fault-injection runs against real processes (keel agent -test-log-faults): while
// the control file exists, the operations it names fail with EIO. Its content is a
// list of words:
//
//	write     WriteAt fails after writing the first half of the buffer (a torn write)
//	sync      File.Sync fails (a failed fdatasync)
//	slow=DUR  File.Sync takes DUR (a Go duration, as 2ms) longer: a slow disk
//
// A slow sync blocks its OS thread in the kernel for DUR before the real fdatasync, as
// a slow device's fdatasync does, rather than parking the goroutine on a Go timer:
// the scheduler then sees what it sees with a slow disk (the thread and its P held
// by a syscall), and the delay does not stretch when the process is busy, as a timer
// does (a 2 ms time.Sleep on a busy leader took 2.35-2.52 ms, a 2 ms nanosleep 2.08).
// A word it does not know, or a DUR it cannot parse, is ignored.
//
// Nothing in a normal run uses it.
type FaultFS struct {
	OSFS
	// Control is the path of the control file.
	Control string
}

// injected is what the control file asks for now.
type injected struct {
	write, sync bool          // fail WriteAt, fail Sync
	slow        time.Duration // added to every Sync
}

// faults reads the control file: which operations fail or slow down now.
func (f FaultFS) faults() injected {
	b, err := os.ReadFile(f.Control)
	if err != nil {
		return injected{}
	}
	return parseFaults(string(b))
}

// parseFaults reads the control file's words.
func parseFaults(words string) injected {
	var in injected
	for _, w := range strings.Fields(words) {
		switch {
		case w == "write":
			in.write = true
		case w == "sync":
			in.sync = true
		case strings.HasPrefix(w, "slow="):
			if d, err := time.ParseDuration(strings.TrimPrefix(w, "slow=")); err == nil && d > 0 {
				in.slow = d
			}
		}
	}
	return in
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
	if f.fs.faults().write {
		n, _ := f.File.WriteAt(p[:len(p)/2], off)
		return n, fmt.Errorf("injected: %w", syscall.EIO)
	}
	return f.File.WriteAt(p, off)
}

func (f faultFile) Sync() error {
	in := f.fs.faults()
	if in.sync {
		return fmt.Errorf("injected: %w", syscall.EIO)
	}
	if in.slow > 0 {
		blockThread(in.slow)
	}
	return f.File.Sync()
}
