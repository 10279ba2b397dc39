package wal

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
)

// memFS is an in-memory FS that knows what a power loss keeps: a file's data as of
// its last successful Sync, and the directory entries as of the last SyncDir. Writes,
// truncations, creations, removals and renames since then are volatile. crash builds
// the file system a reboot could find; faults are injected through fail.
//
// It models what the store relies on, no more: a Sync persists the file's whole data
// and size; directory operations persist in the order they were made (a journaling
// file system's metadata), so a power loss keeps a prefix of the pending ones.
type memFS struct {
	mu      sync.Mutex
	dirs    map[string]bool
	names   map[string]*inode // volatile directory entries, by path
	durable map[string]*inode // directory entries as a power loss finds them
	pending []dirOp           // directory operations not yet synced, in order
	ops     int               // operations so far (fault injection counts them)
	// fail, when set, is asked before each operation; an error fails it. For "write"
	// the first half of the buffer is written first (a torn write).
	fail func(op, path string, n int) error
}

type inode struct {
	data    []byte // what reads see
	durable []byte // what a power loss keeps
}

type dirOp struct {
	kind     string // create, remove, rename
	path, to string
	ino      *inode
}

var errCrashed = errors.New("memfs: crashed")

func newMemFS() *memFS {
	return &memFS{dirs: map[string]bool{}, names: map[string]*inode{}, durable: map[string]*inode{}}
}

// check runs the fault hook for one operation. Called with mu held.
func (m *memFS) check(op, path string) error {
	m.ops++
	if m.fail != nil {
		return m.fail(op, path, m.ops)
	}
	return nil
}

// crashAt makes every operation from the n-th on fail with errCrashed and do nothing:
// the process died there.
func (m *memFS) crashAt(n int) {
	m.fail = func(_, _ string, i int) error {
		if i >= n {
			return errCrashed
		}
		return nil
	}
}

// failOnce fails the first operation named op on a path containing sub.
func (m *memFS) failOnce(op, sub string, err error) {
	done := false
	m.fail = func(o, p string, _ int) error {
		if !done && o == op && bytes.Contains([]byte(p), []byte(sub)) {
			done = true
			return err
		}
		return nil
	}
}

// crash returns the file system after a power loss that kept the first keep pending
// directory operations (all of them when keep < 0) and, for each file whose volatile
// data extends its durable data, tail(path, base, extension) of the extension, which
// starts at offset base of the file.
func (m *memFS) crash(keep int, tail tailFunc) *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	if keep < 0 || keep > len(m.pending) {
		keep = len(m.pending)
	}
	names := map[string]*inode{}
	for p, ino := range m.durable {
		names[p] = ino
	}
	for _, op := range m.pending[:keep] {
		applyDirOp(names, op)
	}
	out := newMemFS()
	for d := range m.dirs {
		out.dirs[d] = true
	}
	copies := map[*inode]*inode{}
	for p, ino := range names {
		c, ok := copies[ino]
		if !ok {
			data := bytes.Clone(ino.durable)
			if tail != nil && len(ino.data) > len(ino.durable) && bytes.HasPrefix(ino.data, ino.durable) {
				data = append(data, tail(p, int64(len(ino.durable)), ino.data[len(ino.durable):])...)
			}
			c = &inode{data: data, durable: bytes.Clone(data)}
			copies[ino] = c
		}
		out.names[p] = c
		out.durable[p] = c
	}
	return out
}

// pendingOps is how many directory operations a power loss could still undo.
func (m *memFS) pendingOps() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.pending)
}

func applyDirOp(names map[string]*inode, op dirOp) {
	switch op.kind {
	case "create":
		names[op.path] = op.ino
	case "remove":
		delete(names, op.path)
	case "rename":
		if ino, ok := names[op.path]; ok {
			names[op.to] = ino
			delete(names, op.path)
		}
	}
}

// file returns a copy of path's current content (tests poke at it with setFile).
func (m *memFS) file(path string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ino := m.names[path]; ino != nil {
		return bytes.Clone(ino.data)
	}
	return nil
}

// setFile replaces path's content, durably (damage found on disk).
func (m *memFS) setFile(path string, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino := m.names[path]
	ino.data, ino.durable = bytes.Clone(b), bytes.Clone(b)
}

// list returns the names under dir, sorted.
func (m *memFS) list(dir string) []string {
	names, _ := m.ReadDir(dir)
	return names
}

func (m *memFS) MkdirAll(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("mkdir", dir); err != nil {
		return err
	}
	m.dirs[filepath.Clean(dir)] = true
	return nil
}

func (m *memFS) ReadDir(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("readdir", dir); err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	if !m.dirs[dir] {
		return nil, fs.ErrNotExist
	}
	var out []string
	for p := range m.names {
		if filepath.Dir(p) == dir {
			out = append(out, filepath.Base(p))
		}
	}
	slices.Sort(out)
	return out, nil
}

func (m *memFS) Create(path string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("create", path); err != nil {
		return nil, err
	}
	if !m.dirs[filepath.Dir(path)] {
		return nil, fs.ErrNotExist
	}
	if ino := m.names[path]; ino != nil {
		ino.data = nil // O_TRUNC of an existing file: the entry stays, the data goes
		return &memFile{fs: m, ino: ino, path: path}, nil
	}
	ino := &inode{}
	m.names[path] = ino
	m.pending = append(m.pending, dirOp{kind: "create", path: path, ino: ino})
	return &memFile{fs: m, ino: ino, path: path}, nil
}

func (m *memFS) Open(path string) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("open", path); err != nil {
		return nil, err
	}
	ino := m.names[path]
	if ino == nil {
		return nil, fmt.Errorf("open %s: %w", path, fs.ErrNotExist)
	}
	return &memFile{fs: m, ino: ino, path: path}, nil
}

func (m *memFS) Remove(path string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("remove", path); err != nil {
		return err
	}
	if m.names[path] == nil {
		return fmt.Errorf("remove %s: %w", path, fs.ErrNotExist)
	}
	delete(m.names, path)
	m.pending = append(m.pending, dirOp{kind: "remove", path: path})
	return nil
}

func (m *memFS) Rename(oldpath, newpath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("rename", oldpath); err != nil {
		return err
	}
	ino := m.names[oldpath]
	if ino == nil {
		return fmt.Errorf("rename %s: %w", oldpath, fs.ErrNotExist)
	}
	m.names[newpath] = ino
	delete(m.names, oldpath)
	m.pending = append(m.pending, dirOp{kind: "rename", path: oldpath, to: newpath})
	return nil
}

func (m *memFS) SyncDir(dir string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check("syncdir", dir); err != nil {
		return err
	}
	dir = filepath.Clean(dir)
	var rest []dirOp
	for _, op := range m.pending {
		if filepath.Dir(op.path) == dir {
			applyDirOp(m.durable, op)
		} else {
			rest = append(rest, op)
		}
	}
	m.pending = rest
	return nil
}

type memFile struct {
	fs     *memFS
	ino    *inode
	path   string
	closed bool
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.check("read", f.path); err != nil {
		return 0, err
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.closed {
		return 0, fs.ErrClosed
	}
	if err := f.fs.check("write", f.path); err != nil {
		if errors.Is(err, errCrashed) {
			return 0, err
		}
		n := f.write(p[:len(p)/2], off)
		return n, err
	}
	return f.write(p, off), nil
}

func (f *memFile) write(p []byte, off int64) int {
	if end := off + int64(len(p)); end > int64(len(f.ino.data)) {
		f.ino.data = append(f.ino.data, make([]byte, end-int64(len(f.ino.data)))...)
	}
	return copy(f.ino.data[off:], p)
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.check("truncate", f.path); err != nil {
		return err
	}
	if size <= int64(len(f.ino.data)) {
		f.ino.data = f.ino.data[:size:size]
	} else {
		f.ino.data = append(f.ino.data, make([]byte, size-int64(len(f.ino.data)))...)
	}
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.fs.check("sync", f.path); err != nil {
		return err
	}
	f.ino.durable = bytes.Clone(f.ino.data)
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	return int64(len(f.ino.data)), nil
}

func (f *memFile) Close() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.closed = true
	return nil
}

// tailFunc says what a power loss keeps of a file's unsynced extension, which starts
// at offset base.
type tailFunc func(path string, base int64, extension []byte) []byte

// Torn tails a power loss may leave of an unsynced extension.
var (
	tailNone tailFunc = func(string, int64, []byte) []byte { return nil }
	tailAll  tailFunc = func(_ string, _ int64, ext []byte) []byte { return ext }
)

// tailRandom is what a disk can leave of an unfinished write: the file ends anywhere
// in the extension, and each 512-byte sector of what is kept was written or reads as
// zeros (writeback goes out of order). Sectors are aligned to the file's offsets; the
// one shared with the durable part keeps that part.
func tailRandom(rng *rand.Rand) tailFunc {
	return func(_ string, base int64, ext []byte) []byte {
		keep := bytes.Clone(ext[:rng.IntN(len(ext)+1)])
		if rng.IntN(2) == 0 {
			return keep
		}
		for s := base / sectorSize * sectorSize; s < base+int64(len(keep)); s += sectorSize {
			if rng.IntN(3) == 0 {
				lo, hi := max(s, base)-base, min(s+sectorSize-base, int64(len(keep)))
				clear(keep[lo:hi])
			}
		}
		return keep
	}
}

var errEIO = fmt.Errorf("injected: %w", syscall.EIO)

// put creates path with content b, durably (a state found on disk).
func (m *memFS) put(path string, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ino := &inode{data: bytes.Clone(b), durable: bytes.Clone(b)}
	m.names[path] = ino
	m.durable[path] = ino
}

// exists tells whether path has a directory entry now.
func (m *memFS) exists(path string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.names[path] != nil
}
