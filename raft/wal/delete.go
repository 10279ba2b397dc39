package wal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"path/filepath"
)

// DeleteRange deletes entries min..max inclusive. hashicorp/raft deletes either a
// prefix (after a snapshot) or a suffix (a follower's conflicting entries); a range
// in the middle is refused. A failure while deleting a suffix, or everything, fails
// the store (ErrFailed): what is on disk is then known only to a reopen. A failure
// while deleting a prefix does not: every step of it leaves a log a reopen reads
// correctly (see deleteHeadLocked), and raft compacts again later.
func (s *Store) DeleteRange(min, max uint64) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first, last := s.mu.first, s.mu.last
	var err error
	switch {
	case last == 0 || min > max || max < first || min > last:
		return nil
	case min <= first && max >= last:
		err = s.deleteAllLocked()
	case min <= first:
		return s.deleteHeadLocked(max)
	case max >= last:
		err = s.deleteTailLocked(min)
	default:
		return fmt.Errorf("wal: DeleteRange(%d, %d) inside the log [%d, %d] is not supported", min, max, first, last)
	}
	if err != nil {
		return s.fail(err)
	}
	return nil
}

// deleteAllLocked removes every segment; the next StoreLogs starts a new one. The
// logical first index is reset first and segments go oldest first, so a crash midway
// leaves a consistent suffix of the old log (as if the deletion had not happened yet).
func (s *Store) deleteAllLocked() error {
	if err := writeFirst(s.fs, s.dir, 0); err != nil {
		return err
	}
	for len(s.mu.segs) > 0 {
		g := s.mu.segs[0]
		g.f.Close()
		s.mu.segs = s.mu.segs[1:]
		if err := s.fs.Remove(g.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("wal: %w", err)
		}
	}
	s.mu.segs = nil
	s.mu.first, s.mu.last = 0, 0
	return s.syncDir()
}

// deleteHeadLocked makes max+1 the first index. Whole segments below it are removed
// first, oldest first, so that a full disk gets room before anything is written
// (the first file is written through a new file); then the logical first index is
// persisted. Every step leaves a log that a reopen reads correctly: a removal that a
// power loss undoes, or a first file not written, brings back only a prefix of
// entries that were being deleted — entries a snapshot covers, which raft compacts
// again — and never a hole. So a failure here is reported, not fatal.
func (s *Store) deleteHeadLocked(max uint64) error {
	s.mu.first = max + 1 // for readers the entries are gone, whatever the disk says
	var errs []error
	removed := false
	for len(s.mu.segs) > 1 {
		g := s.mu.segs[0]
		if len(g.offsets) > 0 && g.last() > max {
			break
		}
		if err := s.fs.Remove(g.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("wal: remove %s: %w", g.path, err))
			break
		}
		g.f.Close()
		s.mu.segs = s.mu.segs[1:]
		removed = true
	}
	if removed {
		if err := s.syncDir(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := writeFirst(s.fs, s.dir, max+1); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
		s.mu.segs = s.mu.segs[:n-1]
		if err := s.fs.Remove(g.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("wal: %w", err)
		}
		removed = true
	}
	if removed {
		if err := s.syncDir(); err != nil {
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
			if err := g.f.Sync(); err != nil {
				return fmt.Errorf("wal: sync %s: %w", g.path, err)
			}
			g.offsets = g.offsets[:min-g.first]
			g.size = at
		}
	}
	s.mu.last = min - 1
	s.tailCut = true
	if s.mu.last < s.mu.first {
		s.mu.first, s.mu.last = 0, 0
	}
	return nil
}

func (s *Store) syncDir() error {
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	return nil
}

// readFirst reads the logical first index (0 when never truncated).
func readFirst(fsys FS, dir string) (uint64, error) {
	path := filepath.Join(dir, firstFile)
	f, err := fsys.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("wal: %w", err)
	}
	defer f.Close()
	b, err := readAll(f)
	if err != nil {
		return 0, fmt.Errorf("wal: read %s: %w", path, err)
	}
	if len(b) != 12 || crc32.Checksum(b[:8], castagnoli) != binary.LittleEndian.Uint32(b[8:]) {
		return 0, fmt.Errorf("%w: %s is damaged", ErrCorrupt, path)
	}
	return binary.LittleEndian.Uint64(b), nil
}

// writeFirst replaces the first-index file atomically and durably: a new file, synced,
// renamed over the old one, and the directory synced.
func writeFirst(fsys FS, dir string, first uint64) error {
	b := binary.LittleEndian.AppendUint64(nil, first)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := filepath.Join(dir, firstFile+".tmp")
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		f.Close()
		fsys.Remove(tmp) // a full disk: give back what the attempt took
		return fmt.Errorf("wal: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		fsys.Remove(tmp)
		return fmt.Errorf("wal: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if err := fsys.Rename(tmp, filepath.Join(dir, firstFile)); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("wal: %w", err)
	}
	return nil
}
