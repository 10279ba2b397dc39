package wal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hraft "github.com/hashicorp/raft"
)

// The five ways the log lost or resurrected entries before the crash suite (issue 16),
// each reproduced as it was found, on real files where it was found on real files.

// writeControl switches FaultFS faults on (words) or off ("").
func writeControl(t *testing.T, path, words string) {
	t.Helper()
	if words == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	if err := os.WriteFile(path, []byte(words), 0o600); err != nil {
		t.Fatal(err)
	}
}

func openOS(t *testing.T, dir string, fs FS) *Store {
	t.Helper()
	s, err := OpenWith(dir, Options{FS: fs})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Case 1: a flipped byte in the last segment, followed by good records, used to be
// taken for a torn tail: Open cut the file there and acknowledged entries were gone.
func TestRegressionFlipInLastSegmentIsRefused(t *testing.T) {
	defer func(n int64) { segmentMaxSize = n }(segmentMaxSize)
	for _, tc := range []struct {
		name    string
		segSize int64
		flipAt  func(s *Store) (string, int64) // path and offset of the flipped byte
	}{
		{"one segment, record 66 of 200", 64 << 20, func(s *Store) (string, int64) {
			g := s.mu.segs[0]
			return g.path, g.offsets[65] + recordHeader + 3
		}},
		{"first record of the last of several segments", 3000, func(s *Store) (string, int64) {
			g := s.mu.segs[len(s.mu.segs)-1]
			return g.path, g.offsets[0] + recordHeader + 20
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			segmentMaxSize = tc.segSize
			dir := t.TempDir()
			s := openOS(t, dir, OSFS{})
			for i := uint64(1); i <= 200; i += 10 {
				if err := s.StoreLogs(tlogs(i, i+9, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.segSize < 1<<20 && len(s.mu.segs) < 3 {
				t.Fatalf("%d segments, want several", len(s.mu.segs))
			}
			path, off := tc.flipAt(s)
			s.Close()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			size := len(b)
			b[off] ^= 0x01
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = Open(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(path)) ||
				!strings.Contains(err.Error(), "offset") {
				t.Fatalf("open = %v, want ErrCorrupt naming file and offset", err)
			}
			if after, _ := os.ReadFile(path); len(after) != size {
				t.Fatalf("the refused segment was changed: %d bytes, was %d", len(after), size)
			}
		})
	}
}

// Case 2: a write that failed part-way left complete records past the log's end; a
// later batch of a newer term was written before them, and a reopen brought the old
// entries back behind it (LastIndex 12 → 15, terms 2, 2, 1, 1, 1).
func TestRegressionFailedWriteDoesNotResurrect(t *testing.T) {
	dir := t.TempDir()
	control := filepath.Join(t.TempDir(), "faults")
	s := openOS(t, dir, FaultFS{Control: control})
	want := tlogs(1, 10, 1)
	if err := s.StoreLogs(want); err != nil {
		t.Fatal(err)
	}
	writeControl(t, control, "write")
	if err := s.StoreLogs(tlogs(11, 20, 1)); err == nil {
		t.Fatal("a failed write was acknowledged")
	}
	writeControl(t, control, "")
	want = append(want, tlogs(11, 12, 2)...)
	if err := s.StoreLogs(want[10:]); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openOS(t, dir, OSFS{})
	wantExactly(t, s, want)
}

// Case 3: the same leftover bytes in a segment that then rolled over made the sealed
// segment unreadable: the node could not restart.
func TestRegressionFailedWriteThenRollover(t *testing.T) {
	defer func(n int64) { segmentMaxSize = n }(segmentMaxSize)
	segmentMaxSize = 3000
	dir := t.TempDir()
	control := filepath.Join(t.TempDir(), "faults")
	s := openOS(t, dir, FaultFS{Control: control})
	var want []*hraft.Log
	for i := uint64(1); i <= 40; i += 10 {
		want = append(want, tlogs(i, i+9, 1)...)
		if err := s.StoreLogs(want[i-1:]); err != nil {
			t.Fatal(err)
		}
	}
	writeControl(t, control, "write")
	if err := s.StoreLogs(tlogs(41, 120, 1)); err == nil {
		t.Fatal("a failed write was acknowledged")
	}
	writeControl(t, control, "")
	for i := uint64(41); i <= 100; i += 3 { // past the segment size: rolls over
		batch := tlogs(i, i+2, 2)
		if err := s.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
		want = append(want, batch...)
	}
	if n := len(osSegments(t, dir)); n < 2 {
		t.Fatalf("%d segments: the tail did not roll over", n)
	}
	s.Close()
	wantExactly(t, openOS(t, dir, OSFS{}), want)
}

// Case 4: an empty segment replaced by a new one was unlinked without a directory
// fsync; a power loss that undid the unlink left an empty seg-100 before seg-200, and
// Open refused ("starts at index 200, previous segment ends at 99"). Open's own
// removal of empty segments was not synced either.
func TestRegressionUnlinkUndoneByPowerLoss(t *testing.T) {
	m := newMemFS()
	s := openMem(t, m)
	if err := s.StoreLogs(tlogs(1, 5, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 5); err != nil {
		t.Fatal(err)
	}
	m.failOnce("write", segPrefix, errCrashed) // crash before the write: seg-100 stays empty
	if err := s.StoreLogs(tlogs(100, 100, 1)); err == nil {
		t.Fatal("a failed write was acknowledged")
	}
	m = m.crash(-1, tailNone)
	empty := filepath.Join(memDir, segmentName(100))
	if !m.exists(empty) {
		t.Fatalf("no empty %s after the crash: %v", empty, m.list(memDir))
	}
	s = openMem(t, m)
	want := tlogs(200, 204, 2)
	if err := s.StoreLogs(want); err != nil {
		t.Fatal(err)
	}
	if n := m.pendingOps(); n != 0 {
		t.Fatalf("%d directory operations not synced after an acknowledged write", n)
	}
	s.Close()
	// Even had the unlink been lost, the empty segment must not stop Open.
	m = m.crash(-1, nil)
	m.put(empty, nil)
	s = openMem(t, m)
	wantExactly(t, s, want)
	if n := m.pendingOps(); n != 0 {
		t.Fatalf("Open removed the empty segment without a directory fsync (%d pending)", n)
	}
	if m.exists(empty) {
		t.Fatalf("Open kept the empty %s", empty)
	}
}

// Case 5: an entry larger than the format's record limit was acknowledged, then Open
// refused its record and dropped it. StoreLogs refuses it and writes nothing.
func TestRegressionOversizedEntryRefused(t *testing.T) {
	dir := t.TempDir()
	s := openOS(t, dir, OSFS{})
	want := tlogs(1, 3, 1)
	if err := s.StoreLogs(want); err != nil {
		t.Fatal(err)
	}
	big := &hraft.Log{Index: 5, Term: 1, Type: hraft.LogCommand, Data: make([]byte, MaxRecordBytes)}
	err := s.StoreLogs([]*hraft.Log{tlog(4, 1), big})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized entry: %v, want ErrTooLarge", err)
	}
	s.Close()
	wantExactly(t, openOS(t, dir, OSFS{}), want)
}
