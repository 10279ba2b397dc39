package wal

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	hraft "github.com/hashicorp/raft"
)

// The seven cases of issue 22 (a second review of the log), each as it was found on
// the package's memFS. Each failed before its fix.

// tailPath is the last segment of the store on m.
func tailPath(t *testing.T, m *memFS) string {
	t.Helper()
	var last string
	for _, n := range m.list(memDir) {
		if strings.HasPrefix(n, segPrefix) {
			last = n
		}
	}
	if last == "" {
		t.Fatal("no segment")
	}
	return filepath.Join(memDir, last)
}

// Case 1: one flipped bit inside the final, acknowledged record — its length field
// intact, the record ending exactly at the end of the file — was cut silently.
func TestIssue22FlipInFinalRecordIsRefused(t *testing.T) {
	for _, final := range [][]*hraft.Log{tlogs(11, 11, 1), tlogs(11, 20, 1)} {
		m := newMemFS()
		s := openMem(t, m)
		if err := s.StoreLogs(tlogs(1, 10, 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.StoreLogs(final); err != nil {
			t.Fatal(err)
		}
		s.Close()
		path := tailPath(t, m)
		good := m.file(path)
		last := final[len(final)-1]
		start := len(good) - recordSize(last)
		for o := start + recordHeader; o < len(good); o++ {
			for bit := range 8 {
				c := m.crash(-1, nil)
				b := bytes.Clone(good)
				b[o] ^= 1 << bit
				c.setFile(path, b)
				_, err := OpenWith(memDir, Options{FS: c})
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("entry %d: bit %d of byte %d flipped: open = %v, want ErrCorrupt", last.Index, bit, o, err)
				}
			}
		}
	}
}

// Case 1, second form: zeroing the last 512 bytes of a log of one-entry batches took
// nine acknowledged entries with it. Whenever the first damaged record still shows
// that it ended its batch (bytes 25–26 of it survive), the bytes after it prove the
// batch was acknowledged: Open refuses. The layouts where the zeros also hide that
// mark are the limit recover.go documents; they are counted, and must be the minority.
func TestIssue22ZeroedLastSectorIsRefused(t *testing.T) {
	for _, aligned := range []bool{false, true} {
		refused, cut := zeroLastSector(t, aligned)
		t.Logf("aligned=%v: %d layouts refused, %d cut (the mark was zeroed too)", aligned, refused, cut)
		if refused <= cut {
			t.Fatalf("aligned=%v: %d refused, %d cut: want most refused", aligned, refused, cut)
		}
	}
}

// zeroLastSector zeroes the last 512 bytes (or, aligned, the file from the last sector
// boundary 512 or more bytes before its end) of logs of 20..59 one-entry batches.
func zeroLastSector(t *testing.T, aligned bool) (refused, cut int) {
	for n := uint64(20); n < 60; n++ {
		m := newMemFS()
		s := openMem(t, m)
		var starts []int
		size := 0
		for i := uint64(1); i <= n; i++ {
			starts = append(starts, size)
			size += recordSize(tlog(i, 1))
			if err := s.StoreLogs(tlogs(i, i, 1)); err != nil {
				t.Fatal(err)
			}
		}
		s.Close()
		path := tailPath(t, m)
		b := m.file(path)
		zeroFrom := len(b) - sectorSize
		if aligned {
			zeroFrom = zeroFrom / sectorSize * sectorSize
		}
		clear(b[zeroFrom:])
		m.setFile(path, b)
		first := 0 // the record the zeros start in
		for first+1 < len(starts) && starts[first+1] <= zeroFrom {
			first++
		}
		markVisible := zeroFrom-starts[first] >= offAppendedAt+2
		s, err := OpenWith(memDir, Options{FS: m})
		switch {
		case errors.Is(err, ErrCorrupt):
			refused++
		case err != nil:
			t.Fatalf("%d entries: open: %v", n, err)
		case markVisible:
			t.Fatalf("%d entries: the zeros start %d bytes into entry %d, whose batch mark is readable; "+
				"yet Open cut to %s", n, zeroFrom-starts[first], first+1, describe(contents(t, s)))
		default:
			cut++
		}
	}
	return refused, cut
}

// Case 2: a write failed (EIO) part-way through 11..20 and the store only marked
// itself dirty; the process stopped before the next write and a restart brought back
// 11..15 — entries raft had been told were not stored. They are cut, durably, before
// StoreLogs answers.
func TestIssue22FailedWriteNeverComesBack(t *testing.T) {
	m, s, acked := openAcked(t)
	path := tailPath(t, m)
	size := len(m.file(path))
	m.failOnce("write", segPrefix, errEIO)
	if err := s.StoreLogs(tlogs(11, 20, 1)); err == nil || errors.Is(err, ErrFailed) {
		t.Fatalf("failed write = %v, want a plain error (certainly not stored)", err)
	}
	if n := len(m.file(path)); n != size {
		t.Fatalf("segment is %d bytes after the failed write, want %d: its leftovers are still there", n, size)
	}
	s.Close()
	for name, tail := range map[string]tailFunc{"restart": tailAll, "power loss": tailNone} {
		got := contents(t, openMem(t, m.crash(-1, tail)))
		if len(got) != len(acked) {
			t.Fatalf("%s: log %s, want %s", name, describe(got), describe(acked))
		}
	}
}

// Case 3: after a failed fdatasync the store failed, but the batch stayed in the page
// cache; the restarted node read 11..15 back as good and acknowledged 16..20 on top.
func TestIssue22FsyncgateAcrossRestart(t *testing.T) {
	m, s, acked := openAcked(t)
	m.failOnce("sync", segPrefix, errEIO)
	if err := s.StoreLogs(tlogs(11, 15, 1)); !errors.Is(err, ErrFailed) {
		t.Fatalf("failed sync = %v, want ErrFailed", err)
	}
	s.Close()
	r := m.crash(-1, tailAll) // a restart: what the page cache holds is read back
	s = openMem(t, r)
	wantExactly(t, s, acked)
	more := tlogs(11, 12, 2)
	if err := s.StoreLogs(more); err != nil {
		t.Fatal(err)
	}
	s.Close()
	wantExactly(t, openMem(t, r.crash(-1, nil)), append(acked, more...))
}

// Case 4: a batch torn with a zeroed page in its middle and its later records written
// (out-of-order writeback, as on XFS) stopped Open ("good record follows … not a torn
// write"), though nothing acknowledged was at stake. The same damage to a batch that
// another batch followed is refused: that batch was acknowledged.
func TestIssue22ZeroPageInTornBatch(t *testing.T) {
	for _, followed := range []bool{false, true} {
		t.Run(fmt.Sprintf("followed=%v", followed), func(t *testing.T) {
			m := newMemFS()
			s := openMem(t, m)
			if err := s.StoreLogs(tlogs(1, 10, 1)); err != nil {
				t.Fatal(err)
			}
			path := tailPath(t, m)
			start := len(m.file(path))
			batch := tlogs(11, 60, 1)
			if err := s.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			if followed {
				if err := s.StoreLogs(tlogs(61, 61, 1)); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			b := m.file(path)
			zero := (start/sectorSize + 2) * sectorSize // a whole sector well inside the batch
			clear(b[zero : zero+sectorSize])
			m.setFile(path, b)
			s, err := OpenWith(memDir, Options{FS: m})
			if followed {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "acknowledged") {
					t.Fatalf("open = %v, want ErrCorrupt saying the batch was acknowledged", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			off, k := start, 0
			for off+recordSize(batch[k]) <= zero {
				off += recordSize(batch[k])
				k++
			}
			wantExactly(t, s, append(tlogs(1, 10, 1), batch[:k]...))
		})
	}
}

// Case 5: Open searched a garbage tail for a good record at every offset, checksumming
// up to the end each time: 4 MiB took 0.28 s, 8 MiB 3.1 s, 16 MiB 38 s. Garbage is now
// refused at once; and a tail built to look like records at every offset — the worst
// case of the search that remains — is refused once the bound on checksummed bytes
// is reached, instead of searching on.
func TestIssue22OpenIsLinearInTheTail(t *testing.T) {
	m := newMemFS()
	s := openMem(t, m)
	if err := s.StoreLogs(tlogs(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := tailPath(t, m)
	good := m.file(path)

	garbage := bytes.Clone(good)
	garbage = append(garbage, bytes.Repeat([]byte{0x9e, 0x37, 0x79, 0xb9, 0x7f, 0x4a}, 16<<20/6)...)
	c := m.crash(-1, nil)
	c.setFile(path, garbage)
	if _, err := OpenWith(memDir, Options{FS: c}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("16 MiB garbage tail: open = %v, want ErrCorrupt", err)
	}

	// A lost sector (zeros to the next sector boundary: a zeroed length field that no
	// lost sector explains is refused at once), then 4 MiB where every 24 bytes hold a
	// plausible header of a record of index 11 that fails its checksum.
	tail := make([]byte, sectorSize-len(good)%sectorSize, 4<<20)
	for len(tail) < cap(tail)-64 { // length 1000, a wrong checksum, index 11, term 1
		tail = append(tail, 0xe8, 3, 0, 0, 1, 2, 3, 4, 11, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0)
	}
	c = m.crash(-1, nil)
	c.setFile(path, append(bytes.Clone(good), tail...))
	if _, err := OpenWith(memDir, Options{FS: c}); !errors.Is(err, ErrCorrupt) ||
		!strings.Contains(err.Error(), "too many record-like headers") {
		t.Fatalf("record-like tail: open = %v, want ErrCorrupt at the search bound", err)
	}
}

// BenchmarkOpenGarbageTail4MiB and friends: Open on a log of ten entries with a tail
// of garbage behind them (refused); the time per op grows linearly with the tail.
func BenchmarkOpenGarbageTail4MiB(b *testing.B)  { benchmarkOpenGarbageTail(b, 4<<20) }
func BenchmarkOpenGarbageTail16MiB(b *testing.B) { benchmarkOpenGarbageTail(b, 16<<20) }

func benchmarkOpenGarbageTail(b *testing.B, n int) {
	m := newMemFS()
	s := openMem(b, m)
	if err := s.StoreLogs(tlogs(1, 10, 1)); err != nil {
		b.Fatal(err)
	}
	s.Close()
	var path string
	for _, name := range m.list(memDir) {
		if strings.HasPrefix(name, segPrefix) {
			path = filepath.Join(memDir, name)
		}
	}
	data := append(m.file(path), bytes.Repeat([]byte{0, 0, 0, 0, 0x55, 0x44}, n/6)...)
	m.setFile(path, data)
	b.ResetTimer()
	for range b.N {
		if s, err := OpenWith(memDir, Options{FS: m}); err == nil {
			s.Close()
		}
	}
}

// Case 6: head compaction wrote the new first file before freeing anything, so on a
// full disk it failed with ENOSPC — and failed the store for good. Whole segments are
// now removed first, and a failure while deleting a prefix is reported, not fatal.
func TestIssue22HeadCompactionOnFullDisk(t *testing.T) {
	defer func(n int64) { segmentMaxSize = n }(segmentMaxSize)
	segmentMaxSize = 400
	m := newMemFS()
	s := openMem(t, m)
	for i := uint64(1); i <= 60; i += 5 {
		if err := s.StoreLogs(tlogs(i, i+4, 1)); err != nil {
			t.Fatal(err)
		}
	}
	segs := len(m.list(memDir))
	enospc := fmt.Errorf("injected: %w", syscall.ENOSPC)
	m.fail = func(op, path string, _ int) error {
		if strings.Contains(path, firstFile) && (op == "create" || op == "write") {
			return enospc
		}
		return nil
	}
	if err := s.DeleteRange(1, 40); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("delete head on a full disk = %v, want the ENOSPC reported", err)
	}
	m.fail = nil
	if s.Failed() != nil {
		t.Fatalf("the store failed for good: %v", s.Failed())
	}
	if n := len(m.list(memDir)); n >= segs {
		t.Fatalf("%d files after the head delete, %d before: nothing was freed", n, segs)
	}
	if first, _ := s.FirstIndex(); first != 41 {
		t.Fatalf("first index %d, want 41", first)
	}
	want := tlogs(41, 62, 1)
	if err := s.StoreLogs(want[20:]); err != nil {
		t.Fatalf("append after the failed compaction: %v", err)
	}
	if err := s.DeleteRange(1, 45); err != nil {
		t.Fatalf("compaction once the disk has room: %v", err)
	}
	s.Close()
	wantExactly(t, openMem(t, m.crash(-1, nil)), want[5:])
}

// Case 7: ErrTooLarge was returned before the check that fails the store when an
// append right after a suffix delete fails (hashicorp/raft then keeps the deleted
// entries as its last log, and only a restart makes the two agree).
func TestIssue22TooLargeAfterSuffixDeleteFails(t *testing.T) {
	m := newMemFS()
	s := openMem(t, m)
	if err := s.StoreLogs(tlogs(1, 10, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(9, 10); err != nil {
		t.Fatal(err)
	}
	big := &hraft.Log{Index: 9, Term: 2, Type: hraft.LogCommand, Data: make([]byte, MaxRecordBytes)}
	err := s.StoreLogs([]*hraft.Log{big})
	if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrFailed) {
		t.Fatalf("oversized append after a suffix delete = %v, want ErrTooLarge and ErrFailed", err)
	}
}
