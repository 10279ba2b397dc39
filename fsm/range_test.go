package fsm

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// rangeStore builds, at revision 7:
//
//	key  value version create mod lease
//	a    t     3       2      6
//	b    y     1       3      3
//	c    v     2       1      4
//	d    w     1       3      3
//	e    s     1       7      7   7
func rangeStore(t *testing.T) *Store {
	t.Helper()
	s := NewStore()
	apply(t, s, &Command{Type: CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60000})
	for _, ops := range [][]Op{
		{put("c", "x")}, {put("a", "z")}, {put("b", "y"), put("d", "w")}, {put("c", "v")},
		{put("a", "u")}, {put("a", "t")}, {{Type: OpPut, Key: []byte("e"), Value: []byte("s"), Lease: 7}},
	} {
		if res := apply(t, s, txn(ops...)); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	return s
}

type rangeCase struct {
	name     string
	key, end string // end "-" = nil (key alone), "" = to the end
	limit    int64
	o        RangeOptions
	keys     string // the keys returned, in order
	more     bool
	count    int64
	err      error
}

// rangeCases pin etcd's Range (server/etcdserver/txn/range.go executeRange: rangeLimit,
// filterRangeResults, sortRangeResults, asembleRangeResponse) on rangeStore's keys.
func rangeCases() []rangeCase {
	all := RangeOptions{WithCount: true}
	by := func(t SortTarget, o SortOrder) RangeOptions {
		return RangeOptions{SortTarget: t, SortOrder: o, WithCount: true}
	}
	return []rangeCase{
		{name: "limit cuts, count ignores it", key: "a", end: "f", limit: 2, o: all, keys: "ab", more: true, count: 5},
		{name: "no limit", key: "a", end: "f", o: all, keys: "abcde", count: 5},
		{name: "limit equal to the keys", key: "a", end: "f", limit: 5, o: all, keys: "abcde", count: 5},
		{name: "no count unless asked", key: "a", end: "f", limit: 2, keys: "ab", more: true},
		{name: "key descend", key: "a", end: "f", limit: 2, o: by(SortByKey, SortDescend), keys: "ed", more: true, count: 5},
		{name: "key ascend is the index order", key: "a", end: "f", limit: 2, o: by(SortByKey, SortAscend), keys: "ab", more: true, count: 5},
		{name: "version ascend, ties in key order", key: "a", end: "f", o: by(SortByVersion, SortAscend), keys: "bdeca", count: 5},
		{name: "version descend", key: "a", end: "f", o: by(SortByVersion, SortDescend), keys: "acbde", count: 5},
		// NONE with a target sorts ascending, but rangeLimit sees the default ordering and
		// fetches limit+1 keys first: the two lowest versions of a, b, c.
		{name: "version, order none, sorts the limit+1 first keys", key: "a", end: "f", limit: 2, o: by(SortByVersion, SortNone), keys: "bc", more: true, count: 5},
		{name: "create ascend", key: "a", end: "f", o: by(SortByCreate, SortAscend), keys: "cabde", count: 5},
		{name: "mod descend, limit", key: "a", end: "f", limit: 3, o: by(SortByMod, SortDescend), keys: "eac", more: true, count: 5},
		{name: "value ascend", key: "a", end: "f", o: by(SortByValue, SortAscend), keys: "eacdb", count: 5},
		{name: "min mod", key: "a", end: "f", o: RangeOptions{MinModRevision: 4, WithCount: true}, keys: "ace", count: 5},
		{name: "min mod, limit: more counts filtered keys", key: "a", end: "f", limit: 2, o: RangeOptions{MinModRevision: 4, WithCount: true}, keys: "ac", more: true, count: 5},
		{name: "filter leaves exactly limit", key: "a", end: "f", limit: 3, o: RangeOptions{MinModRevision: 4, WithCount: true}, keys: "ace", count: 5},
		{name: "max create", key: "a", end: "f", o: RangeOptions{MaxCreateRevision: 2}, keys: "ac"},
		{name: "min create and max mod", key: "a", end: "f", o: RangeOptions{MinCreateRevision: 3, MaxModRevision: 3}, keys: "bd"},
		{name: "filter and sort", key: "a", end: "f", o: RangeOptions{MinModRevision: 4, SortTarget: SortByMod, SortOrder: SortDescend}, keys: "eac"},
		{name: "count only ignores limit and filters", key: "a", end: "f", limit: 1, o: RangeOptions{CountOnly: true, MinModRevision: 7}, count: 5},
		{name: "keys only", key: "a", end: "f", limit: 2, o: RangeOptions{KeysOnly: true}, keys: "ab", more: true},
		{name: "at revision 3", key: "a", end: "f", o: RangeOptions{Revision: 3, WithCount: true}, keys: "abcd", count: 4},
		{name: "one key", key: "c", end: "-", o: all, keys: "c", count: 1},
		{name: "one absent key", key: "cc", end: "-", o: all},
		{name: "to the end (etcd \\x00)", key: "c", end: "", o: all, keys: "cde", count: 3},
		{name: "inverted range is empty", key: "d", end: "b", o: all},
		{name: "future revision", key: "a", end: "f", o: RangeOptions{Revision: 8}, err: ErrFutureRevision},
		{name: "bad sort target", key: "a", end: "f", o: RangeOptions{SortTarget: 5}, err: ErrInvalidCommand},
		{name: "bad sort order", key: "a", end: "f", o: RangeOptions{SortOrder: 3}, err: ErrInvalidCommand},
	}
}

func (c rangeCase) bounds() (key, end []byte) {
	key = []byte(c.key)
	switch c.end {
	case "-":
	case "":
		end = []byte{}
	default:
		end = []byte(c.end)
	}
	return key, end
}

func (c rangeCase) check(t *testing.T, i int, kvs []KeyValue, more bool, count int64, err error, v *View) {
	t.Helper()
	if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
		t.Errorf("#%d %s: err = %v, want %v", i, c.name, err, c.err)
		return
	}
	var keys strings.Builder
	for _, kv := range kvs {
		keys.Write(kv.Key)
		want, _ := v.Get(kv.Key, c.o.Revision)
		if c.o.KeysOnly {
			want.Value = nil
			if c.o.SortTarget != SortByValue {
				want.Lease = 0
			}
		}
		if !reflect.DeepEqual(kv, want) {
			t.Errorf("#%d %s: %+v, want %+v", i, c.name, kv, want)
		}
	}
	if keys.String() != c.keys || more != c.more || count != c.count {
		t.Errorf("#%d %s: keys %q more %v count %d, want %q %v %d", i, c.name, keys.String(), more, count, c.keys, c.more, c.count)
	}
}

func TestViewRangeWith(t *testing.T) {
	s := rangeStore(t)
	v := s.View()
	for i, c := range rangeCases() {
		key, end := c.bounds()
		rr, err := v.RangeWith(key, end, c.limit, c.o)
		c.check(t, i, rr.KVs, rr.More, rr.Count, err, v)
		if err == nil && rr.Revision != 7 {
			t.Errorf("#%d %s: revision %d, want the view's (7)", i, c.name, rr.Revision)
		}
	}
}

// TestTxnGetRangeOptions: a Range inside a Txn answers as a Range (txn.go executeTxn
// calls executeRange with the total count), through the command encoding.
func TestTxnGetRangeOptions(t *testing.T) {
	s := rangeStore(t)
	v := s.View()
	for i, c := range rangeCases() {
		key, end := c.bounds()
		if c.end != "-" && c.end != "" && c.end <= c.key {
			continue // fsm refuses an inverted range in an op (doc.go: the door sends a placeholder)
		}
		res := apply(t, s, txn(Op{Type: OpGet, Key: key, End: end, Limit: c.limit, Range: c.o}))
		var r OpResponse
		if res.Err == nil {
			r = res.Responses[0]
		}
		c.check(t, i, r.KVs, r.More, r.Count, res.Err, v)
	}
}

// TestKeysOnlyLeaseSortByValue: with keys_only etcd 3.7 reads the index (no lease)
// unless it sorts by value (mvcc kvstore_txn.go rangeKeys FastKeysOnly).
func TestKeysOnlyLeaseSortByValue(t *testing.T) {
	v := rangeStore(t).View()
	for _, tc := range []struct {
		target SortTarget
		lease  int64
	}{{SortByKey, 0}, {SortByMod, 0}, {SortByValue, 7}} {
		rr, err := v.RangeWith([]byte("e"), nil, 0, RangeOptions{KeysOnly: true, SortTarget: tc.target, SortOrder: SortAscend})
		if err != nil || len(rr.KVs) != 1 || rr.KVs[0].Lease != tc.lease || rr.KVs[0].Value != nil {
			t.Errorf("target %d: %+v %v, want lease %d and no value", tc.target, rr, err, tc.lease)
		}
	}
}
