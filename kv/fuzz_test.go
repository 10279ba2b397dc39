package kv

import (
	"bytes"
	"testing"

	"github.com/keel-kv/keel/fsm"
)

// FuzzTxnBody: decoding and validating any body never panics; what is accepted
// respects the limits the state machine relies on, and what is rejected is a 4xx.
func FuzzTxnBody(f *testing.F) {
	lim := DefaultConfig().limits()
	f.Add([]byte(`{"compare":[{"key":"a","target":"mod_revision","result":"equal","int":7}],` +
		`"success":[{"type":"put","key":"a","value":"aGk="},{"type":"delete_range","key":"tmp/","prefix":true}],` +
		`"failure":[{"type":"get","key":"a"}]}`))
	f.Add([]byte(`{"success":[{"type":"get","key":"a","end":"b","limit":3}]}`))
	f.Add([]byte(`{"compare":[{"key":"x","target":"exists","result":"not_equal","int":1}]}`))
	f.Add([]byte(`{"success":[{"type":"put","key":""}]}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, body []byte) {
		txn, err := decodeTxn(body, lim)
		if err != nil {
			if code, _ := classify(err); code != 400 && code != 413 {
				t.Fatalf("rejection %v maps to %d, want 400 or 413", err, code)
			}
			return
		}
		for _, c := range txn.Compares {
			if lim.checkKey(string(c.Key)) != nil || c.Target == 0 || c.Result == 0 {
				t.Fatalf("accepted bad compare %+v", c)
			}
		}
		for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
			if len(ops) > fsm.MaxTxnOps {
				t.Fatalf("accepted %d ops", len(ops))
			}
			for _, op := range ops {
				if lim.checkKey(string(op.Key)) != nil || (op.End != nil && bytes.Compare(op.End, op.Key) <= 0) ||
					int64(len(op.Value)) > lim.maxValueBytes || op.Limit < 0 {
					t.Fatalf("accepted bad op %+v", op)
				}
			}
		}
	})
}
