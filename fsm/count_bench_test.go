package fsm

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/google/btree"
)

// countWalk is how a count was taken before the keyspace tree counted (count.go): a
// walk of the whole range. It stays here as the baseline of the benchmarks below.
func countWalk(t *keyTree, key, end []byte, rev int64) int64 {
	n := int64(0)
	visitLive(t, key, end, rev, func(*entry, *version) bool { n++; return true })
	return n
}

var benchCountSizes = []int{10_000, 100_000, 500_000, 1_000_000}

// BenchmarkRangeCount is a first page of 500 keys with the count of the whole range
// (etcd's Range with a limit, as kube-apiserver asks for every page), over every key
// of stores of 10k to 1M keys: walk is the page plus a walk of the range (the count
// before count.go), tree the page plus the tree's ranks. old= reads at a revision
// that 100 overwrites spread over the range have left behind (a later page of a
// scan), where the tree corrects its ranks key by key. countonly is the count alone
// (View.Count, RangeWith with CountOnly), without the page.
func BenchmarkRangeCount(b *testing.B) {
	for _, n := range benchCountSizes {
		s := loaded(b, n, 16)
		from, end := benchKey(0), []byte{}
		rev := s.Revision()
		for i := range 100 {
			s.ApplyCommand(s.AppliedIndex()+1, txn(Op{Type: OpPut, Key: benchKey(i * (n / 100)), Value: []byte("x")}))
		}
		v := s.View()
		for _, c := range []struct {
			name string
			rev  int64
		}{{"latest", 0}, {"old=100", rev}} {
			b.Run(fmt.Sprintf("keys=%d/%s/walk", n, c.name), func(b *testing.B) {
				runtime.GC() // the garbage of loading the store is not the page's
				b.ReportAllocs()
				for b.Loop() {
					page, err := v.RangeWith(from, end, 500, RangeOptions{Revision: c.rev})
					if err != nil || len(page.KVs) != 500 {
						b.Fatal(err)
					}
					if countWalk(v.st.tree, from, end, cmp0(c.rev, v.Revision())) != int64(n) {
						b.Fatal("count")
					}
				}
			})
			b.Run(fmt.Sprintf("keys=%d/%s/tree", n, c.name), func(b *testing.B) {
				runtime.GC()
				b.ReportAllocs()
				for b.Loop() {
					page, err := v.RangeWith(from, end, 500, RangeOptions{Revision: c.rev, WithCount: true})
					if err != nil || len(page.KVs) != 500 || page.Count != int64(n) {
						b.Fatal(err, page.Count)
					}
				}
			})
		}
		for _, c := range []struct {
			name string
			rev  int64
		}{{"latest", 0}, {"old=100", rev}} {
			b.Run(fmt.Sprintf("keys=%d/countonly/%s", n, c.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if got, _ := v.Count(from, end, c.rev); got != int64(n) {
						b.Fatal(got)
					}
				}
			})
		}
	}
}

// BenchmarkKeyspaceMemory reports bytes per key: the whole store (keys of 8 bytes,
// values of 16, one version each), and the tree alone over the same entries, as
// google/btree built it and as internal/ostree builds it (the counting's cost).
func BenchmarkKeyspaceMemory(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint("keys=", n), func(b *testing.B) {
			for b.Loop() {
				before := heapBytes()
				s := loaded(b, n, 16)
				store := heapBytes() - before
				var entries []*entry
				s.View().st.tree.Ascend(func(e *entry) bool { entries = append(entries, e); return true })
				before = heapBytes()
				old := btree.NewG(btreeDegree, entryLess)
				for _, e := range entries {
					old.ReplaceOrInsert(e)
				}
				oldTree := heapBytes() - before
				before = heapBytes()
				nt := newKeyTree()
				for _, e := range entries {
					nt.ReplaceOrInsert(e)
				}
				newTree := heapBytes() - before
				b.ReportMetric(float64(store)/float64(n), "store-B/key")
				b.ReportMetric(float64(oldTree)/float64(n), "btree-B/key")
				b.ReportMetric(float64(newTree)/float64(n), "ostree-B/key")
				runtime.KeepAlive(s)
				runtime.KeepAlive(old)
				runtime.KeepAlive(nt)
			}
		})
	}
}

func heapBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkApplyPutRandom is BenchmarkApplyPut with keys spread over 100k (a put
// lands on any leaf, not the last one), the write path the counting adds to.
func BenchmarkApplyPutRandom(b *testing.B) {
	s := NewStore()
	val := bytes.Repeat([]byte("v"), 256)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		data, _ := EncodeCommand(txn(Op{Type: OpPut, Key: benchKey(int(uint32(i) * 2654435761 % 100000)), Value: val}))
		s.Apply(uint64(i+1), data)
	}
}
