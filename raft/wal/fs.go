package wal

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// FS is the file system the log lives on. The store reaches the disk only through it,
// so tests can put a file system under it that fails or forgets on demand (a crash, a
// failed write, a failed fdatasync) and chaos runs can inject I/O errors into a real
// node (FaultFS).
//
// Durability is explicit: File.Sync makes a file's data and size durable; SyncDir
// makes the creations, removals and renames of a directory's entries durable. Nothing
// else may be assumed to survive a power loss.
type FS interface {
	// MkdirAll creates dir and any missing parent, each durably (the parent of every
	// created directory is synced).
	MkdirAll(dir string) error
	// ReadDir lists the names in dir.
	ReadDir(dir string) ([]string, error)
	// Create creates or truncates path for reading and writing (mode 0600).
	Create(path string) (File, error)
	// Open opens an existing path for reading and writing.
	Open(path string) (File, error)
	Remove(path string) error
	Rename(oldpath, newpath string) error
	// SyncDir makes the entries of dir durable.
	SyncDir(dir string) error
}

// File is one open file of an FS.
type File interface {
	io.ReaderAt
	io.WriterAt
	// Truncate sets the size; it is durable only after Sync.
	Truncate(size int64) error
	// Sync makes the data and size durable (fdatasync). After a failed Sync nothing
	// written since the last successful one may be assumed durable, even if a later
	// Sync succeeds (the kernel may have dropped the dirty pages: "fsyncgate").
	Sync() error
	Size() (int64, error)
	Close() error
}

// OSFS is the operating system's file system.
type OSFS struct{}

var _ FS = OSFS{}

// MkdirAll creates dir and its missing parents and syncs the parent of each.
func (OSFS) MkdirAll(dir string) error {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, d := range missing {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// ReadDir lists the names in dir.
func (OSFS) ReadDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// Create creates or truncates path.
func (OSFS) Create(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Open opens an existing path.
func (OSFS) Open(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove removes path.
func (OSFS) Remove(path string) error { return os.Remove(path) }

// Rename renames oldpath to newpath (atomically replacing it).
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// SyncDir fsyncs the directory.
func (OSFS) SyncDir(dir string) error { return syncDir(dir) }

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

type osFile struct{ *os.File }

func (f osFile) Sync() error { return fdatasync(f.File) }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// readAll reads a whole file.
func readAll(f File) ([]byte, error) {
	n, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return b, nil
}
