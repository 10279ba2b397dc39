package pebblelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	hraft "github.com/hashicorp/raft"
)

// Errors of the log store.
var (
	// ErrFailed: a write failed (an I/O or fsync error inside pebble). The store
	// refuses every later call; only a reopen, which replays what is on disk, clears it.
	ErrFailed = errors.New("pebblelog: store failed")
	// ErrNotContiguous: StoreLogs got entries that do not follow the last one.
	ErrNotContiguous = errors.New("pebblelog: entries do not follow the log")
	// ErrCorrupt: a stored entry does not decode, or its key and index disagree.
	ErrCorrupt = errors.New("pebblelog: corrupt entry")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("pebblelog: closed")
)

// Key space: entryPrefix + big-endian index. Other prefixes are free for later use.
const entryPrefix byte = 'e'

const keyLen = 9

// maxField bounds one decoded length: far above keel's largest command, and a
// garbled varint can never make the decoder allocate or slice past the value.
const maxField = 256 << 20

func entryKey(index uint64) []byte {
	k := make([]byte, keyLen)
	k[0] = entryPrefix
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

// keyspaceEnd is the exclusive upper bound of every entry key.
var keyspaceEnd = []byte{entryPrefix + 1}

func keyIndex(k []byte) (uint64, bool) {
	if len(k) != keyLen || k[0] != entryPrefix {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[1:]), true
}

// appendEntry encodes l as
//
//	version:uint8 index:uvarint term:uvarint type:uint8 appendedAt:varint
//	len(data):uvarint data len(extensions):uvarint extensions
//
// The index is in the key too; keeping it in the value lets a read check that the
// two agree.
func appendEntry(b []byte, l *hraft.Log) []byte {
	b = append(b, codecVersion)
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Extensions...)
	return b
}

const codecVersion byte = 1

// decodeEntry decodes v into out. Nothing in v is trusted: every varint and every
// length is checked against what is left. Data and Extensions alias v.
func decodeEntry(v []byte, out *hraft.Log) error {
	d := decoder{p: v}
	if ver := d.byte(); d.err == nil && ver != codecVersion {
		return fmt.Errorf("codec version %d", ver)
	}
	var l hraft.Log
	l.Index = d.uvarint()
	l.Term = d.uvarint()
	l.Type = hraft.LogType(d.byte())
	if at := d.varint(); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	l.Data = d.bytes()
	l.Extensions = d.bytes()
	if d.err != nil {
		return d.err
	}
	if len(d.p) != 0 {
		return fmt.Errorf("%d trailing bytes", len(d.p))
	}
	*out = l
	return nil
}

type decoder struct {
	p   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = errors.New(what)
	}
	d.p = nil
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.p) < 1 {
		d.fail("short value")
		return 0
	}
	c := d.p[0]
	d.p = d.p[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.p = d.p[n:]
	return x
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	x, n := binary.Varint(d.p)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.p = d.p[n:]
	return x
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > maxField || n > uint64(len(d.p)) {
		d.fail("field longer than value")
		return nil
	}
	if n == 0 {
		return nil
	}
	f := d.p[:n:n]
	d.p = d.p[n:]
	return f
}

// Option configures Open.
type Option func(*config)

type config struct {
	fs           vfs.FS
	memTableSize uint64
	cacheSize    int64
	logger       pebble.Logger
}

// WithFS runs the store on fs instead of the operating system's file system (tests
// pass vfs.NewCrashableMem() or an errorfs wrapper).
func WithFS(fs vfs.FS) Option { return func(c *config) { c.fs = fs } }

// WithMemTableSize sets pebble's memtable size (default 8 MiB).
func WithMemTableSize(n uint64) Option { return func(c *config) { c.memTableSize = n } }

// WithLogger sends pebble's informational and error messages to l (default: errors
// to the standard logger, the rest dropped). Its Fatalf is never called: the store
// handles pebble's fatal errors itself.
func WithLogger(l pebble.Logger) Option { return func(c *config) { c.logger = l } }

// Store is a hashicorp/raft LogStore on pebble. Safe for concurrent use; writers are
// serialized, reads run concurrently with a write and see entries only once the
// write that stored them is durable.
type Store struct {
	db *pebble.DB

	writeMu sync.Mutex // serializes StoreLogs, DeleteRange and Close

	mu struct {
		sync.RWMutex
		first, last uint64 // 0, 0: empty log
		closed      bool
		failed      error // set once a write failed; wraps ErrFailed
	}
	buf []byte // value buffer, guarded by writeMu
}

// fatal is what pebble's Logger.Fatalf panics with inside a store. Pebble calls
// Fatalf when a commit fails (a WAL write or fsync error, see the package doc) and,
// with its default logger, exits the process; the store turns the panic back into
// an error in the goroutine that committed.
type fatal struct{ msg string }

type storeLogger struct{ inner pebble.Logger }

func (l storeLogger) Infof(format string, args ...any) {
	if l.inner != nil {
		l.inner.Infof(format, args...)
	}
}

func (l storeLogger) Errorf(format string, args ...any) {
	if l.inner != nil {
		l.inner.Errorf(format, args...)
		return
	}
	log.Printf("pebblelog: "+format, args...)
}

func (l storeLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.Errorf("fatal: %s", msg)
	// Never return: pebble's code after Fatalf goes on as if the call had
	// succeeded (Apply returns nil after a failed fsync when Fatalf returns).
	panic(fatal{msg: msg})
}

// Open opens (creating if needed) the log in dir.
func Open(dir string, opts ...Option) (*Store, error) {
	cfg := config{fs: vfs.Default, memTableSize: 8 << 20, cacheSize: 8 << 20}
	for _, o := range opts {
		o(&cfg)
	}
	cache := pebble.NewCache(cfg.cacheSize)
	defer cache.Unref()
	po := &pebble.Options{
		FS:                 cfg.fs,
		Cache:              cache,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             storeLogger{inner: cfg.logger},
		// A Raft log is append-mostly and trimmed from the head: a small memtable
		// flushed often keeps memory flat; two of them let a flush run under writes.
		MemTableSize:                cfg.memTableSize,
		MemTableStopWritesThreshold: 4,
		// One background compaction: keel shares a small machine with the state
		// machine, and a log's compactions mostly drop range-deleted data.
		CompactionConcurrencyRange: func() (int, int) { return 1, 1 },
		// WAL on, every commit synced by its own caller (no group-commit delay).
		DisableWAL:         false,
		WALMinSyncInterval: func() time.Duration { return 0 },
	}
	// No compression work on the flush and compaction path: most of a Raft log is
	// deleted soon after it is written.
	po.ApplyCompressionSettings(func() pebble.DBCompressionSettings { return pebble.DBCompressionNone })
	po.EnsureDefaults()
	db, err := openDB(dir, po)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db}
	if err := s.loadBounds(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// openDB opens pebble, turning a fatal error during recovery into an error.
func openDB(dir string, po *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			db, err = nil, fmt.Errorf("%w: open: %s", ErrFailed, f.msg)
		}
	}()
	db, err = pebble.Open(dir, po)
	if err != nil {
		return nil, fmt.Errorf("pebblelog: open %s: %w", dir, err)
	}
	return db, nil
}

// loadBounds reads the first and last index with an iterator.
func (s *Store) loadBounds() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{entryPrefix}, UpperBound: keyspaceEnd})
	if err != nil {
		return fmt.Errorf("pebblelog: %w", err)
	}
	defer it.Close()
	var first, last uint64
	if it.First() {
		var ok bool
		if first, ok = keyIndex(it.Key()); !ok {
			return fmt.Errorf("%w: key %x", ErrCorrupt, it.Key())
		}
		if !it.Last() {
			return fmt.Errorf("pebblelog: iterator lost the last entry: %v", it.Error())
		}
		if last, ok = keyIndex(it.Key()); !ok {
			return fmt.Errorf("%w: key %x", ErrCorrupt, it.Key())
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("pebblelog: %w", err)
	}
	if first == 0 && last != 0 || first > last {
		return fmt.Errorf("%w: bounds [%d, %d]", ErrCorrupt, first, last)
	}
	s.mu.first, s.mu.last = first, last
	return nil
}

// FirstIndex returns the first index stored, 0 for an empty log.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return 0, err
	}
	return s.mu.first, nil
}

// LastIndex returns the last index stored, 0 for an empty log.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return 0, err
	}
	return s.mu.last, nil
}

// usableLocked: reads are refused after a failure too, because pebble applies a
// batch to its memtable before the WAL fsync's outcome is known, so entries of the
// failed write may be readable though they are not durable.
func (s *Store) usableLocked() error {
	if s.mu.closed {
		return ErrClosed
	}
	return s.mu.failed
}

// GetLog reads the entry at index into out; hraft.ErrLogNotFound outside the log.
func (s *Store) GetLog(index uint64, out *hraft.Log) error {
	s.mu.RLock()
	defer s.mu.RUnlock() // held across the read so Close cannot close the db under it
	if err := s.usableLocked(); err != nil {
		return err
	}
	if index == 0 || index < s.mu.first || index > s.mu.last {
		return hraft.ErrLogNotFound
	}
	v, closer, err := s.db.Get(entryKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("%w: entry %d missing inside [%d, %d]", ErrCorrupt, index, s.mu.first, s.mu.last)
	}
	if err != nil {
		return fmt.Errorf("pebblelog: get %d: %w", index, err)
	}
	own := make([]byte, len(v)) // v is only valid until closer.Close
	copy(own, v)
	closer.Close()
	if err := decodeEntry(own, out); err != nil {
		return fmt.Errorf("%w: entry %d: %v", ErrCorrupt, index, err)
	}
	if out.Index != index {
		return fmt.Errorf("%w: key %d holds entry %d", ErrCorrupt, index, out.Index)
	}
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *hraft.Log) error { return s.StoreLogs([]*hraft.Log{l}) }

// StoreLogs appends entries in one batch committed with pebble.Sync; it returns once
// they are durable. The entries must continue the log; an empty log starts anywhere;
// entries starting past last+1 (hashicorp/raft restored a user snapshot there)
// replace the log, in the same atomic batch.
func (s *Store) StoreLogs(logs []*hraft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.RLock()
	err := s.usableLocked()
	first, last := s.mu.first, s.mu.last
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	replace := last != 0 && logs[0].Index > last+1
	base := last + 1
	if last == 0 || replace {
		base = logs[0].Index
	}
	if base == 0 {
		return fmt.Errorf("%w: index 0", ErrNotContiguous)
	}
	for i, l := range logs {
		if want := base + uint64(i); l.Index != want || want < base {
			return fmt.Errorf("%w: entry %d, expected %d", ErrNotContiguous, l.Index, want)
		}
	}
	b := s.db.NewBatch()
	defer b.Close()
	if replace {
		if err := b.DeleteRange(entryKey(first), keyspaceEnd, nil); err != nil {
			return fmt.Errorf("pebblelog: %w", err)
		}
	}
	for _, l := range logs {
		s.buf = appendEntry(s.buf[:0], l)
		if err := b.Set(entryKey(l.Index), s.buf, nil); err != nil { // Set copies
			return fmt.Errorf("pebblelog: %w", err)
		}
	}
	if cap(s.buf) > 4<<20 {
		s.buf = nil // do not pin a huge entry's buffer
	}
	return s.commit(b, replace, func() {
		if s.mu.last == 0 || replace {
			s.mu.first = logs[0].Index
		}
		s.mu.last = logs[len(logs)-1].Index
	})
}

// commit commits b with a WAL fsync and then applies update to the bounds. Any
// failure — an error, or pebble's Fatalf on a failed WAL write or sync — marks the
// store failed instead: the write may or may not be on disk, and it is never retried
// as if it were safe.
//
// Pebble makes a batch visible to reads before its fsync returns. Appends are kept
// from readers by the bounds, which move only after the commit; a truncation's
// deletion would show through them, so exclusive commits (truncations) hold the lock
// across the fsync, as raft/wal's truncations do.
func (s *Store) commit(b *pebble.Batch, exclusive bool, update func()) error {
	if exclusive {
		s.mu.Lock()
	}
	err := commitSync(b)
	if !exclusive {
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("%w: %v", ErrFailed, err)
		s.mu.failed = err
		return err
	}
	update()
	return nil
}

// commitSync commits b with pebble.Sync, turning pebble's Fatalf into an error.
func commitSync(b *pebble.Batch) (err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = errors.New(f.msg)
		}
	}()
	return b.Commit(pebble.Sync)
}

// DeleteRange deletes entries lo..hi inclusive with one range deletion, synced.
// hashicorp/raft deletes a prefix (after a snapshot) or a suffix (a follower's
// conflicting entries); a range inside the log would leave a hole and is refused.
func (s *Store) DeleteRange(lo, hi uint64) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.RLock()
	err := s.usableLocked()
	first, last := s.mu.first, s.mu.last
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	if last == 0 || lo > hi || hi < first || lo > last {
		return nil
	}
	if lo > first && hi < last {
		return fmt.Errorf("pebblelog: DeleteRange(%d, %d) inside the log [%d, %d] is not supported", lo, hi, first, last)
	}
	start, end := entryKey(max(lo, first)), keyspaceEnd
	if hi < last {
		end = entryKey(hi + 1) // hi < last <= MaxUint64
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(start, end, nil); err != nil {
		return fmt.Errorf("pebblelog: %w", err)
	}
	return s.commit(b, true, func() {
		switch {
		case lo <= first && hi >= last:
			s.mu.first, s.mu.last = 0, 0
		case lo <= first:
			s.mu.first = hi + 1
		default:
			s.mu.last = lo - 1
		}
	})
}

// Close closes the store. Later calls fail with ErrClosed. After a failure Close
// still releases pebble's resources and returns pebble's error, if any.
func (s *Store) Close() (err error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%w: close: %s", ErrFailed, f.msg)
		}
	}()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("pebblelog: close: %w", err)
	}
	return nil
}

var (
	_ hraft.LogStore = (*Store)(nil)
	_ io.Closer      = (*Store)(nil)
)
