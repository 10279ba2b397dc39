package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// countKeys is the keyspace of the count test: six prefixes of 600 keys, enough for a
// tree of degree 32 two or three levels deep, so that splits, merges and steals all
// happen (internal/ostree's own test goes deeper, at small degrees).
func countKeys() []string {
	var keys []string
	for p := range 6 {
		for i := range 600 {
			keys = append(keys, fmt.Sprintf("p%d/%03d", p, i))
		}
	}
	sort.Strings(keys)
	return keys
}

// bruteCount counts the keys of [key, end) live at rev in the model, key by key, with
// RangeWith's bounds (end nil: key alone; empty: no upper bound).
func (m *model) bruteCount(keys []string, key, end []byte, rev int64) int64 {
	n := int64(0)
	for _, k := range keys[sort.SearchStrings(keys, string(key)):] {
		if end == nil && k != string(key) || len(end) > 0 && k >= string(end) {
			break
		}
		if m.get(k, rev) != nil {
			n++
		}
	}
	return n
}

// countRange is one range the count test asks about.
type countRange struct{ key, end []byte }

func randCountRange(rng *rand.Rand, keys []string) countRange {
	k := []byte(keys[rng.IntN(len(keys))])
	switch rng.IntN(8) {
	case 0:
		return countRange{key: k} // the key alone
	case 1:
		return countRange{key: k, end: []byte{}} // every key >= k
	case 2:
		return countRange{key: []byte{0}, end: []byte{}} // everything
	case 3:
		p := k[:3] // "pN/": a prefix, as a list asks
		return countRange{key: p, end: PrefixEnd(p)}
	case 4:
		return countRange{key: k, end: k} // empty: end at key
	case 5:
		return countRange{key: k, end: []byte("p")} // end before key
	default:
		e := []byte(keys[rng.IntN(len(keys))])
		if bytes.Compare(e, k) < 0 {
			k, e = e, k
		}
		return countRange{key: k, end: append(e, 'x')} // bounded, between stored keys
	}
}

// TestCountAgainstModel drives a store with random transactions (puts, deletes, delete
// ranges, a key written twice in one transaction), compactions with random reclaiming,
// and restores from snapshots, and checks every way to count — View.Count, RangeWith
// with WithCount (a page) and CountOnly, and a transaction's get — at the latest and
// at older retained revisions, against a count of the model key by key. Views taken
// earlier are checked again later: counts stay those of their state.
func TestCountAgainstModel(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runCountModel(t, seed, 250) })
	}
}

func runCountModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	keys := countKeys()
	m := &model{hist: map[string][]modelVersion{}}
	s := NewStore()
	type heldView struct {
		v    *View
		step int
	}
	var held []heldView
	for step := range steps {
		var cmd *Command
		switch r := rng.IntN(20); {
		case r < 2 && m.rev > m.compact:
			cmd = &Command{Type: CmdCompact, Revision: m.compact + 1 + rng.Int64N(m.rev-m.compact)}
		case r < 3:
			s = restoredCopy(t, s)
		default:
			cmd = &Command{Type: CmdTxn, Txn: randCountTxn(rng, keys, step)}
		}
		if cmd != nil {
			// A get first in the transaction reads the state before it: its count is
			// the model's before the transaction, at the latest or an older revision.
			rr := randCountRange(rng, keys)
			rev := int64(0)
			if m.rev > m.compact && rng.IntN(2) == 0 {
				rev = max(m.compact, 1) + rng.Int64N(m.rev-max(m.compact, 1)+1)
			}
			want := m.bruteCount(keys, rr.key, rr.end, cmp0(rev, m.rev))
			if cmd.Type == CmdTxn {
				get := Op{Type: OpGet, Key: rr.key, End: rr.end, Limit: 3, Range: RangeOptions{Revision: rev, WithCount: true}}
				if len(rr.end) > 0 && bytes.Compare(rr.end, rr.key) <= 0 {
					get.End = nil // validateOp refuses an empty range
					want = m.bruteCount(keys, rr.key, nil, cmp0(rev, m.rev))
				}
				cmd.Txn.Success = append([]Op{get}, cmd.Txn.Success...)
				cmd.Txn.Failure = append([]Op{get}, cmd.Txn.Failure...)
			}
			res := apply(t, s, cmd)
			switch cmd.Type {
			case CmdCompact:
				if res.Err != nil {
					t.Fatalf("step %d: compact %d: %v", step, cmd.Revision, res.Err)
				}
				m.compact = cmd.Revision
			case CmdTxn:
				if ok := m.txn(cmd.Txn); ok != res.Succeeded || res.Err != nil {
					t.Fatalf("step %d: succeeded %v want %v (err %v)", step, res.Succeeded, ok, res.Err)
				}
				if got := res.Responses[0].Count; got != want {
					t.Fatalf("step %d: txn get count [%q, %q)@%d = %d, want %d", step, rr.key, rr.end, rev, got, want)
				}
			}
			if res.Revision != m.rev {
				t.Fatalf("step %d: revision %d, model %d", step, res.Revision, m.rev)
			}
		}
		s.CompactStep(rng.IntN(64))
		v := s.View()
		if err := v.st.tree.Verify(); err != nil {
			t.Fatalf("step %d: keyspace tree: %v", step, err)
		}
		checkCounts(t, step, v, m, keys, rng)
		if step%10 == 0 {
			held = append(held, heldView{v: v, step: step})
		}
		for _, h := range held {
			if rng.IntN(4) == 0 {
				checkCounts(t, step, h.v, m, keys, rng)
			}
		}
	}
}

// cmp0 is rev, or latest when rev is 0.
func cmp0(rev, latest int64) int64 {
	if rev == 0 {
		return latest
	}
	return rev
}

// randCountTxn is a transaction of up to 120 ops on keys: puts, deletes, delete ranges
// (bounded or to the end), and now and then a key put and deleted in the same
// transaction (the store applies such duplicates; etcd's door refuses them).
func randCountTxn(rng *rand.Rand, keys []string, step int) *Txn {
	key := func() []byte { return []byte(keys[rng.IntN(len(keys))]) }
	tx := &Txn{}
	if rng.IntN(4) == 0 {
		tx.Compares = []Compare{{Key: key(), Target: TargetExists, Result: CompareEqual, Int: rng.Int64N(2)}}
	}
	n := 1 + rng.IntN(60)
	growing := step%80 < 50 // phases of growth (a tree three levels deep) and shrinking
	if growing {
		n = 1 + rng.IntN(120)
	}
	ops := make([]Op, 0, n)
	for range n {
		r := rng.IntN(100)
		if growing {
			r = r * 90 / 100 // puts and single deletes only
		}
		switch {
		case r < 60 || growing && r < 80:
			ops = append(ops, Op{Type: OpPut, Key: key(), Value: []byte(fmt.Sprint(rng.IntN(1000)))})
		case r < 90:
			ops = append(ops, Op{Type: OpDelete, Key: key()})
		case r < 93:
			k := key()
			ops = append(ops, Op{Type: OpPut, Key: k, Value: []byte("dup")}, Op{Type: OpDelete, Key: k})
		case r < 96:
			k, e := key(), key()
			if bytes.Compare(e, k) < 0 {
				k, e = e, k
			}
			ops = append(ops, Op{Type: OpDeleteRange, Key: k, End: append(e, 'x')})
		case r < 97:
			ops = append(ops, Op{Type: OpDeleteRange, Key: key(), End: nil}) // to the end
		default:
			p := key()[:3]
			ops = append(ops, Op{Type: OpDeleteRange, Key: p, End: PrefixEnd(p)})
		}
	}
	if len(ops) > MaxTxnOps {
		ops = ops[:MaxTxnOps]
	}
	if rng.IntN(5) == 0 {
		tx.Failure = ops
	} else {
		tx.Success = ops
	}
	return tx
}

// checkCounts counts random ranges of v at its latest revision and at random older
// revisions it still serves, every way, against the model.
func checkCounts(t *testing.T, step int, v *View, m *model, keys []string, rng *rand.Rand) {
	t.Helper()
	lo := max(v.CompactRevision(), 1)
	revs := []int64{0}
	for range 3 {
		if v.Revision() >= lo {
			revs = append(revs, lo+rng.Int64N(v.Revision()-lo+1))
		}
	}
	for _, rev := range revs {
		at := cmp0(rev, v.Revision())
		for range 6 {
			rr := randCountRange(rng, keys)
			want := m.bruteCount(keys, rr.key, rr.end, at)
			got, err := v.Count(rr.key, rr.end, rev)
			if err != nil || got != want {
				t.Fatalf("step %d: Count [%q, %q)@%d (view rev %d) = %d, %v; want %d",
					step, rr.key, rr.end, at, v.Revision(), got, err, want)
			}
			page, err := v.RangeWith(rr.key, rr.end, 5, RangeOptions{Revision: rev, WithCount: true})
			if err != nil || page.Count != want || int64(len(page.KVs)) != min(want, 5) || page.More != (want > 5) {
				t.Fatalf("step %d: RangeWith [%q, %q)@%d limit 5 = %d keys, count %d, more %v, %v; want count %d",
					step, rr.key, rr.end, at, len(page.KVs), page.Count, page.More, err, want)
			}
			only, err := v.RangeWith(rr.key, rr.end, 0, RangeOptions{Revision: rev, CountOnly: true})
			if err != nil || only.Count != want || len(only.KVs) != 0 {
				t.Fatalf("step %d: CountOnly [%q, %q)@%d = %d, %v; want %d", step, rr.key, rr.end, at, only.Count, err, want)
			}
		}
	}
}
