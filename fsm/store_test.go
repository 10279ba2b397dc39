package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// apply runs cmd through the encoded path, as raft would.
func apply(t testing.TB, s *Store, cmd *Command) *Result {
	t.Helper()
	data, err := EncodeCommand(cmd)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return s.Apply(s.AppliedIndex()+1, data)
}

func put(k, v string) Op     { return Op{Type: OpPut, Key: []byte(k), Value: []byte(v)} }
func del(k string) Op        { return Op{Type: OpDelete, Key: []byte(k)} }
func txn(ops ...Op) *Command { return &Command{Type: CmdTxn, Txn: &Txn{Success: ops}} }

func mustGet(t *testing.T, v *View, key string, rev int64) KeyValue {
	t.Helper()
	kv, err := v.Get([]byte(key), rev)
	if err != nil {
		t.Fatalf("get %q@%d: %v", key, rev, err)
	}
	return kv
}

func TestPutGetMetadata(t *testing.T) {
	s := NewStore()
	for i, want := range []struct {
		val                  string
		create, mod, version int64
	}{
		{"a", 1, 1, 1}, {"b", 1, 2, 2}, {"c", 1, 3, 3},
	} {
		res := apply(t, s, txn(put("k", want.val)))
		if res.Err != nil || res.Revision != int64(i+1) {
			t.Fatalf("put %d: %+v", i, res)
		}
		kv := mustGet(t, s.View(), "k", 0)
		if string(kv.Value) != want.val || kv.CreateRevision != want.create ||
			kv.ModRevision != want.mod || kv.Version != want.version {
			t.Fatalf("put %d: got %+v, want %+v", i, kv, want)
		}
	}
	// Older revisions stay readable until compacted.
	if kv := mustGet(t, s.View(), "k", 1); string(kv.Value) != "a" {
		t.Fatalf("k@1 = %q", kv.Value)
	}
	// Delete, then re-create: a new generation starts at version 1.
	res := apply(t, s, txn(del("k")))
	if res.Revision != 4 || res.Responses[0].Deleted != 1 || string(res.Responses[0].PrevKV.Value) != "c" {
		t.Fatalf("delete: %+v", res)
	}
	if _, err := s.View().Get([]byte("k"), 0); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	apply(t, s, txn(put("k", "d")))
	if kv := mustGet(t, s.View(), "k", 0); kv.CreateRevision != 5 || kv.Version != 1 {
		t.Fatalf("re-created: %+v", kv)
	}
	if kv := mustGet(t, s.View(), "k", 3); string(kv.Value) != "c" {
		t.Fatalf("k@3 = %q", kv.Value)
	}
}

func TestDeleteAbsentDoesNotAdvanceRevision(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("a", "1")))
	res := apply(t, s, txn(del("missing")))
	if res.Err != nil || res.Revision != 1 || res.Responses[0].Deleted != 0 {
		t.Fatalf("delete of absent key: %+v", res)
	}
	res = apply(t, s, &Command{Type: CmdTxn, Txn: &Txn{Success: []Op{{Type: OpGet, Key: []byte("a")}}}})
	if res.Revision != 1 || len(res.Responses[0].KVs) != 1 {
		t.Fatalf("read-only txn: %+v", res)
	}
}

func TestDeleteRange(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("p/1", "x"), put("p/2", "x"), put("q", "x")))
	apply(t, s, txn(del("p/2")))
	res := apply(t, s, txn(Op{Type: OpDeleteRange, Key: []byte("p/"), End: PrefixEnd([]byte("p/"))}))
	if res.Responses[0].Deleted != 1 || res.Revision != 3 {
		t.Fatalf("delete range: %+v", res)
	}
	if n := s.View().Len(); n != 1 {
		t.Fatalf("live keys = %d, want 1", n)
	}
}

func TestTxnCompares(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("k", "v1")))
	apply(t, s, txn(put("k", "v2")))
	cases := []struct {
		name string
		cmp  Compare
		want bool
	}{
		{"value equal", Compare{Key: []byte("k"), Target: TargetValue, Result: CompareEqual, Value: []byte("v2")}, true},
		{"value less", Compare{Key: []byte("k"), Target: TargetValue, Result: CompareLess, Value: []byte("v3")}, true},
		{"value of absent", Compare{Key: []byte("x"), Target: TargetValue, Result: CompareNotEqual, Value: []byte("v")}, false},
		{"version", Compare{Key: []byte("k"), Target: TargetVersion, Result: CompareEqual, Int: 2}, true},
		{"mod revision", Compare{Key: []byte("k"), Target: TargetModRevision, Result: CompareGreater, Int: 1}, true},
		{"create revision", Compare{Key: []byte("k"), Target: TargetCreateRevision, Result: CompareEqual, Int: 1}, true},
		{"absent mod revision is 0", Compare{Key: []byte("x"), Target: TargetModRevision, Result: CompareEqual, Int: 0}, true},
		{"exists", Compare{Key: []byte("k"), Target: TargetExists, Result: CompareEqual, Int: 1}, true},
		{"not exists", Compare{Key: []byte("x"), Target: TargetExists, Result: CompareEqual, Int: 1}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := s.Revision()
			res := apply(t, s, &Command{Type: CmdTxn, Txn: &Txn{
				Compares: []Compare{c.cmp},
				Success:  []Op{put("ok", c.name)},
				Failure:  []Op{{Type: OpGet, Key: []byte("k")}},
			}})
			if res.Err != nil || res.Succeeded != c.want {
				t.Fatalf("succeeded = %v (err %v), want %v", res.Succeeded, res.Err, c.want)
			}
			if wrote := s.Revision() != before; wrote != c.want {
				t.Fatalf("revision moved = %v, want %v", wrote, c.want)
			}
			if !c.want && string(res.Responses[0].KVs[0].Value) != "v2" {
				t.Fatalf("failure branch read %+v", res.Responses[0])
			}
		})
	}
}

func TestTxnOneRevisionSequentialOps(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("k", "a")))
	res := apply(t, s, txn(put("k", "b"), put("k", "c"), put("n", "1"), del("n"), put("m", "1")))
	if res.Revision != 2 {
		t.Fatalf("revision = %d, want 2", res.Revision)
	}
	kv := mustGet(t, s.View(), "k", 0)
	if string(kv.Value) != "c" || kv.Version != 3 || kv.ModRevision != 2 || kv.CreateRevision != 1 {
		t.Fatalf("k = %+v", kv)
	}
	if _, err := s.View().Get([]byte("n"), 0); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("n created and deleted in one txn: %v", err)
	}
	if kv := mustGet(t, s.View(), "k", 1); string(kv.Value) != "a" {
		t.Fatalf("k@1 = %q", kv.Value)
	}
}

func TestInvalidCommandsChangeNothing(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("k", "v")))
	h := s.View().Hash()
	many := make([]Op, MaxTxnOps+1)
	for i := range many {
		many[i] = put(fmt.Sprint(i), "v")
	}
	for name, cmd := range map[string]*Command{
		"empty key":       txn(put("", "v")),
		"bad op":          txn(Op{Type: 9, Key: []byte("k")}),
		"range backwards": txn(Op{Type: OpDeleteRange, Key: []byte("b"), End: []byte("a")}),
		"too many ops":    txn(many...),
		"nil txn":         {Type: CmdTxn},
		"bad compare":     {Type: CmdTxn, Txn: &Txn{Compares: []Compare{{Key: []byte("k"), Target: TargetExists, Result: CompareLess}}}},
		"valid then bad":  txn(put("a", "1"), Op{Type: OpPut}),
	} {
		res := s.ApplyCommand(s.AppliedIndex()+1, cmd)
		if res.Err == nil {
			t.Errorf("%s: no error", name)
		}
		if s.View().Hash() != h {
			t.Errorf("%s: state changed", name)
		}
	}
	// A committed entry of a newer release stops the replica instead of being
	// skipped (which would make it diverge from the replicas that apply it).
	func() {
		defer func() {
			r := recover()
			if msg := fmt.Sprint(r); r == nil || !strings.Contains(msg, "entry 99") || !strings.Contains(msg, "upgrade") {
				t.Errorf("unknown format: recovered %v, want a panic naming the entry and the fix", r)
			}
		}()
		s.Apply(99, []byte{7, 1})
	}()
	if s.View().Hash() != h {
		t.Errorf("unknown format changed state")
	}
	if res := s.Apply(100, []byte{1, 1, 200}); !errors.Is(res.Err, ErrCorrupt) {
		t.Errorf("corrupt: %v", res.Err)
	}
	if s.AppliedIndex() != 100 || s.View().Hash() != h {
		t.Errorf("bad entries must advance only the applied index")
	}
}

func TestReadWindow(t *testing.T) {
	s := NewStore()
	for i := range 10 {
		apply(t, s, txn(put("k", fmt.Sprint(i))))
	}
	if res := apply(t, s, &Command{Type: CmdCompact, Revision: 5}); res.Err != nil {
		t.Fatal(res.Err)
	}
	v := s.View()
	if _, err := v.Get([]byte("k"), 4); !errors.Is(err, ErrCompacted) {
		t.Fatalf("get below compact revision: %v", err)
	}
	if kv := mustGet(t, v, "k", 5); string(kv.Value) != "4" {
		t.Fatalf("k@5 = %q", kv.Value)
	}
	if _, err := v.Get([]byte("k"), 11); !errors.Is(err, ErrFutureRevision) {
		t.Fatalf("get in the future: %v", err)
	}
	if _, _, err := v.Range(nil, nil, 3, 10); !errors.Is(err, ErrCompacted) {
		t.Fatalf("range below compact revision: %v", err)
	}
	for _, rev := range []int64{5, 4, 11} {
		if res := apply(t, s, &Command{Type: CmdCompact, Revision: rev}); res.Err == nil {
			t.Fatalf("compact to %d accepted", rev)
		}
	}
}

func TestCompactStepReclaims(t *testing.T) {
	s := NewStore()
	for i := range 1000 {
		apply(t, s, txn(put(fmt.Sprintf("k%02d", i%50), fmt.Sprint(i))))
	}
	apply(t, s, txn(del("k00")))
	// A new key's first version supersedes nothing: compacting at it leaves nothing
	// queued at the compact revision itself (that waits for the next compaction).
	apply(t, s, txn(put("zz", "1")))
	old := s.View() // a view taken before compaction keeps its history
	apply(t, s, &Command{Type: CmdCompact, Revision: s.Revision()})
	total := 0
	for {
		before := s.pending.len()
		n, more := s.CompactStep(7)
		if done := before - s.pending.len(); done > 7 {
			t.Fatalf("step processed %d queued entries > 7", done)
		}
		total += n
		if !more {
			break
		}
	}
	// 50 keys × 20 versions: 19 superseded each, plus k00's last version and tombstone.
	if want := 50*19 + 2; total != want {
		t.Fatalf("reclaimed %d versions, want %d", total, want)
	}
	if _, ok := s.cur.tree.Get(&entry{key: []byte("k00")}); ok {
		t.Fatalf("deleted key still in tree after compaction")
	}
	s.cur.tree.Ascend(func(e *entry) bool {
		if e.hist.next != nil {
			t.Fatalf("%s still has %v", e.key, e.hist.next)
		}
		return true
	})
	if kv := mustGet(t, old, "k01", 2); string(kv.Value) != "1" {
		t.Fatalf("old view lost history: %q", kv.Value)
	}
}

func TestRangePaging(t *testing.T) {
	s := NewStore()
	for i := range 100 {
		apply(t, s, txn(put(fmt.Sprintf("a/%03d", i), "v")))
	}
	rev := s.Revision()
	for i := 0; i < 100; i += 2 {
		apply(t, s, txn(del(fmt.Sprintf("a/%03d", i))))
	}
	apply(t, s, txn(put("b", "outside")))
	v := s.View()
	for _, tc := range []struct {
		rev   int64
		limit int
		want  int
	}{{rev, 7, 100}, {0, 7, 50}, {0, 0, 50}, {rev, 100, 100}} {
		var got []KeyValue
		from := []byte("a/")
		pages := 0
		for from != nil {
			kvs, next, err := v.Range(from, PrefixEnd([]byte("a/")), tc.rev, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if tc.limit > 0 && len(kvs) > tc.limit {
				t.Fatalf("page of %d > limit %d", len(kvs), tc.limit)
			}
			got = append(got, kvs...)
			from = next
			pages++
		}
		if len(got) != tc.want {
			t.Fatalf("rev %d limit %d: %d keys, want %d", tc.rev, tc.limit, len(got), tc.want)
		}
		for i := 1; i < len(got); i++ {
			if bytes.Compare(got[i-1].Key, got[i].Key) >= 0 {
				t.Fatalf("keys out of order")
			}
		}
	}
}

func TestClusterMetaSetOnce(t *testing.T) {
	s := NewStore()
	if _, _, ok := s.ClusterMeta(); ok {
		t.Fatal("meta before set")
	}
	apply(t, s, &Command{Type: CmdClusterMeta, ClusterID: "c1", Secret: []byte("s1")})
	apply(t, s, &Command{Type: CmdClusterMeta, ClusterID: "c2", Secret: []byte("s2")})
	if id, secret, ok := s.ClusterMeta(); !ok || id != "c1" || string(secret) != "s1" {
		t.Fatalf("meta = %q %q %v", id, secret, ok)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := NewStore()
	apply(t, s, &Command{Type: CmdClusterMeta, ClusterID: "c", Secret: []byte("secret")})
	for i := range 300 {
		apply(t, s, txn(put(fmt.Sprintf("k%d", i%40), fmt.Sprint(i))))
		if i%7 == 0 {
			apply(t, s, txn(del(fmt.Sprintf("k%d", i%40))))
		}
	}
	apply(t, s, &Command{Type: CmdCompact, Revision: 100})
	snap := s.Snapshot()
	apply(t, s, txn(put("after", "snapshot"))) // writes go on; the snapshot does not see them
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	r := NewStore()
	if err := r.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if _, err := r.View().Get([]byte("after"), 0); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("restored a write made after the snapshot: %v", err)
	}
	want := snapshotStore(t, s, snap)
	if r.View().Hash() != want.View().Hash() || r.AppliedIndex() != snap.AppliedIndex() {
		t.Fatal("restored state differs")
	}
	// Reads at old revisions agree, and compaction works on the restored queue.
	if r.Revision() < 100 {
		t.Fatalf("restored revision %d: the range loop below would not run", r.Revision())
	}
	for rev := int64(100); rev <= r.Revision(); rev += 13 {
		a, _, err := want.View().Range(nil, nil, rev, 0)
		if err != nil {
			t.Fatalf("range of the snapshot's store at %d: %v", rev, err)
		}
		b, _, err := r.View().Range(nil, nil, rev, 0)
		if err != nil {
			t.Fatalf("range of the restored store at %d: %v", rev, err)
		}
		if len(a) == 0 {
			t.Fatalf("range at %d is empty: nothing compared", rev)
		}
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("range at %d differs", rev)
		}
	}
	apply(t, r, &Command{Type: CmdCompact, Revision: r.Revision()})
	for _, more := r.CompactStep(100); more; _, more = r.CompactStep(100) {
	}
	r.cur.tree.Ascend(func(e *entry) bool {
		if e.hist.tombstone() || e.hist.next != nil {
			t.Fatalf("%s not compacted after restore", e.key)
		}
		return true
	})

	// Damage anywhere is refused and leaves the store unchanged.
	h := r.View().Hash()
	data := buf.Bytes()
	for _, i := range []int{0, 9, len(data) / 2, len(data) - 1} {
		bad := bytes.Clone(data)
		bad[i] ^= 0x40
		err := r.Restore(bytes.NewReader(bad))
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnknownFormat) && !(i < 8 && errors.Is(err, ErrNotSnapshot)) {
			t.Fatalf("flipped byte %d: %v", i, err)
		}
	}
	if err := r.Restore(bytes.NewReader(data[:len(data)-3])); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("truncated: %v", err)
	}
	if r.View().Hash() != h {
		t.Fatal("failed restore changed state")
	}
}

// snapshotStore rebuilds the store a snapshot was taken of, for comparison.
func snapshotStore(t *testing.T, _ *Store, snap *Snapshot) *Store {
	t.Helper()
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	s := NewStore()
	if err := s.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResultCodecRoundTrip(t *testing.T) {
	res := &Result{Revision: 7, Succeeded: true, Err: fmt.Errorf("%w: op 1: empty key", ErrInvalidCommand),
		Responses: []OpResponse{
			{Type: OpPut, PrevKV: &KeyValue{Key: []byte("k"), Value: []byte("v"), CreateRevision: 1, ModRevision: 2, Version: 2}},
			{Type: OpGet, KVs: []KeyValue{{Key: []byte("a")}, {Key: []byte("b"), Value: []byte("x")}}, More: true},
			{Type: OpDeleteRange, Deleted: 3},
		}}
	b, err := EncodeResult(res)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeResult(b)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(got.Err, ErrInvalidCommand) || got.Err.Error() != res.Err.Error() {
		t.Fatalf("error = %v", got.Err)
	}
	got.Err, res.Err = nil, nil
	if !reflect.DeepEqual(got, res) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, res)
	}
}

// TestCompactQueueFIFO: the block queue keeps order and length across block
// boundaries, with pushes and pops interleaved and the queue drained to empty and
// refilled.
func TestCompactQueueFIFO(t *testing.T) {
	var q compactQueue
	next, want := int64(0), int64(0)
	for round := range 3 {
		for range 3*compactBlock + 17 {
			q.push(next, nil)
			next++
			if next%3 == 0 {
				p, ok := q.peek()
				if !ok || p.rev != want {
					t.Fatalf("round %d: peek = %d, %v; want %d", round, p.rev, ok, want)
				}
				q.pop()
				want++
			}
		}
		for q.len() > 0 {
			if p, _ := q.peek(); p.rev != want {
				t.Fatalf("round %d: drained %d, want %d", round, p.rev, want)
			}
			q.pop()
			want++
		}
		if _, ok := q.peek(); ok || want != next {
			t.Fatalf("round %d: not empty at %d/%d", round, want, next)
		}
	}
	if q2 := newCompactQueue([]pendingKey{{rev: 1}, {rev: 2}}); q2.len() != 2 {
		t.Fatalf("newCompactQueue len %d", q2.len())
	}
}

// TestTxnCompareCreateRevision: a create_revision guard compares the revision that
// created the key, never its mod revision. The key is created at A, modified at B, and
// each guard against A or B (equal, not equal, less, greater) holds only for A; a key
// deleted and put again has the revision of its new creation.
func TestTxnCompareCreateRevision(t *testing.T) {
	s := NewStore()
	a := apply(t, s, txn(put("k", "v1"))).Revision
	apply(t, s, txn(put("other", "x")))
	b := apply(t, s, txn(put("k", "v2"))).Revision
	if kv := mustGet(t, s.View(), "k", 0); kv.CreateRevision != a || kv.ModRevision != b || a == b {
		t.Fatalf("k = %+v, want created at %d, modified at %d", kv, a, b)
	}
	guard := func(r CompareResult, operand int64) bool {
		t.Helper()
		before := s.Revision()
		res := apply(t, s, &Command{Type: CmdTxn, Txn: &Txn{
			Compares: []Compare{{Key: []byte("k"), Target: TargetCreateRevision, Result: r, Int: operand}},
			Success:  []Op{put("ok", "x")}}})
		if res.Err != nil {
			t.Fatalf("txn: %v", res.Err)
		}
		if wrote := s.Revision() != before; wrote != res.Succeeded {
			t.Fatalf("succeeded %v but revision moved %v", res.Succeeded, wrote)
		}
		return res.Succeeded
	}
	for _, c := range []struct {
		result  CompareResult
		operand int64
		want    bool
	}{
		{CompareEqual, a, true}, {CompareEqual, b, false},
		{CompareNotEqual, b, true}, {CompareNotEqual, a, false},
		{CompareLess, b, true}, {CompareLess, a, false},
		{CompareGreater, a - 1, true}, {CompareGreater, a, false},
	} {
		if got := guard(c.result, c.operand); got != c.want {
			name := map[CompareResult]string{CompareEqual: "equal", CompareNotEqual: "not_equal",
				CompareLess: "less", CompareGreater: "greater"}[c.result]
			t.Errorf("create_revision %s %d (created %d, modified %d) = %v, want %v", name, c.operand, a, b, got, c.want)
		}
	}
	apply(t, s, txn(del("k")))
	c := apply(t, s, txn(put("k", "v3"))).Revision
	if !guard(CompareEqual, c) || guard(CompareEqual, a) {
		t.Errorf("after delete and put at %d: create_revision guard still sees %d", c, a)
	}
}

// TestRestoreAtRefusesStaleSnapshot: a snapshot raft installs at an index below the
// applied one changes nothing (ErrStaleSnapshot); one at the applied index or later,
// into an empty store or over a newer revision (an operator's restore), replaces the
// state, whose applied index becomes the install index.
func TestRestoreAtRefusesStaleSnapshot(t *testing.T) {
	src := NewStore()
	for i := uint64(1); i <= 5; i++ {
		src.ApplyCommand(i, txn(put("k", fmt.Sprint(i))))
	}
	var old bytes.Buffer
	if _, err := src.Snapshot().WriteTo(&old); err != nil {
		t.Fatal(err)
	}
	for i := uint64(6); i <= 9; i++ {
		src.ApplyCommand(i, txn(put("k", fmt.Sprint(i))))
	}

	s := NewStore()
	if err := s.RestoreAt(bytes.NewReader(old.Bytes()), 5); err != nil {
		t.Fatalf("restore into an empty store: %v", err)
	}
	if s.AppliedIndex() != 5 || s.Revision() != 5 {
		t.Fatalf("after restore: applied %d, revision %d, want 5, 5", s.AppliedIndex(), s.Revision())
	}
	for i := uint64(6); i <= 9; i++ {
		s.ApplyCommand(i, txn(put("k", fmt.Sprint(i))))
	}
	h := s.View().Hash()
	if err := s.RestoreAt(bytes.NewReader(old.Bytes()), 5); !errors.Is(err, ErrStaleSnapshot) {
		t.Fatalf("snapshot at 5 over state at 9: %v, want ErrStaleSnapshot", err)
	}
	if s.View().Hash() != h || s.AppliedIndex() != 9 || s.Revision() != 9 {
		t.Fatalf("refused restore changed the state: applied %d, revision %d", s.AppliedIndex(), s.Revision())
	}
	// An operator's restore: raft installs the old state at a fresh index.
	if err := s.RestoreAt(bytes.NewReader(old.Bytes()), 12); err != nil {
		t.Fatalf("snapshot at 12 over state at 9: %v", err)
	}
	if s.AppliedIndex() != 12 || s.Revision() != 5 {
		t.Fatalf("after the operator's restore: applied %d, revision %d, want 12, 5", s.AppliedIndex(), s.Revision())
	}
	if err := s.RestoreAt(bytes.NewReader(old.Bytes()), 12); err != nil {
		t.Fatalf("snapshot at the applied index: %v", err)
	}
}
