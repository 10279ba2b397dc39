package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
)

func benchKey(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

// loaded returns a store with n keys of valueSize bytes, written in batches.
func loaded(b *testing.B, n, valueSize int) *Store {
	b.Helper()
	s := NewStore()
	val := bytes.Repeat([]byte("v"), valueSize)
	idx := uint64(0)
	for i := 0; i < n; i += 100 {
		ops := make([]Op, 0, 100)
		for j := i; j < min(i+100, n); j++ {
			ops = append(ops, Op{Type: OpPut, Key: benchKey(j), Value: val})
		}
		idx++
		s.ApplyCommand(idx, txn(ops...))
	}
	return s
}

// BenchmarkApplyPut is the write path of one replica: decode + apply + publish a view.
func BenchmarkApplyPut(b *testing.B) {
	s := NewStore()
	val := bytes.Repeat([]byte("v"), 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		data, _ := EncodeCommand(txn(Op{Type: OpPut, Key: benchKey(i % 100000), Value: val}))
		s.Apply(uint64(i+1), data)
	}
}

// BenchmarkApplyBatch64 is the same with raft handing 64 committed entries at once.
func BenchmarkApplyBatch64(b *testing.B) {
	s := NewStore()
	val := bytes.Repeat([]byte("v"), 256)
	entries := make([]Entry, 64)
	b.ReportAllocs()
	idx := uint64(0)
	for i := 0; b.Loop(); i++ {
		for j := range entries {
			idx++
			data, _ := EncodeCommand(txn(Op{Type: OpPut, Key: benchKey(int(idx) % 100000), Value: val}))
			entries[j] = Entry{Index: idx, Data: data}
		}
		s.ApplyBatch(entries)
	}
	b.ReportMetric(float64(b.N*64)/b.Elapsed().Seconds(), "puts/s")
}

func BenchmarkGet(b *testing.B) {
	s := loaded(b, 100000, 256)
	v := s.View()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := v.Get(benchKey(i%100000), 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetRandom reads the same 100k keys in a random order, as clients do:
// BenchmarkGet's key order finds each key's path still in the CPU's caches, which
// hides most of a lookup's cost (memory latency through the tree's nodes and entries).
func BenchmarkGetRandom(b *testing.B) {
	s := loaded(b, 100000, 256)
	v := s.View()
	keys := make([][]byte, 100000)
	for i, j := range rand.New(rand.NewPCG(1, 2)).Perm(len(keys)) {
		keys[i] = benchKey(j)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := v.Get(keys[i%len(keys)], 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRangePage pages through 100k keys of 512 bytes; cost per page is O(limit).
func BenchmarkRangePage(b *testing.B) {
	for _, limit := range []int{500, 5000} {
		b.Run(fmt.Sprint("limit=", limit), func(b *testing.B) {
			s := loaded(b, 100000, 512)
			v := s.View()
			keys := 0
			b.ReportAllocs()
			var from []byte
			for b.Loop() {
				kvs, next, err := v.Range(from, nil, 0, limit)
				if err != nil {
					b.Fatal(err)
				}
				keys += len(kvs)
				from = next
			}
			b.ReportMetric(float64(keys)/b.Elapsed().Seconds(), "keys/s")
		})
	}
}

func BenchmarkSnapshotWrite(b *testing.B) {
	s := loaded(b, 100000, 256)
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		n, _ = s.Snapshot().WriteTo(io.Discard)
	}
	b.SetBytes(n)
}

func BenchmarkRestore(b *testing.B) {
	var buf bytes.Buffer
	loaded(b, 100000, 256).Snapshot().WriteTo(&buf)
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if err := NewStore().Restore(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompactStep measures reclaiming 100k superseded versions in steps of 1000.
func BenchmarkCompactStep(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		s := loaded(b, 10000, 64)
		for range 10 {
			for i := 0; i < 10000; i += 100 {
				ops := make([]Op, 0, 100)
				for j := i; j < i+100; j++ {
					ops = append(ops, Op{Type: OpPut, Key: benchKey(j), Value: []byte("x")})
				}
				s.ApplyCommand(s.AppliedIndex()+1, txn(ops...))
			}
		}
		s.ApplyCommand(s.AppliedIndex()+1, &Command{Type: CmdCompact, Revision: s.Revision()})
		b.StartTimer()
		for _, more := s.CompactStep(1000); more; _, more = s.CompactStep(1000) {
		}
	}
}
