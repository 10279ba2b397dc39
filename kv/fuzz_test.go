package kv

import (
	"bytes"
	"errors"
	"testing"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/versions"
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

// FuzzResourceObject: any PUT body either fails as a 400 (ErrInvalidBody) or yields an
// object with the path's apiVersion and name and no metadata.revision or
// metadata.downgraded, which PrepareWrite either refuses (ErrConversion) or stores in
// a form that reads back in every served version.
func FuzzResourceObject(f *testing.F) {
	s, err := versions.LoadSchema("testdata/widgets-v1v2.yaml")
	if err != nil {
		f.Fatal(err)
	}
	q := resourceReq{r: s.Resources[0], version: "v1", name: "w"}
	for _, seed := range []string{`{}`, `{"spec":{"size":3}}`, `{"apiVersion":"apps/v1","metadata":{"name":"w","revision":7}}`,
		`{"metadata":{"revision":"7"}}`, `{"spec":{"size":1,"replicas":2}}`, `[1]`, `{"spec":[]}`, `{"metadata":null}`,
		`{"metadata":{"downgraded":true}}`, `{"metadata":{"downgraded":"yes"}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		obj, rev, _, err := validateObject(q, body)
		if err != nil {
			if !errors.Is(err, ErrInvalidBody) {
				t.Fatalf("error %v is not ErrInvalidBody", err)
			}
			return
		}
		meta := obj["metadata"].(map[string]any)
		if obj["apiVersion"] != "apps/v1" || meta["name"] != "w" || meta["revision"] != nil || meta["downgraded"] != nil || rev < 0 {
			t.Fatalf("accepted %s as %v (revision %d)", body, obj, rev)
		}
		w, err := q.r.PrepareWrite(obj, "v1", nil, "", "v2")
		if err != nil {
			if !errors.Is(err, versions.ErrConversion) {
				t.Fatalf("%s: %v", body, err)
			}
			return // the handler answers 400
		}
		for _, v := range q.r.Served() {
			if _, _, err := q.r.View(w.Object, "v2", v, "v2"); err != nil {
				t.Fatalf("%s: stored as %v, not readable as %s: %v", body, w.Object, v, err)
			}
		}
	})
}
