package fsm

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckDuplicateKeys(t *testing.T) {
	get := func(k string) Op { return Op{Type: OpGet, Key: []byte(k)} }
	getRange := func(k, end string) Op { return Op{Type: OpGet, Key: []byte(k), End: []byte(end)} }
	delRange := func(k, end string) Op {
		op := Op{Type: OpDeleteRange, Key: []byte(k)}
		if end != "" {
			op.End = []byte(end)
		}
		return op
	}
	// Each case is one transaction; dup names the key the error must name ("" = allowed).
	tests := []struct {
		name             string
		success, failure []Op
		dup              string
	}{
		{"two puts of one key", []Op{put("x", "1"), put("x", "2")}, nil, "x"},
		{"put then delete", []Op{put("y", "1"), del("y")}, nil, "y"},
		{"delete then put", []Op{del("y"), put("y", "1")}, nil, "y"},
		{"delete_range then put inside it", []Op{delRange("z/", "z0"), put("z/1", "1")}, nil, "z/1"},
		{"put inside a later delete_range", []Op{put("z/1", "1"), delRange("z/", "z0")}, nil, "z/1"},
		{"put inside an unbounded delete_range", []Op{delRange("m", ""), put("zz", "1")}, nil, "zz"},
		{"duplicate in the failure branch", nil, []Op{put("f", "1"), get("g"), put("f", "2")}, "f"},

		{"two gets of one key", []Op{get("x"), get("x")}, nil, ""},
		{"get plus put of one key", []Op{get("x"), put("x", "1"), getRange("a", "z")}, nil, ""},
		{"same key in different branches", []Op{put("x", "1")}, []Op{put("x", "2"), del("y")}, ""},
		{"two deletes of one key (etcd allows)", []Op{del("y"), del("y"), delRange("y", "z")}, nil, ""},
		{"put at a delete_range's end", []Op{delRange("z/", "z0"), put("z0", "1")}, nil, ""},
		{"put before a delete_range", []Op{delRange("z/", "z0"), put("z", "1")}, nil, ""},
		{"distinct puts and deletes", []Op{put("a", "1"), put("b", "1"), del("c")}, nil, ""},
	}
	for i, tt := range tests {
		err := CheckDuplicateKeys(&Txn{Success: tt.success, Failure: tt.failure})
		switch {
		case tt.dup == "" && err != nil:
			t.Errorf("#%d %s: err = %v, want none", i, tt.name, err)
		case tt.dup != "" && !errors.Is(err, ErrDuplicateKey):
			t.Errorf("#%d %s: err = %v, want ErrDuplicateKey", i, tt.name, err)
		case tt.dup != "" && !strings.Contains(err.Error(), `key "`+tt.dup+`"`):
			t.Errorf("#%d %s: err = %v, want it to name key %q", i, tt.name, err, tt.dup)
		}
	}
}

// TestDuplicateKeysStillApply pins what the state machine does with a branch that
// writes a key twice (a log entry from a release that did not refuse them): it applies
// it, the same way on every replica, so old logs replay to the same state.
func TestDuplicateKeysStillApply(t *testing.T) {
	s := NewStore()
	res := apply(t, s, txn(put("x", "1"), put("x", "2")))
	if res.Err != nil || res.Revision != 1 {
		t.Fatalf("result = %+v", res)
	}
	kv := mustGet(t, s.View(), "x", 0)
	if string(kv.Value) != "2" || kv.Version != 2 || kv.CreateRevision != 1 || kv.ModRevision != 1 {
		t.Fatalf("x = %+v, want value 2, version 2, created and modified at 1", kv)
	}
}

// TestCheckDuplicateKeysNested replays etcd's TestV3TxnDuplicateKeys
// (tests/integration/v3_grpc_test.go) and pins the quirks of its checkIntervals
// (server/etcdserver/api/v3rpc/key.go) that keel keeps so as to refuse exactly what
// etcd refuses.
func TestCheckDuplicateKeysNested(t *testing.T) {
	putReq := put("abc", "def")
	delKey := del("abc")
	delIn := Op{Type: OpDeleteRange, Key: []byte("a"), End: []byte("b")}
	delOut := Op{Type: OpDeleteRange, Key: []byte("abb"), End: []byte("abc")}
	delFrom := Op{Type: OpDeleteRange, Key: []byte("a"), End: []byte{}} // etcd range_end "\x00"
	tx := func(s, f []Op) Op { return Op{Type: OpTxn, Txn: &Txn{Success: s, Failure: f}} }
	txnDel, txnDel2 := tx([]Op{delIn}, nil), tx([]Op{delIn}, []Op{delIn})
	txnPut, txnPut2 := tx([]Op{putReq}, nil), tx([]Op{putReq}, []Op{putReq})
	tests := []struct {
		name     string
		ops      []Op
		keel     bool // CheckDuplicateKeys refuses
		etcd     bool // CheckDuplicateKeysEtcd (and etcd) refuses
		failures bool // put the ops in Failure instead
	}{
		{"put, put", []Op{putReq, putReq}, true, true, false},
		{"put, delete", []Op{putReq, delKey}, true, true, false},
		{"put, delete range", []Op{putReq, delIn}, true, true, false},
		{"Then(Put(a), Then(Del(a)))", []Op{putReq, txnDel}, true, true, false},
		{"Then(Del(a), Then(Put(a)))", []Op{delIn, txnPut}, true, true, false},
		{"two nested put both sides", []Op{txnPut2, txnPut2}, true, true, false},
		{"Then(Del(x), (Then(Put(a)), Else(Put(a))))", []Op{delOut, txnPut2}, false, false, false},
		{"Then(Then(Del(a)), (Then(Del(a)), Else(Del(a))))", []Op{txnDel, txnDel2}, false, false, false},
		{"deletes only", []Op{delKey, delIn, delKey, delIn}, false, false, false},
		{"put, delete out of range", []Op{putReq, delOut}, false, false, false},
		{"nested delete seen first", []Op{txnDel, txnPut}, true, true, false},
		{"nested put seen first (etcd lets it through)", []Op{txnPut, txnDel}, false, false, false},
		{"one nested txn: put in Success, delete in Failure", []Op{tx([]Op{putReq}, []Op{delIn})}, false, false, false},
		{"one nested txn: delete in Success, put in Failure", []Op{tx([]Op{delKey}, []Op{putReq})}, false, false, false},
		{"doubly nested put, put", []Op{tx([]Op{txnPut}, nil), putReq}, true, true, false},
		{"doubly nested, failure branch", []Op{tx(nil, []Op{txnPut}), delIn}, true, true, true},
		{"put inside a delete to the end", []Op{delFrom, putReq}, true, false, false},
		{"nested put inside a delete to the end", []Op{delFrom, txnPut}, true, false, false},
	}
	for i, tt := range tests {
		txn := &Txn{Success: tt.ops}
		if tt.failures {
			txn = &Txn{Failure: tt.ops}
		}
		for _, c := range []struct {
			name   string
			check  func(*Txn) error
			refuse bool
		}{{"keel", CheckDuplicateKeys, tt.keel}, {"etcd", CheckDuplicateKeysEtcd, tt.etcd}} {
			err := c.check(txn)
			if got := errors.Is(err, ErrDuplicateKey); got != c.refuse || (err != nil && !got) {
				t.Errorf("#%d %s (%s rule): err = %v, want refused %v", i, tt.name, c.name, err, c.refuse)
			}
		}
	}
}
