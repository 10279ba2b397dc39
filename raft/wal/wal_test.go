package wal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"
)

func entry(i uint64) *hraft.Log {
	return &hraft.Log{Index: i, Term: i/10 + 1, Type: hraft.LogCommand, Data: []byte(fmt.Sprintf("data-%d", i)),
		AppendedAt: time.Unix(0, int64(i)<<markBits)} // the WAL keeps appendedAt to 2^16 ns
}

func entries(from, to uint64) []*hraft.Log {
	var out []*hraft.Log
	for i := from; i <= to; i++ {
		out = append(out, entry(i))
	}
	return out
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// check asserts the log holds exactly first..last as entry(i) wrote them.
func check(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != first || l != last {
		t.Fatalf("bounds [%d, %d], want [%d, %d]", f, l, first, last)
	}
	for i := first; i <= last && last > 0; i++ {
		var got hraft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		want := entry(i)
		if got.Index != i || got.Term != want.Term || !bytes.Equal(got.Data, want.Data) || !got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("get %d = %+v, want %+v", i, got, want)
		}
	}
	var out hraft.Log
	for _, i := range []uint64{first - 1, last + 1} {
		if i == 0 {
			continue
		}
		if err := s.GetLog(i, &out); !errors.Is(err, hraft.ErrLogNotFound) {
			t.Fatalf("get %d outside [%d, %d]: %v", i, first, last, err)
		}
	}
}

func TestStoreReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	check(t, s, 0, 0)
	if err := s.StoreLogs(entries(1, 50)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(entry(51)); err != nil {
		t.Fatal(err)
	}
	check(t, s, 1, 51)
	if err := s.StoreLogs(entries(40, 41)); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("overlap: %v", err)
	}
	s.Close()
	if err := s.StoreLog(entry(52)); !errors.Is(err, ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
	check(t, open(t, dir), 1, 51)
}

// TestTornTail: what an unfinished write leaves after the last complete record of the
// last segment — a partial record, zeroed sectors — is cut off, and the log goes on.
// A whole record that fails its checksum, or garbage, is damage, not an unfinished
// write: Open refuses and changes nothing.
func TestTornTail(t *testing.T) {
	for name, tail := range map[string]func(rec []byte) []byte{
		"partial record": func(rec []byte) []byte { return rec[:len(rec)/2] },
		"zeros":          func(rec []byte) []byte { return make([]byte, 4096) },
		"header only":    func(rec []byte) []byte { return rec[:5] },
		"bad checksum":   func(rec []byte) []byte { r := bytes.Clone(rec); r[len(r)-1] ^= 1; return r },
		"garbage":        func(rec []byte) []byte { return bytes.Repeat([]byte{0xa7, 0x13, 0x5c}, 700) },
	} {
		refused := name == "bad checksum" || name == "garbage"
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			if err := s.StoreLogs(entries(1, 20)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			path := filepath.Join(dir, segmentName(1))
			good, _ := os.ReadFile(path)
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.Write(tail(appendRecord(nil, entry(21), true)))
			f.Close()
			if refused {
				size := fileSize(t, path)
				if _, err := Open(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "offset") {
					t.Fatalf("open = %v, want ErrCorrupt naming the offset", err)
				}
				if fileSize(t, path) != size {
					t.Fatal("a refused segment was changed")
				}
				return
			}
			s = open(t, dir)
			check(t, s, 1, 20)
			if got, _ := os.ReadFile(path); !bytes.Equal(got, good) {
				t.Fatalf("segment is %d bytes after recovery, want the %d good ones", len(got), len(good))
			}
			if err := s.StoreLogs(entries(21, 22)); err != nil {
				t.Fatal(err)
			}
			s.Close()
			check(t, open(t, dir), 1, 22)
		})
	}
}

// TestCorruptSealedSegment: damage in a segment that is not the last cannot come from
// a crash; Open refuses and names the file.
func TestCorruptSealedSegment(t *testing.T) {
	defer func(n int64) { segmentMaxSize = n }(segmentMaxSize)
	segmentMaxSize = 512
	dir := t.TempDir()
	s := open(t, dir)
	for i := uint64(1); i <= 40; i += 4 {
		if err := s.StoreLogs(entries(i, i+3)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	names := osSegments(t, dir)
	if len(names) < 3 {
		t.Fatalf("%d segments, want several", len(names))
	}
	path := filepath.Join(dir, names[0])
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 0xff
	os.WriteFile(path, b, 0o600)
	_, err := Open(dir)
	if !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(names[0])) {
		t.Fatalf("open = %v, want ErrCorrupt naming %s", err, names[0])
	}
}

// TestDeleteRange: head truncation (after a snapshot), tail truncation (conflicting
// entries), emptying, and a restart at another index, each surviving a reopen, across
// segment boundaries.
func TestDeleteRange(t *testing.T) {
	defer func(n int64) { segmentMaxSize = n }(segmentMaxSize)
	segmentMaxSize = 600
	dir := t.TempDir()
	s := open(t, dir)
	for i := uint64(1); i <= 100; i += 5 {
		if err := s.StoreLogs(entries(i, i+4)); err != nil {
			t.Fatal(err)
		}
	}
	check(t, s, 1, 100)
	steps := []struct {
		min, max    uint64
		first, last uint64
	}{
		{1, 30, 31, 100},  // head, mid-segment
		{95, 100, 31, 94}, // tail
		{61, 94, 31, 60},  // tail across segments
		{1, 44, 45, 60},   // head across segments
	}
	for i, st := range steps {
		if err := s.DeleteRange(st.min, st.max); err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
		check(t, s, st.first, st.last)
		s.Close()
		s = open(t, dir)
		check(t, s, st.first, st.last)
	}
	if err := s.DeleteRange(50, 55); err == nil {
		t.Fatal("a middle range must be refused")
	}
	if err := s.StoreLogs(entries(61, 70)); err != nil {
		t.Fatal(err)
	}
	check(t, s, 45, 70)
	// Emptied (a snapshot installed past the log), then restarted far ahead.
	if err := s.DeleteRange(45, 70); err != nil {
		t.Fatal(err)
	}
	check(t, s, 0, 0)
	if err := s.StoreLogs(entries(500, 510)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	check(t, open(t, dir), 500, 510)
}

// TestModel runs random stores, truncations and reopens against an in-memory model,
// with tiny segments so that rolls and boundaries are frequent.
func TestModel(t *testing.T) {
	defer func(n int64) { segmentMaxSize = n }(segmentMaxSize)
	segmentMaxSize = 300
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	s := open(t, dir)
	var first, last uint64
	for step := 0; step < 400; step++ {
		switch op := rng.IntN(10); {
		case op < 6: // append a batch
			n := uint64(rng.IntN(8) + 1)
			from := last + 1
			if last == 0 {
				from = uint64(rng.IntN(50) + 1)
				first = from
			}
			if err := s.StoreLogs(entries(from, from+n-1)); err != nil {
				t.Fatalf("step %d: store: %v", step, err)
			}
			last = from + n - 1
		case op < 7 && last > 0: // head
			max := first + uint64(rng.IntN(int(last-first+1)))
			if err := s.DeleteRange(first, max); err != nil {
				t.Fatalf("step %d: delete head: %v", step, err)
			}
			if first = max + 1; first > last {
				first, last = 0, 0
			}
		case op < 8 && last > 0: // tail
			min := first + uint64(rng.IntN(int(last-first+1)))
			if err := s.DeleteRange(min, last); err != nil {
				t.Fatalf("step %d: delete tail: %v", step, err)
			}
			if last = min - 1; last < first {
				first, last = 0, 0
			}
		default:
			s.Close()
			s = open(t, dir)
		}
		check(t, s, first, last)
	}
}

// TestConcurrentReads: readers of stored entries run while batches are appended.
func TestConcurrentReads(t *testing.T) {
	s := open(t, t.TempDir())
	if err := s.StoreLogs(entries(1, 10)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				last, _ := s.LastIndex()
				var l hraft.Log
				if err := s.GetLog(last, &l); err != nil || l.Index != last {
					t.Errorf("get %d: %v %d", last, err, l.Index)
					return
				}
			}
		}()
	}
	for i := uint64(11); i < 300; i += 10 {
		if err := s.StoreLogs(entries(i, i+9)); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// FuzzScanRecords: the segment parser never panics on any bytes and never reports a
// good prefix longer than the data.
func FuzzScanRecords(f *testing.F) {
	var b []byte
	for i, l := range entries(1, 3) {
		b = appendRecord(b, l, i == 2)
	}
	f.Add(b)
	f.Add(b[:len(b)-3])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		off, problem := scanRecords(data, 1, func(*hraft.Log, int64) { n++ })
		if off < 0 || off > int64(len(data)) {
			t.Fatalf("offset %d outside %d bytes", off, len(data))
		}
		if problem != "" {
			judgeDamage(data, off, 1+uint64(n), 0) // never panics, always ends
		}
	})
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestGapRestartsLog: hashicorp/raft restores a user snapshot at last+1 without an entry
// there, then appends after it; the log restarts at the new entry, also after a reopen.
func TestGapRestartsLog(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if err := s.StoreLogs(entries(1, 9)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(11, 12)); err != nil {
		t.Fatal(err)
	}
	check(t, s, 11, 12)
	if err := s.StoreLogs(entries(5, 6)); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("overlap: %v", err)
	}
	s.Close()
	check(t, open(t, dir), 11, 12)
}

func osSegments(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), segPrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}
