package ostree

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

type item struct {
	key   int
	live  bool
	stamp int64
}

func newTestTree(degree int) *Tree[*item] {
	return New(degree, func(a, b *item) bool { return a.key < b.key },
		func(it *item) (bool, int64) { return it.live, it.stamp })
}

// model is a map of key to item, the brute-force answer to every query.
type model map[int]*item

func (m model) countRange(lo, hi int) int {
	n := 0
	for k, it := range m {
		if k >= lo && k < hi && it.live {
			n++
		}
	}
	return n
}

func (m model) stampAbove(lo, hi int, stamp int64) []int {
	var keys []int
	for k, it := range m {
		if k >= lo && k < hi && it.stamp > stamp {
			keys = append(keys, k)
		}
	}
	sort.Ints(keys)
	return keys
}

func (m model) clone() model {
	c := model{}
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestTreeAgainstModel inserts, replaces and deletes at random (deletes in bursts, so
// nodes merge and steal), at degrees small and large, and checks the aggregates, every
// query and the clones taken on the way, which must not move.
func TestTreeAgainstModel(t *testing.T) {
	for _, degree := range []int{2, 3, 5, 32} {
		t.Run(fmt.Sprint("degree=", degree), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(degree), 1))
			tr, m := newTestTree(degree), model{}
			type clone struct {
				tr *Tree[*item]
				m  model
			}
			var clones []clone
			stamp := int64(0)
			for step := range 6000 {
				k := rng.IntN(2000)
				switch r := rng.IntN(10); {
				case r < 6 || (step/500)%3 != 2:
					stamp++
					it := &item{key: k, live: rng.IntN(3) > 0, stamp: stamp}
					if rng.IntN(10) == 0 {
						it.stamp = rng.Int64N(stamp + 1) // a lower stamp: the bound goes stale
					}
					old, found := tr.ReplaceOrInsert(it)
					if mo, ok := m[k]; found != ok || (found && old != mo) {
						t.Fatalf("step %d: replace %d = %v, %v; model %v, %v", step, k, old, found, mo, ok)
					}
					m[k] = it
				default:
					old, found := tr.Delete(&item{key: k})
					if mo, ok := m[k]; found != ok || (found && old != mo) {
						t.Fatalf("step %d: delete %d = %v, %v; model %v, %v", step, k, old, found, mo, ok)
					}
					delete(m, k)
				}
				if step%50 == 0 {
					clones = append(clones, clone{tr: tr.Clone(), m: m.clone()})
				}
				if step%97 == 0 {
					checkTree(t, step, tr, m, rng)
					for range min(len(clones), 3) {
						c := clones[rng.IntN(len(clones))]
						checkTree(t, step, c.tr, c.m, rng)
					}
				}
			}
		})
	}
}

func checkTree(t *testing.T, step int, tr *Tree[*item], m model, rng *rand.Rand) {
	t.Helper()
	if err := tr.Verify(); err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	if tr.Len() != len(m) || tr.Count() != m.countRange(-1, 1<<30) {
		t.Fatalf("step %d: len %d count %d, model %d %d", step, tr.Len(), tr.Count(), len(m), m.countRange(-1, 1<<30))
	}
	prev := -1
	tr.Ascend(func(it *item) bool {
		if it.key <= prev || m[it.key] != it {
			t.Fatalf("step %d: ascend out of order or stray item at %d", step, it.key)
		}
		prev = it.key
		return true
	})
	for range 8 {
		lo, hi := rng.IntN(2100)-50, rng.IntN(2100)-50
		if lo > hi {
			lo, hi = hi, lo
		}
		got := tr.CountLess(&item{key: hi}) - tr.CountLess(&item{key: lo})
		if want := m.countRange(lo, hi); got != want {
			t.Fatalf("step %d: count [%d, %d) = %d, want %d", step, lo, hi, got, want)
		}
		s := rng.Int64N(tr.Stamp() + 2)
		var keys []int
		hiItem := &item{key: hi}
		tr.AscendStampAbove(&item{key: lo}, &hiItem, s, func(it *item) bool { keys = append(keys, it.key); return true })
		if want := m.stampAbove(lo, hi, s); fmt.Sprint(keys) != fmt.Sprint(want) {
			t.Fatalf("step %d: stamp above %d in [%d, %d) = %v, want %v", step, s, lo, hi, keys, want)
		}
		var all []int
		tr.AscendRange(&item{key: lo}, &item{key: hi}, func(it *item) bool { all = append(all, it.key); return true })
		if len(all) != len(m.stampAbove(lo, hi, -1)) {
			t.Fatalf("step %d: ascend range [%d, %d) = %d items, want %d", step, lo, hi, len(all), len(m.stampAbove(lo, hi, -1)))
		}
	}
}
