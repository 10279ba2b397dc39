package pebblelog

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	hraft "github.com/hashicorp/raft"
)

func entry(index, term uint64) *hraft.Log {
	l := &hraft.Log{Index: index, Term: term, Type: hraft.LogCommand,
		Data: []byte(fmt.Sprintf("cmd-%d-%d", index, term))}
	if index%3 == 0 {
		l.Extensions = []byte{byte(index), 0xff}
	}
	if index%2 == 0 {
		l.AppendedAt = time.Unix(1700000000, int64(index))
	}
	return l
}

func entries(from, to, term uint64) []*hraft.Log {
	var out []*hraft.Log
	for i := from; i <= to; i++ {
		out = append(out, entry(i, term))
	}
	return out
}

func sameLog(a, b *hraft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type &&
		bytes.Equal(a.Data, b.Data) && bytes.Equal(a.Extensions, b.Extensions) &&
		a.AppendedAt.UnixNano() == b.AppendedAt.UnixNano() && a.AppendedAt.IsZero() == b.AppendedAt.IsZero()
}

func openMem(t *testing.T, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open("log", WithFS(fs))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func checkBounds(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if f != first || l != last {
		t.Fatalf("bounds [%d, %d], want [%d, %d]", f, l, first, last)
	}
}

// checkRange checks that first..last hold entry(i, term(i)) and nothing around them.
func checkRange(t *testing.T, s *Store, first, last uint64, term func(uint64) uint64) {
	t.Helper()
	checkBounds(t, s, first, last)
	for i := first; i <= last && last != 0; i++ {
		var got hraft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if want := entry(i, term(i)); !sameLog(&got, want) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, got, *want)
		}
	}
	for _, i := range []uint64{0, first - 1, last + 1, last + 100} {
		if i >= first && i <= last && last != 0 {
			continue
		}
		var got hraft.Log
		if err := s.GetLog(i, &got); !errors.Is(err, hraft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) outside [%d, %d]: %v", i, first, last, err)
		}
	}
}

func termOf(uint64) uint64 { return 1 }

func TestStoreGetBounds(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	checkBounds(t, s, 0, 0)
	var l hraft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, hraft.ErrLogNotFound) {
		t.Fatalf("GetLog on empty log: %v", err)
	}
	if err := s.StoreLog(entry(1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(2, 50, 1)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 1, 50, termOf)
	if err := s.StoreLogs(nil); err != nil {
		t.Fatal(err)
	}

	// Contiguity: a batch must continue the log.
	for _, bad := range [][]*hraft.Log{
		entries(50, 51, 1),           // overlaps the last entry
		{entry(51, 1), entry(53, 1)}, // hole inside the batch
		{entry(51, 1), entry(51, 1)}, // repeated index
		entries(10, 12, 1),           // inside the log
	} {
		if err := s.StoreLogs(bad); !errors.Is(err, ErrNotContiguous) {
			t.Fatalf("StoreLogs(%d..): %v, want ErrNotContiguous", bad[0].Index, err)
		}
	}
	checkRange(t, s, 1, 50, termOf)

	// Entries starting past last+1 replace the log (a user snapshot was restored).
	if err := s.StoreLogs(entries(80, 90, 2)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 80, 90, func(uint64) uint64 { return 2 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(85, &l); !errors.Is(err, ErrClosed) {
		t.Fatalf("GetLog after Close: %v", err)
	}
	if err := s.StoreLog(entry(91, 2)); !errors.Is(err, ErrClosed) {
		t.Fatalf("StoreLog after Close: %v", err)
	}
	s = openMem(t, fs)
	defer s.Close()
	checkRange(t, s, 80, 90, func(uint64) uint64 { return 2 })
}

func TestEmptyLogStartsAnywhere(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	if err := s.StoreLogs(entries(1000, 1010, 3)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 1000, 1010, func(uint64) uint64 { return 3 })
	if err := s.StoreLog(entry(0, 1)); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("index 0: %v", err)
	}
	// Emptied by DeleteRange, it starts anywhere again.
	if err := s.DeleteRange(0, 5000); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, s, 0, 0)
	if err := s.StoreLogs(entries(7, 9, 4)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 7, 9, func(uint64) uint64 { return 4 })
}

func TestDeleteHeadAndTail(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	if err := s.StoreLogs(entries(1, 100, 1)); err != nil {
		t.Fatal(err)
	}
	// Head: after a snapshot.
	if err := s.DeleteRange(1, 40); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 41, 100, termOf)
	// A head range starting below first.
	if err := s.DeleteRange(0, 45); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 46, 100, termOf)
	// Tail: a follower drops conflicting entries and appends the leader's.
	if err := s.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 46, 90, termOf)
	if err := s.StoreLogs(entries(91, 95, 2)); err != nil {
		t.Fatal(err)
	}
	term := func(i uint64) uint64 {
		if i > 90 {
			return 2
		}
		return 1
	}
	checkRange(t, s, 46, 95, term)
	// Tail past the end, ranges outside the log, an empty range: no-ops or tail cuts.
	if err := s.DeleteRange(94, 1<<62); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 46, 93, term)
	for _, r := range [][2]uint64{{1, 10}, {200, 300}, {60, 50}} {
		if err := s.DeleteRange(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	checkRange(t, s, 46, 93, term)
	// The middle would leave a hole.
	if err := s.DeleteRange(50, 60); err == nil {
		t.Fatal("DeleteRange inside the log succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs)
	checkRange(t, s, 46, 93, term)
	if err := s.DeleteRange(46, 93); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, s, 0, 0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs)
	defer s.Close()
	checkBounds(t, s, 0, 0)
}

// TestOnDisk runs the store on the real file system once, with a memtable small
// enough that entries go through flushes to sstables and range deletions meet them.
func TestOnDisk(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithMemTableSize(256<<10))
	if err != nil {
		t.Fatal(err)
	}
	big := func(i, term uint64) *hraft.Log {
		l := entry(i, term)
		l.Data = bytes.Repeat([]byte{byte(i)}, 1000)
		return l
	}
	var batch []*hraft.Log
	for i := uint64(1); i <= 3000; i++ {
		batch = append(batch, big(i, 1))
		if len(batch) == 100 {
			if err := s.StoreLogs(batch); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
	if err := s.DeleteRange(1, 2000); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(2901, 3000); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkBounds(t, s, 2001, 2900)
	for i := uint64(2001); i <= 2900; i += 37 {
		var got hraft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatal(err)
		}
		if !sameLog(&got, big(i, 1)) {
			t.Fatalf("entry %d differs", i)
		}
	}
}

func TestCodec(t *testing.T) {
	for _, l := range []*hraft.Log{
		{},
		entry(1, 1), entry(6, 7),
		{Index: 1<<64 - 1, Term: 1<<64 - 1, Type: hraft.LogConfiguration, AppendedAt: time.Unix(-5, 0),
			Data: bytes.Repeat([]byte("x"), 1000), Extensions: []byte("e")},
	} {
		v := appendEntry(nil, l)
		var got hraft.Log
		if err := decodeEntry(v, &got); err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if !sameLog(&got, l) {
			t.Fatalf("round trip: %+v, want %+v", got, *l)
		}
		// Every truncation and every trailing byte is refused, never a panic.
		for n := 0; n < len(v); n++ {
			if err := decodeEntry(v[:n], &got); err == nil {
				t.Fatalf("decoded a value cut at %d of %d", n, len(v))
			}
		}
		if err := decodeEntry(append(v[:len(v):len(v)], 0), &got); err == nil {
			t.Fatal("decoded a value with a trailing byte")
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(appendEntry(nil, entry(6, 2)))
	f.Add([]byte{codecVersion, 1, 1, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, v []byte) {
		var l hraft.Log
		if decodeEntry(v, &l) == nil {
			if !bytes.Equal(appendEntry(nil, &l), v) && len(v) > 0 {
				// Varints have non-minimal encodings; decoding must still be
				// stable: re-encoding what was decoded decodes to the same entry.
				var again hraft.Log
				if err := decodeEntry(appendEntry(nil, &l), &again); err != nil || !sameLog(&l, &again) {
					t.Fatalf("unstable decode of %x", v)
				}
			}
		}
	})
}

// TestConcurrentReads reads while a writer appends, trims the head and cuts the
// tail: a read inside the bounds it saw returns the entry or ErrLogNotFound (the
// entry was truncated meanwhile), never a corruption or a half-applied deletion.
func TestConcurrentReads(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	if err := s.StoreLogs(entries(1, 100, 1)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errc := make(chan error, 2)
	for r := 0; r < 2; r++ {
		go func() {
			for i := uint64(0); ; i++ {
				select {
				case <-stop:
					errc <- nil
					return
				default:
				}
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if last == 0 {
					continue
				}
				idx := first + i%(last-first+1)
				var l hraft.Log
				err := s.GetLog(idx, &l)
				if err != nil && !errors.Is(err, hraft.ErrLogNotFound) {
					errc <- fmt.Errorf("GetLog(%d): %v", idx, err)
					return
				}
				if err == nil && l.Index != idx {
					errc <- fmt.Errorf("GetLog(%d) returned entry %d", idx, l.Index)
					return
				}
			}
		}()
	}
	next := uint64(101)
	for round := 0; round < 200; round++ {
		if err := s.StoreLogs(entries(next, next+9, 1)); err != nil {
			t.Fatal(err)
		}
		next += 10
		first, _ := s.FirstIndex()
		if err := s.DeleteRange(first, first+4); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRange(next-3, next); err != nil {
			t.Fatal(err)
		}
		next -= 3
	}
	close(stop)
	for r := 0; r < 2; r++ {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}
