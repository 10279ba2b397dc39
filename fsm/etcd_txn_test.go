package fsm

import (
	"errors"
	"reflect"
	"testing"
)

// Tests of the etcd KV semantics fsm implements (see doc.go, "etcd's KV API"). Each
// names the etcd v3.7 function whose behaviour it pins.

func nested(cmps []Compare, success, failure []Op) Op {
	return Op{Type: OpTxn, Txn: &Txn{Compares: cmps, Success: success, Failure: failure}}
}

func cmpOf(key string, target CompareTarget, result CompareResult, n int64) Compare {
	return Compare{Key: []byte(key), Target: target, Result: result, Int: n}
}

func getOp(key string) Op { return Op{Type: OpGet, Key: []byte(key)} }

// TestNestedTxnComparesSeePreTxnState: etcd evaluates every compare on the chosen path
// before any op runs (txn.go compareToPath reads the view the txn starts from), so a
// nested compare does not see the writes of the ops before it; the ops do (executeTxn
// runs them in order on one write txn), and all writes share one revision.
func TestNestedTxnComparesSeePreTxnState(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("x", "0"))) // rev 1
	res := apply(t, s, &Command{Type: CmdTxn, Txn: &Txn{Success: []Op{
		put("a", "1"),
		// a is absent before the txn: the nested compare holds although a was just put.
		nested([]Compare{cmpOf("a", TargetExists, CompareEqual, 0)},
			[]Op{put("b", "1"), getOp("a"), nested(nil, []Op{put("c", "1")}, nil)},
			[]Op{put("d", "1")}),
		nested([]Compare{cmpOf("x", TargetVersion, CompareGreater, 5)}, []Op{put("e", "1")}, []Op{del("x")}),
	}}})
	if res.Err != nil || res.Revision != 2 || !res.Succeeded || len(res.Responses) != 3 {
		t.Fatalf("result = %+v, want one revision (2) for the whole txn", res)
	}
	n1 := res.Responses[1].Txn
	if n1 == nil || !n1.Succeeded || n1.Revision != 0 || len(n1.Responses) != 3 {
		t.Fatalf("nested result = %+v, want success with 3 responses and revision 0", n1)
	}
	if kvs := n1.Responses[1].KVs; len(kvs) != 1 || string(kvs[0].Value) != "1" || kvs[0].ModRevision != 2 {
		t.Fatalf("nested get of a = %+v, want the outer put (ops see earlier writes)", kvs)
	}
	if n2 := n1.Responses[2].Txn; n2 == nil || !n2.Succeeded || n2.Responses[0].Type != OpPut {
		t.Fatalf("doubly nested result = %+v", n1.Responses[2])
	}
	if n3 := res.Responses[2].Txn; n3 == nil || n3.Succeeded || n3.Responses[0].Deleted != 1 {
		t.Fatalf("third nested = %+v, want its failure branch deleting x", res.Responses[2])
	}
	v := s.View()
	for _, k := range []string{"a", "b", "c"} {
		if kv := mustGet(t, v, k, 0); kv.ModRevision != 2 {
			t.Errorf("%s = %+v, want written at 2", k, kv)
		}
	}
	for _, k := range []string{"d", "e", "x"} {
		if _, err := v.Get([]byte(k), 0); !errors.Is(err, ErrKeyNotFound) {
			t.Errorf("%s: %v, want absent", k, err)
		}
	}
}

// TestNestedTxnReadOnly: a txn whose path writes nothing keeps the revision (etcd
// txn.go txn: rev++ only with changes).
func TestNestedTxnReadOnly(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("a", "1")))
	res := apply(t, s, txn(nested(nil, []Op{getOp("a"), del("zz")}, nil)))
	if res.Err != nil || res.Revision != 1 || len(res.Responses[0].Txn.Responses[0].KVs) != 1 {
		t.Fatalf("result = %+v", res)
	}
}

// chain nests depth transactions, each the only op of its parent; the innermost holds
// inner.
func chain(depth int, inner []Op) *Txn {
	t := &Txn{Success: inner}
	for i := 1; i < depth; i++ {
		t = &Txn{Success: []Op{{Type: OpTxn, Txn: t}}}
	}
	return t
}

// TestNestedTxnBudget: etcd shares max-txn-ops with nested transactions
// (v3rpc/key.go checkTxnRequest: a nested txn gets maxTxnOps minus its parent's
// longest list), which bounds nesting to MaxTxnDepth.
func TestNestedTxnBudget(t *testing.T) {
	gets := func(n int) []Op {
		ops := make([]Op, n)
		for i := range ops {
			ops[i] = getOp("k")
		}
		return ops
	}
	cmps := func(n int) []Compare {
		cs := make([]Compare, n)
		for i := range cs {
			cs[i] = cmpOf("k", TargetVersion, CompareEqual, 0)
		}
		return cs
	}
	tests := []struct {
		name string
		t    *Txn
		err  error
	}{
		{"nested uses what its parent leaves", &Txn{Success: append(gets(2), nested(nil, gets(MaxTxnOps-3), nil))}, nil},
		{"nested one over", &Txn{Success: append(gets(2), nested(nil, gets(MaxTxnOps-2), nil))}, ErrTooManyOps},
		{"parent's compares count", &Txn{Compares: cmps(4), Success: []Op{nested(nil, gets(MaxTxnOps-4), nil)}}, nil},
		{"parent's compares count, one over", &Txn{Compares: cmps(4), Success: []Op{nested(nil, gets(MaxTxnOps-3), nil)}}, ErrTooManyOps},
		{"deepest chain", chain(MaxTxnDepth, nil), nil},
		{"too deep", chain(MaxTxnDepth, gets(1)), ErrTooManyOps},
		{"nil nested", &Txn{Success: []Op{{Type: OpTxn}}}, ErrInvalidCommand},
		{"txn op with a key", &Txn{Success: []Op{{Type: OpTxn, Key: []byte("k"), Txn: &Txn{}}}}, ErrInvalidCommand},
	}
	for i, tt := range tests {
		s := NewStore()
		res := s.ApplyCommand(1, &Command{Type: CmdTxn, Txn: tt.t})
		if !errors.Is(res.Err, tt.err) || (tt.err == nil) != (res.Err == nil) {
			t.Errorf("#%d %s: err = %v, want %v", i, tt.name, res.Err, tt.err)
		}
	}
}

// TestTxnChecksBeforeWriting: etcd checks every op on the path (txn.go checkTxn:
// checkRange's revision window, checkPut's lease and ignore_* key) before the first
// write; the first failure in op order fails the whole txn, nothing written.
func TestTxnChecksBeforeWriting(t *testing.T) {
	ignoreValue := Op{Type: OpPut, Key: []byte("absent"), IgnoreValue: true}
	ignoreLease := Op{Type: OpPut, Key: []byte("absent"), Value: []byte("v"), IgnoreLease: true}
	leased := Op{Type: OpPut, Key: []byte("l"), Value: []byte("v"), Lease: 99}
	future := Op{Type: OpGet, Key: []byte("a"), Range: RangeOptions{Revision: 50}}
	tests := []struct {
		name string
		ops  []Op
		err  error
	}{
		{"ignore_value of an absent key", []Op{put("a", "2"), ignoreValue}, ErrKeyNotFound},
		{"ignore_lease of an absent key, nested", []Op{put("a", "2"), nested(nil, []Op{ignoreLease}, nil)}, ErrKeyNotFound},
		{"absent key put earlier in the txn", []Op{put("absent", "1"), ignoreValue}, ErrKeyNotFound},
		{"first failure wins: lease", []Op{leased, ignoreValue}, ErrLeaseNotFound},
		{"first failure wins: key", []Op{ignoreValue, leased}, ErrKeyNotFound},
		{"future revision read", []Op{put("a", "2"), future}, ErrFutureRevision},
		{"compacted revision read", []Op{put("a", "2"), {Type: OpGet, Key: []byte("a"), Range: RangeOptions{Revision: 1}}}, ErrCompacted},
		{"negative revision after compaction", []Op{put("a", "2"), {Type: OpGet, Key: []byte("a"), Range: RangeOptions{Revision: -1}}}, ErrCompacted},
		{"unchosen branch is not checked", []Op{put("a", "2"), nested([]Compare{cmpOf("a", TargetExists, CompareEqual, 0)}, []Op{ignoreValue}, nil)}, nil},
	}
	for i, tt := range tests {
		s := NewStore()
		apply(t, s, txn(put("a", "1")))
		apply(t, s, txn(put("a", "1")))
		apply(t, s, &Command{Type: CmdCompact, Revision: 2})
		h := s.View().Hash()
		res := apply(t, s, txn(tt.ops...))
		if !errors.Is(res.Err, tt.err) || (tt.err == nil) != (res.Err == nil) {
			t.Errorf("#%d %s: err = %v, want %v", i, tt.name, res.Err, tt.err)
			continue
		}
		if tt.err != nil && (s.View().Hash() != h || res.Revision != 2) {
			t.Errorf("#%d %s: a failed txn wrote (revision %d)", i, tt.name, res.Revision)
		}
	}
}

// TestTxnReadRevisionMinusOne: txn.go checkRange compares with the compacted revision,
// -1 before the first compaction, and mvcc rangeKeys reads the latest for rev <= 0.
func TestTxnReadRevisionMinusOne(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("a", "1")))
	for rev, want := range map[int64]error{-1: nil, -2: ErrCompacted} {
		res := apply(t, s, txn(Op{Type: OpGet, Key: []byte("a"), Range: RangeOptions{Revision: rev}}))
		if !errors.Is(res.Err, want) || (want == nil && (res.Err != nil || len(res.Responses[0].KVs) != 1)) {
			t.Errorf("revision %d: %+v, want err %v", rev, res, want)
		}
	}
}

// TestPutIgnoreValueLeasePrevKV: put.go put: ignore_value writes the current value,
// ignore_lease keeps the current lease; the put still bumps version and mod revision;
// the response carries the previous key-value.
func TestPutIgnoreValueLeasePrevKV(t *testing.T) {
	s := NewStore()
	apply(t, s, &Command{Type: CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60000})
	apply(t, s, &Command{Type: CmdLeaseGrant, LeaseID: 8, LeaseTTL: 60000})
	apply(t, s, txn(Op{Type: OpPut, Key: []byte("k"), Value: []byte("v1"), Lease: 7, Encoding: "x/v1"}))
	tests := []struct {
		op        Op
		wantValue string
		wantLease int64
		wantEnc   string
	}{
		{Op{Type: OpPut, Key: []byte("k"), IgnoreValue: true, Lease: 8}, "v1", 8, "x/v1"},
		{Op{Type: OpPut, Key: []byte("k"), Value: []byte("v2"), IgnoreLease: true}, "v2", 8, ""},
		{Op{Type: OpPut, Key: []byte("k"), IgnoreValue: true, IgnoreLease: true}, "v2", 8, ""},
		{Op{Type: OpPut, Key: []byte("k"), IgnoreValue: true}, "v2", 0, ""},
	}
	for i, tt := range tests {
		before := mustGet(t, s.View(), "k", 0)
		res := apply(t, s, txn(tt.op))
		if res.Err != nil || res.Responses[0].PrevKV == nil || !reflect.DeepEqual(*res.Responses[0].PrevKV, before) {
			t.Fatalf("#%d: result %+v, want prev kv %+v", i, res, before)
		}
		kv := mustGet(t, s.View(), "k", 0)
		if string(kv.Value) != tt.wantValue || kv.Lease != tt.wantLease || kv.Encoding != tt.wantEnc ||
			kv.Version != before.Version+1 || kv.ModRevision != res.Revision || kv.CreateRevision != before.CreateRevision {
			t.Errorf("#%d: k = %+v, want value %q lease %d enc %q, version %d", i, kv, tt.wantValue, tt.wantLease, tt.wantEnc, before.Version+1)
		}
	}
	for i, bad := range []Op{
		{Type: OpPut, Key: []byte("k"), Value: []byte("x"), IgnoreValue: true}, // etcd ErrGRPCValueProvided
		{Type: OpPut, Key: []byte("k"), Lease: 7, IgnoreLease: true},           // etcd ErrGRPCLeaseProvided
		{Type: OpDelete, Key: []byte("k"), IgnoreValue: true},
		{Type: OpPut, Key: []byte("k"), PrevKV: true},
		{Type: OpPut, Key: []byte("k"), Range: RangeOptions{KeysOnly: true}},
	} {
		if res := apply(t, s, txn(bad)); !errors.Is(res.Err, ErrInvalidCommand) {
			t.Errorf("bad #%d: %v, want ErrInvalidCommand", i, res.Err)
		}
	}
}

// TestDeleteRangePrevKVs: delete.go deleteRange returns every deleted key's previous
// key-value, in key order, when prev_kv is set.
func TestDeleteRangePrevKVs(t *testing.T) {
	s := NewStore()
	apply(t, s, txn(put("a/1", "x"), put("a/2", "y"), put("b", "z")))
	apply(t, s, txn(put("a/2", "y2")))
	want := []KeyValue{mustGet(t, s.View(), "a/1", 0), mustGet(t, s.View(), "a/2", 0)}
	res := apply(t, s, txn(
		Op{Type: OpDeleteRange, Key: []byte("a/"), End: []byte("a0"), PrevKV: true},
		Op{Type: OpDelete, Key: []byte("b"), PrevKV: true},
		Op{Type: OpDeleteRange, Key: []byte("c"), End: []byte("d"), PrevKV: true},
		Op{Type: OpDeleteRange, Key: []byte("b"), End: []byte("c")}, // no prev_kv asked
	))
	r := res.Responses
	if res.Err != nil || r[0].Deleted != 2 || !reflect.DeepEqual(r[0].PrevKVs, want) {
		t.Fatalf("delete range: %+v, want prev kvs %+v", r[0], want)
	}
	if len(r[1].PrevKVs) != 1 || string(r[1].PrevKVs[0].Value) != "z" || r[2].PrevKVs != nil || r[3].PrevKVs != nil {
		t.Fatalf("responses %+v", r)
	}
}

// TestCompareLeaseAndRange: txn.go applyCompare/compareKV: a compare with range_end
// holds only if it holds for every key in the range; an empty range compares as one
// absent key (all fields 0) except VALUE, which then always fails; LEASE compares the
// key's lease ID.
func TestCompareLeaseAndRange(t *testing.T) {
	s := NewStore()
	apply(t, s, &Command{Type: CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60000})
	apply(t, s, txn(Op{Type: OpPut, Key: []byte("p/1"), Value: []byte("b"), Lease: 7}, put("p/2", "c"))) // rev 1
	apply(t, s, txn(put("p/2", "c")))                                                                    // rev 2: p/2 version 2
	rng := func(c Compare, end string) Compare { c.End = []byte(end); return c }
	val := func(k string, r CompareResult, v string) Compare {
		return Compare{Key: []byte(k), Target: TargetValue, Result: r, Value: []byte(v)}
	}
	tests := []struct {
		name string
		c    Compare
		want bool
	}{
		{"lease equal", cmpOf("p/1", TargetLease, CompareEqual, 7), true},
		{"lease of unleased key is 0", cmpOf("p/2", TargetLease, CompareEqual, 0), true},
		{"lease of absent key is 0", cmpOf("zz", TargetLease, CompareLess, 1), true},
		{"range: every key's lease", rng(cmpOf("p/", TargetLease, CompareEqual, 7), "p0"), false},
		{"range: every key greater", rng(val("p/", CompareGreater, "a"), "p0"), true},
		{"range: one key fails", rng(val("p/", CompareGreater, "b"), "p0"), false},
		{"range: version over all keys", rng(cmpOf("p/", TargetVersion, CompareGreater, 0), "p0"), true},
		{"range: mod revision differs", rng(cmpOf("p/", TargetModRevision, CompareEqual, 2), "p0"), false},
		{"empty range compares as absent", rng(cmpOf("q/", TargetVersion, CompareEqual, 0), "q0"), true},
		{"empty range: create less", rng(cmpOf("q/", TargetCreateRevision, CompareLess, 1), "q0"), true},
		{"empty range: value always fails", rng(val("q/", CompareNotEqual, "x"), "q0"), false},
		{"empty range: exists is 0", rng(cmpOf("q/", TargetExists, CompareEqual, 0), "q0"), true},
		{"range to the end (etcd \\x00)", rng(cmpOf("p/", TargetVersion, CompareGreater, 0), ""), true},
		{"inverted range is empty", rng(cmpOf("p/2", TargetVersion, CompareEqual, 0), "p/1"), true},
	}
	for i, tt := range tests {
		res := apply(t, s, &Command{Type: CmdTxn, Txn: &Txn{Compares: []Compare{tt.c}, Success: []Op{getOp("p/1")}}})
		if res.Err != nil || res.Succeeded != tt.want {
			t.Errorf("#%d %s: succeeded %v (err %v), want %v", i, tt.name, res.Succeeded, res.Err, tt.want)
		}
	}
}
