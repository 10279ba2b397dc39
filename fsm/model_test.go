package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
)

// model is the simplest correct MVCC store: per key, every (revision, value-or-deleted)
// it ever had. The randomized test drives it and the real Store with the same commands
// and compares every read at every live revision.
type model struct {
	rev, compact int64
	hist         map[string][]modelVersion
}

type modelVersion struct {
	rev int64
	kv  *KeyValue // nil: deleted at rev
}

func (m *model) latest(key string) *KeyValue {
	h := m.hist[key]
	if len(h) == 0 {
		return nil
	}
	return h[len(h)-1].kv
}

func (m *model) get(key string, rev int64) *KeyValue {
	var kv *KeyValue
	for _, v := range m.hist[key] {
		if v.rev <= rev {
			kv = v.kv
		}
	}
	return kv
}

func (m *model) compare(c Compare) bool {
	kv := m.latest(string(c.Key))
	var field, operand int64
	var cmp int
	switch c.Target {
	case TargetValue:
		if kv == nil {
			return false
		}
		cmp = bytes.Compare(kv.Value, c.Value)
	case TargetExists:
		if kv != nil {
			field = 1
		}
		operand = c.Int
		cmp = cmpInt(field, operand)
	default:
		if kv != nil {
			field = map[CompareTarget]int64{TargetVersion: kv.Version, TargetModRevision: kv.ModRevision,
				TargetCreateRevision: kv.CreateRevision}[c.Target]
		}
		cmp = cmpInt(field, c.Int)
	}
	switch c.Result {
	case CompareEqual:
		return cmp == 0
	case CompareNotEqual:
		return cmp != 0
	case CompareLess:
		return cmp < 0
	default:
		return cmp > 0
	}
}

// txn applies t with plain sequential semantics on a scratch copy of the latest state.
func (m *model) txn(t *Txn) (succeeded bool) {
	succeeded = true
	for _, c := range t.Compares {
		if !m.compare(c) {
			succeeded = false
			break
		}
	}
	ops := t.Success
	if !succeeded {
		ops = t.Failure
	}
	rev := m.rev + 1
	cur := map[string]*KeyValue{}
	wrote := false // any put, or any delete of a live key, takes a revision
	latest := func(k string) *KeyValue {
		if kv, ok := cur[k]; ok {
			return kv
		}
		return m.latest(k)
	}
	for _, op := range ops {
		k := string(op.Key)
		switch op.Type {
		case OpPut:
			nkv := &KeyValue{Key: op.Key, Value: op.Value, CreateRevision: rev, ModRevision: rev, Version: 1}
			if old := latest(k); old != nil {
				nkv.CreateRevision, nkv.Version = old.CreateRevision, old.Version+1
			}
			cur[k] = nkv
			wrote = true
		case OpDelete:
			if latest(k) != nil {
				cur[k] = nil
				wrote = true
			}
		case OpDeleteRange:
			for key := range m.keysUnion(cur) {
				if key >= k && (op.End == nil || key < string(op.End)) && latest(key) != nil {
					cur[key] = nil
					wrote = true
				}
			}
		}
	}
	for k, kv := range cur {
		old := m.latest(k)
		if kv == nil && old == nil {
			continue // created and deleted within the transaction
		}
		m.hist[k] = append(m.hist[k], modelVersion{rev: rev, kv: kv})
	}
	if wrote {
		m.rev = rev
	}
	return succeeded
}

func (m *model) keysUnion(cur map[string]*KeyValue) map[string]bool {
	out := map[string]bool{}
	for k := range m.hist {
		out[k] = true
	}
	for k := range cur {
		out[k] = true
	}
	return out
}

func TestRandomAgainstModel(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runModel(t, seed, 400) })
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0))
	keys := []string{"a", "b", "b/1", "b/2", "c", "d", "e", "f"}
	randKey := func() []byte { return []byte(keys[rng.IntN(len(keys))]) }
	randOp := func() Op {
		switch rng.IntN(10) {
		case 0, 1, 2, 3, 4:
			return Op{Type: OpPut, Key: randKey(), Value: []byte(fmt.Sprint(rng.IntN(1000)))}
		case 5, 6:
			return Op{Type: OpDelete, Key: randKey()}
		case 7:
			start := randKey()
			return Op{Type: OpDeleteRange, Key: start, End: PrefixEnd(start)}
		default:
			return Op{Type: OpGet, Key: randKey()}
		}
	}
	m := &model{hist: map[string][]modelVersion{}}
	s := NewStore()
	for step := range steps {
		var cmd *Command
		switch r := rng.IntN(20); {
		case r < 2 && m.rev > m.compact:
			cmd = &Command{Type: CmdCompact, Revision: m.compact + 1 + rng.Int64N(m.rev-m.compact)}
		case r < 3:
			// Snapshot and restore into a fresh store, then go on with that one.
			s = restoredCopy(t, s)
			continue
		default:
			tx := &Txn{}
			for range rng.IntN(3) {
				c := Compare{Key: randKey(), Target: CompareTarget(1 + rng.IntN(5)), Result: CompareResult(1 + rng.IntN(4)),
					Value: []byte(fmt.Sprint(rng.IntN(1000))), Int: rng.Int64N(4)}
				if c.Target == TargetExists {
					c.Result, c.Int = CompareEqual, rng.Int64N(2)
				}
				tx.Compares = append(tx.Compares, c)
			}
			for range 1 + rng.IntN(3) {
				tx.Success = append(tx.Success, randOp())
			}
			for range rng.IntN(2) {
				tx.Failure = append(tx.Failure, randOp())
			}
			cmd = &Command{Type: CmdTxn, Txn: tx}
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
		}
		if res.Revision != m.rev {
			t.Fatalf("step %d: revision %d, model %d", step, res.Revision, m.rev)
		}
		// Reclaim a random amount of garbage: reads must not notice.
		s.CompactStep(rng.IntN(8))
		checkAllReads(t, step, s.View(), m, keys)
	}
}

func checkAllReads(t *testing.T, step int, v *View, m *model, keys []string) {
	t.Helper()
	if v.CompactRevision() != m.compact {
		t.Fatalf("step %d: compact revision %d, model %d", step, v.CompactRevision(), m.compact)
	}
	if _, err := v.Get([]byte("a"), m.compact-1); m.compact > 1 && !errors.Is(err, ErrCompacted) {
		t.Fatalf("step %d: read below compact revision: %v", step, err)
	}
	for rev := max(m.compact, 1); rev <= m.rev; rev++ {
		var want []KeyValue
		for _, k := range keys {
			exp := m.get(k, rev)
			got, err := v.Get([]byte(k), rev)
			if exp == nil {
				if !errors.Is(err, ErrKeyNotFound) {
					t.Fatalf("step %d: %s@%d = %+v, %v; want not found", step, k, rev, got, err)
				}
				continue
			}
			if err != nil || !bytes.Equal(got.Value, exp.Value) || got.CreateRevision != exp.CreateRevision ||
				got.ModRevision != exp.ModRevision || got.Version != exp.Version {
				t.Fatalf("step %d: %s@%d = %+v, %v; want %+v", step, k, rev, got, err, *exp)
			}
			want = append(want, got)
		}
		sort.Slice(want, func(i, j int) bool { return bytes.Compare(want[i].Key, want[j].Key) < 0 })
		// A paged range at rev returns exactly the live keys.
		var all []KeyValue
		for from := []byte(nil); ; {
			kvs, next, err := v.Range(from, nil, rev, 2)
			if err != nil {
				t.Fatalf("step %d: range@%d: %v", step, rev, err)
			}
			all = append(all, kvs...)
			if next == nil {
				break
			}
			from = next
		}
		if fmt.Sprint(all) != fmt.Sprint(want) {
			t.Fatalf("step %d: range@%d = %v, want %v", step, rev, all, want)
		}
	}
}

// restoredCopy is a fresh store restored from s's snapshot.
func restoredCopy(t testing.TB, s *Store) *Store {
	t.Helper()
	var buf bytes.Buffer
	if _, err := s.Snapshot().WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := NewStore()
	if err := r.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	return r
}
