package wal

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"
)

// Errors of the log store.
var (
	// ErrCorrupt: a segment is damaged somewhere a crash cannot explain.
	ErrCorrupt = errors.New("wal: corrupt log")
	// ErrNotContiguous: StoreLogs got entries that do not follow the last one.
	ErrNotContiguous = errors.New("wal: entries do not follow the log")
	// ErrTooLarge: an entry does not fit in one record (MaxRecordBytes); nothing was
	// written.
	ErrTooLarge = errors.New("wal: entry too large")
	// ErrFailed: an earlier fdatasync or deletion failed; the store writes nothing more
	// until it is reopened.
	ErrFailed = errors.New("wal: log store failed")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("wal: closed")
)

const (
	firstFile = "first"
	segPrefix = "seg-"
	segSuffix = ".wal"
)

// segmentMaxSize: the tail rolls to a new segment past this size (a var for tests).
var segmentMaxSize int64 = 64 << 20

// Options configure a store. The zero value is the operating system's file system,
// no logger and no failure callback.
type Options struct {
	// FS is the file system the log lives on (default OSFS).
	FS FS
	// Logger reports what Open cut off and why the store failed.
	Logger hclog.Logger
	// OnFail is called once, in its own goroutine, when the store fails for good
	// (ErrFailed): the node must stop writing and step down.
	OnFail func(error)
	// OnSync, when set, is told how long each batch's fdatasync took (metrics); it is
	// called with the store's write lock held and must not block.
	OnSync func(time.Duration)
}

// segment is one file. Entries first..last (last < first when empty) live in it at
// offsets[i-first].
type segment struct {
	f       File
	path    string
	first   uint64
	offsets []int64 // record start of each entry
	size    int64   // end of the last good record; the file may hold more when dirty
}

func (s *segment) last() uint64 { return s.first + uint64(len(s.offsets)) - 1 }

// Store is a LogStore over a directory. Safe for concurrent use: GetLog runs
// concurrently with StoreLogs (reads of entries already stored never wait for an
// fsync in progress); truncations exclude everything.
type Store struct {
	dir  string
	fs   FS
	log  hclog.Logger
	opts Options

	writeMu sync.Mutex // serializes writers (StoreLogs, DeleteRange, Close)
	// Guarded by writeMu:
	buf []byte // encode buffer
	// failed is the error that made the store refuse writes (nil while healthy).
	failed error
	// tailCut: a suffix was deleted and nothing appended since (see StoreLogs).
	tailCut bool

	mu struct {
		sync.RWMutex
		segs   []*segment // in index order; the last one is appended to
		first  uint64     // logical first index (0: empty log)
		last   uint64
		closed bool
	}
}

// Open opens (creating if needed) the log in dir on the operating system's file
// system, recovering from a crash.
func Open(dir string) (*Store, error) { return OpenWith(dir, Options{}) }

// OpenWith opens the log in dir with opts.
func OpenWith(dir string, opts Options) (*Store, error) {
	if opts.FS == nil {
		opts.FS = OSFS{}
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	s := &Store{dir: dir, fs: opts.FS, log: opts.Logger, opts: opts}
	if err := s.fs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("wal: create %s: %w", dir, err)
	}
	if err := s.load(); err != nil {
		s.closeFilesLocked()
		return nil, err
	}
	return s, nil
}

// load reads every segment and the first file.
func (s *Store) load() error {
	names, err := s.segmentNames()
	if err != nil {
		return err
	}
	for i, name := range names {
		seg, err := s.openSegment(filepath.Join(s.dir, name), i == len(names)-1)
		if err != nil {
			return err
		}
		s.mu.segs = append(s.mu.segs, seg)
	}
	// Empty segments but the last are what a crash right after creating a segment
	// left, or a removal whose directory fsync a power loss undid. They hold nothing:
	// drop them, durably, before checking that the rest is contiguous.
	removed := false
	for i := 0; i < len(s.mu.segs)-1; {
		if g := s.mu.segs[i]; len(g.offsets) == 0 {
			g.f.Close()
			if err := s.fs.Remove(g.path); err != nil {
				return fmt.Errorf("wal: remove empty segment: %w", err)
			}
			s.mu.segs = slices.Delete(s.mu.segs, i, i+1)
			removed = true
			continue
		}
		i++
	}
	if removed {
		if err := s.fs.SyncDir(s.dir); err != nil {
			return fmt.Errorf("wal: %w", err)
		}
	}
	var prev *segment
	for _, g := range s.mu.segs {
		if len(g.offsets) == 0 {
			continue
		}
		if prev != nil && g.first != prev.last()+1 {
			return fmt.Errorf("%w: %s starts at index %d, previous segment %s ends at %d",
				ErrCorrupt, g.path, g.first, prev.path, prev.last())
		}
		prev = g
	}
	first, err := readFirst(s.fs, s.dir)
	if err != nil {
		return err
	}
	s.recomputeBounds(first)
	return nil
}

// recomputeBounds sets first/last from the segments and a logical first index.
func (s *Store) recomputeBounds(logicalFirst uint64) {
	s.mu.first, s.mu.last = 0, 0
	for _, g := range s.mu.segs {
		if len(g.offsets) == 0 {
			continue
		}
		if s.mu.first == 0 {
			s.mu.first = g.first
		}
		s.mu.last = g.last()
	}
	if s.mu.last == 0 {
		s.mu.first = 0
		return
	}
	s.mu.first = max(s.mu.first, logicalFirst)
	if s.mu.first > s.mu.last {
		s.mu.first, s.mu.last = 0, 0
	}
}

func (s *Store) segmentNames() ([]string, error) {
	all, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var names []string
	for _, n := range all {
		if strings.HasPrefix(n, segPrefix) && strings.HasSuffix(n, segSuffix) {
			names = append(names, n)
		}
	}
	slices.Sort(names) // zero-padded first indexes sort numerically
	return names, nil
}

func segmentName(first uint64) string { return fmt.Sprintf("%s%020d%s", segPrefix, first, segSuffix) }

// openSegment reads every record of path. Damage is cut off only when it is a suffix
// of the last segment (see the package doc); anything else is ErrCorrupt.
func (s *Store) openSegment(path string, last bool) (*segment, error) {
	base := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), segPrefix), segSuffix)
	first, err := strconv.ParseUint(base, 10, 64)
	if err != nil || first == 0 {
		return nil, fmt.Errorf("%w: bad segment name %s", ErrCorrupt, path)
	}
	f, err := s.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	data, err := readAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: read %s: %w", path, err)
	}
	seg := &segment{f: f, path: path, first: first}
	var lastTerm uint64
	off, problem := scanRecords(data, first, func(l *hraft.Log, at int64) {
		seg.offsets = append(seg.offsets, at)
		lastTerm = l.Term
	})
	seg.size = off
	if problem == "" {
		return seg, nil
	}
	next := first + uint64(len(seg.offsets))
	if !last {
		f.Close()
		return nil, fmt.Errorf("%w: %s at offset %d (index %d): %s", ErrCorrupt, path, off, next, problem)
	}
	if why := judgeDamage(data, off, next, lastTerm); why != "" {
		f.Close()
		return nil, fmt.Errorf("%w: %s at offset %d (index %d on, %d bytes): %s, and %s; entries up to %d are intact",
			ErrCorrupt, path, off, next, int64(len(data))-off, problem, why, next-1)
	}
	// What an interrupted batch left: never acknowledged, so cut it off, durably.
	s.log.Warn("cutting off the torn tail of the raft log", "file", path, "offset", off,
		"bytes", int64(len(data))-off, "cause", problem, "last_index", next-1)
	if err := f.Truncate(off); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: truncate torn tail of %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: sync %s: %w", path, err)
	}
	return seg, nil
}

// FirstIndex returns the first index stored, 0 for an empty log.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.first, nil
}

// LastIndex returns the last index stored, 0 for an empty log.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.last, nil
}

// GetLog reads the entry at index into out; hraft.ErrLogNotFound outside the log.
// Reads go on after the store failed (a leader hands over with them).
func (s *Store) GetLog(index uint64, out *hraft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return ErrClosed
	}
	if index == 0 || index < s.mu.first || index > s.mu.last {
		return hraft.ErrLogNotFound
	}
	i, _ := slices.BinarySearchFunc(s.mu.segs, index, func(g *segment, idx uint64) int {
		switch {
		case len(g.offsets) == 0:
			return 1 // only the tail can be empty, and it is after every entry
		case g.last() < idx:
			return -1
		case g.first > idx:
			return 1
		}
		return 0
	})
	if i == len(s.mu.segs) {
		return hraft.ErrLogNotFound
	}
	g := s.mu.segs[i]
	at := g.offsets[index-g.first]
	end := g.size
	if k := index - g.first + 1; k < uint64(len(g.offsets)) {
		end = g.offsets[k]
	}
	buf := make([]byte, end-at)
	if _, err := g.f.ReadAt(buf, at); err != nil {
		return fmt.Errorf("wal: read %s@%d: %w", g.path, at, err)
	}
	l, _, problem := decodeRecord(buf)
	if problem != "" {
		return fmt.Errorf("%w: %s@%d: %s on read", ErrCorrupt, g.path, at, problem)
	}
	if l.Index != index {
		return fmt.Errorf("%w: %s@%d: index %d where %d was expected", ErrCorrupt, g.path, at, l.Index, index)
	}
	*out = *l
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *hraft.Log) error { return s.StoreLogs([]*hraft.Log{l}) }

// StoreLogs appends entries, which must continue the log (any index when it is empty),
// with one write and one fdatasync; it returns once they are durable, and readers see
// them only then. Entries that start past the end (a user snapshot was restored in
// between) replace the log. An entry over MaxRecordBytes is refused with ErrTooLarge
// and nothing is written.
func (s *Store) StoreLogs(logs []*hraft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	b, err := s.writeLocked(logs)
	if err == nil {
		err = s.syncLocked(b)
	}
	if err == nil {
		s.publish(b)
	}
	return s.stored(err)
}

// StoreLogsAsync is StoreLogs in two steps, for a leader that sends a batch to its
// followers while it writes the batch to its own disk (hraft.AsyncLogStore, a
// keel patch of hashicorp/raft). It writes the batch to the file and returns with
// the entries readable (GetLog, LastIndex) but not yet durable; wait makes them
// durable with the fdatasync and must be called exactly once. Until then the store
// takes no other write (writeMu stays held), so, as for StoreLogs, a batch is
// durable before the next one is written. An error from StoreLogsAsync means what
// one from StoreLogs means; when wait fails, the store takes the entries back (GetLog
// no longer returns them, the file is cut) and fails for good, as for a failed
// fdatasync in StoreLogs: the entries may be durable on a follower, so their outcome
// is unknown.
func (s *Store) StoreLogsAsync(logs []*hraft.Log) (wait func() error, err error) {
	if len(logs) == 0 {
		return func() error { return nil }, nil
	}
	s.writeMu.Lock()
	b, err := s.writeLocked(logs)
	if err != nil {
		err = s.stored(err)
		s.writeMu.Unlock()
		return nil, err
	}
	s.publish(b)
	var once sync.Once
	return func() error {
		once.Do(func() {
			defer s.writeMu.Unlock()
			err = s.stored(s.syncLocked(b))
		})
		return err
	}, nil
}

// stored ends a StoreLogs or StoreLogsAsync with its result err. Called with writeMu
// held.
func (s *Store) stored(err error) error {
	switch {
	case err == nil:
		s.tailCut = false
	case s.tailCut && s.failed == nil && !errors.Is(err, ErrNotContiguous) && !errors.Is(err, ErrClosed):
		// hashicorp/raft deletes a follower's conflicting suffix and then appends; when
		// the append fails it keeps the deleted entries as its last log (a TODO in its
		// appendEntries) and the follower can never catch up. Only a restart, which
		// re-reads this log, makes the two agree again: fail for good.
		return s.fail(fmt.Errorf("%w (the append after a suffix was deleted failed: the raft library "+
			"still takes the deleted entries for its last log, a restart re-reads the log)", err))
	}
	return err
}

// batch is a batch written to the tail and not yet published to readers.
type batch struct {
	tail      *segment
	offsets   []int64 // record start of each entry
	size      int64   // bytes written
	first     uint64  // index of the first entry
	last      uint64  // index of the last entry
	published bool    // readers see it (publish)
	prevFirst uint64  // the log's bounds before publish
	prevLast  uint64
}

// writeLocked checks logs and writes them at the end of the tail, without syncing. On
// failure nothing of the batch stays behind (writeBatch). Called with writeMu held.
func (s *Store) writeLocked(logs []*hraft.Log) (*batch, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	for _, l := range logs {
		if recordSize(l)-recordHeader > MaxRecordBytes {
			return nil, fmt.Errorf("%w: entry %d is %d bytes, the limit is %d", ErrTooLarge, l.Index,
				len(l.Data)+len(l.Extensions), MaxRecordBytes-payloadFixed-trailerLen)
		}
	}
	s.mu.RLock()
	last := s.mu.last
	var tail *segment
	if n := len(s.mu.segs); n > 0 {
		tail = s.mu.segs[n-1]
	}
	s.mu.RUnlock()
	// The log restarts at logs[0] after a gap (hashicorp/raft restored a user snapshot
	// at last+1 without an entry there: everything before is covered by that snapshot,
	// as after a snapshot install) or when segments hold no live entry any more (the
	// logical first index passed them all).
	if (last != 0 && logs[0].Index > last+1) || (last == 0 && tail != nil && len(tail.offsets) > 0) {
		s.mu.Lock()
		err := s.deleteAllLocked()
		s.mu.Unlock()
		if err != nil {
			return nil, s.fail(err)
		}
		last, tail = 0, nil
	}
	base := last + 1
	if last == 0 {
		base = logs[0].Index // an empty log starts anywhere (after a snapshot install)
	}
	for i, l := range logs {
		if want := base + uint64(i); l.Index != want {
			return nil, fmt.Errorf("%w: entry %d, expected %d", ErrNotContiguous, l.Index, want)
		}
	}
	if tail == nil || tail.size >= segmentMaxSize || (len(tail.offsets) == 0 && tail.first != logs[0].Index) {
		var err error
		if tail, err = s.newSegment(logs[0].Index); err != nil {
			return nil, err
		}
	}
	s.buf = s.buf[:0]
	b := &batch{tail: tail, offsets: make([]int64, len(logs)), first: logs[0].Index, last: logs[len(logs)-1].Index}
	for i, l := range logs {
		b.offsets[i] = tail.size + int64(len(s.buf))
		s.buf = appendRecord(s.buf, l, i == len(logs)-1)
	}
	b.size = int64(len(s.buf))
	err := s.writeBatch(tail)
	if cap(s.buf) > 4<<20 {
		s.buf = nil // do not pin a huge batch's buffer
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// publish makes a written batch visible to readers.
func (s *Store) publish(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.published = true
	b.prevFirst, b.prevLast = s.mu.first, s.mu.last
	b.tail.offsets = append(b.tail.offsets, b.offsets...)
	b.tail.size += b.size
	if s.mu.first == 0 {
		s.mu.first = b.first
	}
	s.mu.last = b.last
}

// unpublish takes back a published batch whose fdatasync failed, so that readers no
// longer see it, before the file is cut. Called with writeMu held, with the batch the
// last thing written.
func (s *Store) unpublish(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.published = false
	b.tail.offsets = b.tail.offsets[:len(b.tail.offsets)-len(b.offsets)]
	b.tail.size -= b.size
	s.mu.first, s.mu.last = b.prevFirst, b.prevLast
}

// writeBatch writes s.buf at the end of tail. A failed write is cut back before the
// plain error is returned: the caller is told "not stored" only once that is certain.
// Called with writeMu held.
func (s *Store) writeBatch(tail *segment) error {
	if _, err := tail.f.WriteAt(s.buf, tail.size); err != nil {
		err = fmt.Errorf("wal: append to %s: %w", tail.path, err)
		if cerr := s.cutTo(tail, tail.size); cerr != nil {
			return s.fail(fmt.Errorf("%w; cutting what it left failed too, so it may come back: %w", err, cerr))
		}
		return err
	}
	return nil
}

// syncLocked fdatasyncs a written batch. A failed fdatasync takes a published batch
// back from readers and cuts it from the page cache — where a restart without a power
// loss would read it back as good ("fsyncgate") — and the store fails; whether that
// cut is durable is unknown, which is why it fails. Called with writeMu held.
func (s *Store) syncLocked(b *batch) error {
	start := time.Now()
	err := b.tail.f.Sync()
	if s.opts.OnSync != nil {
		s.opts.OnSync(time.Since(start))
	}
	if err != nil {
		err = fmt.Errorf("wal: sync %s: %w", b.tail.path, err)
		if b.published {
			s.unpublish(b)
		}
		if cerr := s.cutTo(b.tail, b.offsets[0]); cerr != nil {
			err = fmt.Errorf("%w (cutting the unsynced batch failed too: %v)", err, cerr)
		}
		return s.fail(err)
	}
	return nil
}

// writable checks that a write may start. Called with writeMu held.
func (s *Store) writable() error {
	s.mu.RLock()
	closed := s.mu.closed
	s.mu.RUnlock()
	switch {
	case closed:
		return ErrClosed
	case s.failed != nil:
		return fmt.Errorf("%w: %w", ErrFailed, s.failed)
	}
	return nil
}

// cutTo cuts tail back to size, the end of its last good record, durably: what a
// failed write left past it is gone from the file and the page cache. Called with
// writeMu held.
func (s *Store) cutTo(tail *segment, size int64) error {
	if err := tail.f.Truncate(size); err != nil {
		return fmt.Errorf("wal: cut %s back to %d bytes: %w", tail.path, size, err)
	}
	if err := tail.f.Sync(); err != nil {
		return fmt.Errorf("wal: sync %s: %w", tail.path, err)
	}
	return nil
}

// fail makes the store refuse every later write and reports err once. Called with
// writeMu held; returns err wrapped in ErrFailed.
func (s *Store) fail(err error) error {
	if s.failed == nil {
		s.failed = err
		s.log.Error("raft log store failed: refusing further writes until restarted", "error", err)
		if s.opts.OnFail != nil {
			go s.opts.OnFail(err)
		}
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// Failed returns the error that made the store refuse writes, or nil.
func (s *Store) Failed() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.failed
}

// newSegment creates the segment whose first entry will be first and makes it the
// tail; an empty tail it replaces is removed. One directory fsync covers both before
// anything is written to the new file. Called with writeMu held.
func (s *Store) newSegment(first uint64) (*segment, error) {
	path := filepath.Join(s.dir, segmentName(first))
	s.mu.Lock()
	defer s.mu.Unlock()
	// An empty tail is replaced (a log emptied by DeleteRange restarts elsewhere).
	if n := len(s.mu.segs); n > 0 && len(s.mu.segs[n-1].offsets) == 0 {
		old := s.mu.segs[n-1]
		old.f.Close()
		s.mu.segs = s.mu.segs[:n-1]
		if old.path != path {
			if err := s.fs.Remove(old.path); err != nil {
				return nil, s.fail(fmt.Errorf("wal: remove empty segment: %w", err))
			}
		}
	}
	f, err := s.fs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("wal: create segment: %w", err)
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		f.Close()
		s.fs.Remove(path)
		return nil, s.fail(fmt.Errorf("wal: %w", err))
	}
	g := &segment{f: f, path: path, first: first}
	s.mu.segs = append(s.mu.segs, g)
	return g, nil
}

// Close closes the files. Later calls fail with ErrClosed.
func (s *Store) Close() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	return s.closeFilesLocked()
}

func (s *Store) closeFilesLocked() error {
	var errs []error
	for _, g := range s.mu.segs {
		if err := g.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

var _ hraft.AsyncLogStore = (*Store)(nil)
