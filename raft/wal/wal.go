// Package wal is keel's Raft log store: an append-only log in segment files with one
// write and one fdatasync per batch of entries, where raft-boltdb pays page writes
// and two fsyncs per batch. It implements hashicorp/raft's LogStore.
//
// Layout of a directory:
//
//	seg-<first index, 20 digits>.wal   segments, in index order; only the last is written
//	first                              the logical first index after a head truncation
//
// A segment is a sequence of records
//
//	length:uint32 crc32c(payload):uint32 payload
//	payload = index:uint64 term:uint64 type:uint8 appendedAt:int64 data:bytes extensions:bytes
//
// (little endian; bytes = uint32 length + content), with consecutive indexes. On Open
// every record is read and checked. A torn or garbled tail of the *last* segment is the
// batch a crash interrupted before its fsync returned — never acknowledged — and is cut
// off; damage anywhere else is corruption and Open refuses to start, naming the file
// and offset.
//
// The package must never acknowledge a write before it is on disk: StoreLogs returns
// only after fdatasync, and a truncation is durable before DeleteRange returns.
package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"
)

// Errors of the log store.
var (
	// ErrCorrupt: a segment is damaged somewhere a crash cannot explain.
	ErrCorrupt = errors.New("wal: corrupt log")
	// ErrNotContiguous: StoreLogs got entries that do not follow the last one.
	ErrNotContiguous = errors.New("wal: entries do not follow the log")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("wal: closed")
)

const (
	recordHeader = 8 // length + crc
	payloadFixed = 8 + 8 + 1 + 8 + 4 + 4
	maxRecord    = 256 << 20 // far above keel's largest command

	firstFile = "first"
	segPrefix = "seg-"
	segSuffix = ".wal"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// segmentMaxSize: the tail rolls to a new segment past this size (a var for tests).
var segmentMaxSize int64 = 64 << 20

// segment is one file. Entries first..last (last < first when empty) live in it at
// offsets[i-first].
type segment struct {
	f       *os.File
	path    string
	first   uint64
	offsets []int64 // record start of each entry
	size    int64
}

func (s *segment) last() uint64 { return s.first + uint64(len(s.offsets)) - 1 }

// Store is a LogStore over a directory. Safe for concurrent use: GetLog runs
// concurrently with StoreLogs (reads of entries already stored never wait for an
// fsync in progress); truncations exclude everything.
type Store struct {
	dir string

	writeMu sync.Mutex // serializes writers (StoreLogs, DeleteRange, Close)

	mu struct {
		sync.RWMutex
		segs   []*segment // in index order; the last one is appended to
		first  uint64     // logical first index (0: empty log)
		last   uint64
		closed bool
	}
	buf []byte // encode buffer, guarded by writeMu
}

// Open opens (creating if needed) the log in dir, recovering from a crash.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	s := &Store{dir: dir}
	names, err := segmentNames(dir)
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		seg, err := openSegment(filepath.Join(dir, name), i == len(names)-1)
		if err != nil {
			s.closeFiles()
			return nil, err
		}
		if n := len(s.mu.segs); n > 0 && len(seg.offsets) > 0 && seg.first != s.mu.segs[n-1].last()+1 {
			s.closeFiles()
			return nil, fmt.Errorf("%w: %s starts at index %d, previous segment ends at %d",
				ErrCorrupt, seg.path, seg.first, s.mu.segs[n-1].last())
		}
		s.mu.segs = append(s.mu.segs, seg)
	}
	// Drop empty segments but the last (a crash right after a roll leaves one).
	s.mu.segs = slices.DeleteFunc(s.mu.segs, func(g *segment) bool {
		if len(g.offsets) == 0 && g != s.mu.segs[len(s.mu.segs)-1] {
			g.f.Close()
			os.Remove(g.path)
			return true
		}
		return false
	})
	first, err := readFirst(dir)
	if err != nil {
		s.closeFiles()
		return nil, err
	}
	s.recomputeBounds(first)
	return s, nil
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

func segmentNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), segPrefix) && strings.HasSuffix(e.Name(), segSuffix) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names) // zero-padded first indexes sort numerically
	return names, nil
}

func segmentName(first uint64) string { return fmt.Sprintf("%s%020d%s", segPrefix, first, segSuffix) }

// openSegment reads every record of path. In the last segment a damaged tail is cut
// off (the file is truncated); elsewhere it is ErrCorrupt.
func openSegment(path string, last bool) (*segment, error) {
	base := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), segPrefix), segSuffix)
	first, err := strconv.ParseUint(base, 10, 64)
	if err != nil || first == 0 {
		return nil, fmt.Errorf("%w: bad segment name %s", ErrCorrupt, path)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wal: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: read %s: %w", path, err)
	}
	seg := &segment{f: f, path: path, first: first}
	off, problem := scanRecords(data, first, func(_ uint64, at int64) { seg.offsets = append(seg.offsets, at) })
	if problem != "" {
		if !last {
			f.Close()
			return nil, fmt.Errorf("%w: %s at offset %d: %s", ErrCorrupt, path, off, problem)
		}
		// The batch a crash interrupted: never acknowledged, so cut it off.
		if err := f.Truncate(off); err != nil {
			f.Close()
			return nil, fmt.Errorf("wal: truncate torn tail of %s: %w", path, err)
		}
		if err := fdatasync(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("wal: sync %s: %w", path, err)
		}
	}
	seg.size = off
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("wal: %w", err)
	}
	return seg, nil
}

// scanRecords walks the records of data, whose first entry must be index first, and
// calls fn for each good one. It returns the offset after the last good record and,
// when it stopped early, why.
func scanRecords(data []byte, first uint64, fn func(index uint64, at int64)) (int64, string) {
	off := 0
	next := first
	for off < len(data) {
		if len(data)-off < recordHeader {
			return int64(off), "truncated record header"
		}
		n := int(binary.LittleEndian.Uint32(data[off:]))
		sum := binary.LittleEndian.Uint32(data[off+4:])
		if n < payloadFixed || n > maxRecord || n > len(data)-off-recordHeader {
			return int64(off), fmt.Sprintf("record length %d", n)
		}
		payload := data[off+recordHeader : off+recordHeader+n]
		if crc32.Checksum(payload, castagnoli) != sum {
			return int64(off), "checksum mismatch"
		}
		l, err := decodePayload(payload)
		if err != nil {
			return int64(off), err.Error()
		}
		if l.Index != next {
			return int64(off), fmt.Sprintf("index %d where %d was expected", l.Index, next)
		}
		fn(l.Index, int64(off))
		next++
		off += recordHeader + n
	}
	return int64(off), ""
}

func appendRecord(b []byte, l *hraft.Log) []byte {
	start := len(b)
	b = append(b, make([]byte, recordHeader)...)
	b = binary.LittleEndian.AppendUint64(b, l.Index)
	b = binary.LittleEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(at))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l.Extensions)))
	b = append(b, l.Extensions...)
	payload := b[start+recordHeader:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

// decodePayload decodes one record payload; the byte slices alias p.
func decodePayload(p []byte) (*hraft.Log, error) {
	if len(p) < payloadFixed {
		return nil, errors.New("short payload")
	}
	l := &hraft.Log{Index: binary.LittleEndian.Uint64(p), Term: binary.LittleEndian.Uint64(p[8:]),
		Type: hraft.LogType(p[16])}
	if at := int64(binary.LittleEndian.Uint64(p[17:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	rest := p[25:]
	var err error
	if l.Data, rest, err = cutBytes(rest); err != nil {
		return nil, err
	}
	if l.Extensions, rest, err = cutBytes(rest); err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, errors.New("trailing bytes in record")
	}
	return l, nil
}

func cutBytes(p []byte) (field, rest []byte, err error) {
	if len(p) < 4 {
		return nil, nil, errors.New("short length")
	}
	n := binary.LittleEndian.Uint32(p)
	if uint64(n) > uint64(len(p)-4) {
		return nil, nil, errors.New("field longer than record")
	}
	if n == 0 {
		return nil, p[4:], nil
	}
	return p[4 : 4+n : 4+n], p[4+n:], nil
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
	var head [recordHeader]byte
	if _, err := g.f.ReadAt(head[:], at); err != nil {
		return fmt.Errorf("wal: read %s@%d: %w", g.path, at, err)
	}
	n := binary.LittleEndian.Uint32(head[:])
	payload := make([]byte, n)
	if _, err := g.f.ReadAt(payload, at+recordHeader); err != nil {
		return fmt.Errorf("wal: read %s@%d: %w", g.path, at, err)
	}
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(head[4:]) {
		return fmt.Errorf("%w: %s@%d: checksum mismatch on read", ErrCorrupt, g.path, at)
	}
	l, err := decodePayload(payload)
	if err != nil {
		return fmt.Errorf("%w: %s@%d: %v", ErrCorrupt, g.path, at, err)
	}
	*out = *l
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *hraft.Log) error { return s.StoreLogs([]*hraft.Log{l}) }

// StoreLogs appends entries, which must continue the log (any index when it is empty),
// with one write and one fdatasync; it returns once they are durable. Entries that
// start past the end (a user snapshot was restored in between) replace the log.
func (s *Store) StoreLogs(logs []*hraft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.RLock()
	closed, last := s.mu.closed, s.mu.last
	var tail *segment
	if n := len(s.mu.segs); n > 0 {
		tail = s.mu.segs[n-1]
	}
	s.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	// The log restarts at logs[0] after a gap (hashicorp/raft restored a user snapshot
	// at last+1 without an entry there: everything before is covered by that snapshot,
	// as after a snapshot install) or when segments hold no live entry any more (the
	// logical first index passed them all).
	if (last != 0 && logs[0].Index > last+1) || (last == 0 && tail != nil && len(tail.offsets) > 0) {
		s.mu.Lock()
		err := s.deleteAllLocked()
		s.mu.Unlock()
		if err != nil {
			return err
		}
		last, tail = 0, nil
	}
	base := last + 1
	if last == 0 {
		base = logs[0].Index // an empty log starts anywhere (after a snapshot install)
	}
	for i, l := range logs {
		if want := base + uint64(i); l.Index != want {
			return fmt.Errorf("%w: entry %d, expected %d", ErrNotContiguous, l.Index, want)
		}
	}
	if tail == nil || tail.size >= segmentMaxSize || (len(tail.offsets) == 0 && tail.first != logs[0].Index) {
		var err error
		if tail, err = s.newSegment(logs[0].Index); err != nil {
			return err
		}
	}
	s.buf = s.buf[:0]
	offsets := make([]int64, len(logs))
	for i, l := range logs {
		offsets[i] = tail.size + int64(len(s.buf))
		s.buf = appendRecord(s.buf, l)
	}
	if _, err := tail.f.WriteAt(s.buf, tail.size); err != nil {
		return fmt.Errorf("wal: append to %s: %w", tail.path, err)
	}
	if err := fdatasync(tail.f); err != nil {
		return fmt.Errorf("wal: sync %s: %w", tail.path, err)
	}
	s.mu.Lock()
	tail.offsets = append(tail.offsets, offsets...)
	tail.size += int64(len(s.buf))
	if s.mu.first == 0 {
		s.mu.first = logs[0].Index
	}
	s.mu.last = logs[len(logs)-1].Index
	s.mu.Unlock()
	if cap(s.buf) > 4<<20 {
		s.buf = nil // do not pin a huge batch's buffer
	}
	return nil
}

// newSegment creates the segment whose first entry will be first and makes it the
// tail. Called with writeMu held.
func (s *Store) newSegment(first uint64) (*segment, error) {
	path := filepath.Join(s.dir, segmentName(first))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("wal: create segment: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		f.Close()
		return nil, err
	}
	g := &segment{f: f, path: path, first: first}
	s.mu.Lock()
	// An empty tail is replaced (a log emptied by DeleteRange restarts elsewhere).
	if n := len(s.mu.segs); n > 0 && len(s.mu.segs[n-1].offsets) == 0 {
		old := s.mu.segs[n-1]
		old.f.Close()
		if old.path != path {
			os.Remove(old.path)
		}
		s.mu.segs = s.mu.segs[:n-1]
	}
	s.mu.segs = append(s.mu.segs, g)
	s.mu.Unlock()
	return g, nil
}

// DeleteRange deletes entries min..max inclusive. hashicorp/raft deletes either a
// prefix (after a snapshot) or a suffix (a follower's conflicting entries); a range
// in the middle is refused.
func (s *Store) DeleteRange(min, max uint64) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return ErrClosed
	}
	first, last := s.mu.first, s.mu.last
	switch {
	case last == 0 || min > max || max < first || min > last:
		return nil
	case min <= first && max >= last:
		return s.deleteAllLocked()
	case min <= first:
		return s.deleteHeadLocked(max)
	case max >= last:
		return s.deleteTailLocked(min)
	}
	return fmt.Errorf("wal: DeleteRange(%d, %d) inside the log [%d, %d] is not supported", min, max, first, last)
}

// deleteAllLocked removes every segment; the next StoreLogs starts a new one. The
// logical first index is reset first and segments go oldest first, so a crash midway
// leaves a consistent suffix of the old log (as if the deletion had not happened yet).
func (s *Store) deleteAllLocked() error {
	if err := writeFirst(s.dir, 0); err != nil {
		return err
	}
	for len(s.mu.segs) > 0 {
		g := s.mu.segs[0]
		g.f.Close()
		if err := os.Remove(g.path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("wal: %w", err)
		}
		s.mu.segs = s.mu.segs[1:]
	}
	s.mu.segs = nil
	s.mu.first, s.mu.last = 0, 0
	return syncDir(s.dir)
}

// deleteHeadLocked makes max+1 the first index: whole segments below it go, and the
// logical first index is persisted before any file is removed.
func (s *Store) deleteHeadLocked(max uint64) error {
	if err := writeFirst(s.dir, max+1); err != nil {
		return err
	}
	s.mu.first = max + 1
	keep := s.mu.segs[:0]
	for i, g := range s.mu.segs {
		if i < len(s.mu.segs)-1 && len(g.offsets) > 0 && g.last() <= max {
			g.f.Close()
			if err := os.Remove(g.path); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("wal: %w", err)
			}
			continue
		}
		keep = append(keep, g)
	}
	s.mu.segs = keep
	return syncDir(s.dir)
}

// deleteTailLocked removes min..last: segments starting at or after min are removed
// (durably, newest first) before the segment holding min is cut at min's record, so a
// crash midway never leaves a hole between segments.
func (s *Store) deleteTailLocked(min uint64) error {
	removed := false
	for n := len(s.mu.segs); n > 0; n = len(s.mu.segs) {
		g := s.mu.segs[n-1]
		if len(g.offsets) > 0 && g.first < min {
			break
		}
		g.f.Close()
		if err := os.Remove(g.path); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("wal: %w", err)
		}
		s.mu.segs = s.mu.segs[:n-1]
		removed = true
	}
	if removed {
		if err := syncDir(s.dir); err != nil {
			return err
		}
	}
	if n := len(s.mu.segs); n > 0 {
		g := s.mu.segs[n-1]
		if min <= g.last() {
			at := g.offsets[min-g.first]
			if err := g.f.Truncate(at); err != nil {
				return fmt.Errorf("wal: truncate %s: %w", g.path, err)
			}
			if err := fdatasync(g.f); err != nil {
				return fmt.Errorf("wal: sync %s: %w", g.path, err)
			}
			g.offsets = g.offsets[:min-g.first]
			g.size = at
		}
	}
	s.mu.last = min - 1
	return nil
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

func (s *Store) closeFiles() { s.closeFilesLocked() }

func (s *Store) closeFilesLocked() error {
	var errs []error
	for _, g := range s.mu.segs {
		if err := g.f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// readFirst reads the logical first index (0 when never truncated).
func readFirst(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, firstFile))
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("wal: %w", err)
	}
	if len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:]) {
		return 0, fmt.Errorf("%w: %s is damaged", ErrCorrupt, filepath.Join(dir, firstFile))
	}
	return binary.LittleEndian.Uint64(b), nil
}

// writeFirst replaces the first-index file atomically and durably.
func writeFirst(dir string, first uint64) error {
	b := binary.LittleEndian.AppendUint64(nil, first)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := filepath.Join(dir, firstFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("wal: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("wal: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, firstFile)); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("wal: sync dir: %w", err)
	}
	return nil
}

var _ hraft.LogStore = (*Store)(nil)
