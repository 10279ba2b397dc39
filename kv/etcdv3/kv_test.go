package etcdv3

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
	"github.com/keel-kv/keel/versions"
)

// etcd's sort targets and orders, revision filters, count, limit and keys_only, as
// etcd answers them: filters first, then the sort (stable, key order among equals; a
// target without an order ascends), count before the filters and the limit, never
// "more" for count_only (kills: a sort order or target ignored or swapped, count taken
// after the limit or the filters, a filter bound off by one; the last two found by the
// differential judge, kv/etcdjudge/differential).
func TestShapeRangeAsEtcd(t *testing.T) {
	e := &Server{core: &kv.Server{}}
	kvs := []fsm.KeyValue{ // key order, as a range returns them
		{Key: []byte("a"), Value: []byte("3"), CreateRevision: 4, ModRevision: 9, Version: 2},
		{Key: []byte("b"), Value: []byte("1"), CreateRevision: 2, ModRevision: 2, Version: 1},
		{Key: []byte("c"), Value: []byte("2"), CreateRevision: 6, ModRevision: 7, Version: 2},
		{Key: []byte("d"), Value: []byte("4"), CreateRevision: 1, ModRevision: 8, Version: 5},
	}
	for _, c := range []struct {
		req   *pb.RangeRequest
		keys  string
		count int64
		more  bool
	}{
		{&pb.RangeRequest{}, "abcd", 4, false},
		{&pb.RangeRequest{Limit: 2}, "ab", 4, true},
		{&pb.RangeRequest{SortTarget: pb.RangeRequest_CREATE}, "dbac", 4, false},
		{&pb.RangeRequest{SortTarget: pb.RangeRequest_CREATE, SortOrder: pb.RangeRequest_DESCEND, Limit: 1}, "c", 4, true},
		{&pb.RangeRequest{SortTarget: pb.RangeRequest_MOD, SortOrder: pb.RangeRequest_ASCEND}, "bcda", 4, false},
		{&pb.RangeRequest{SortTarget: pb.RangeRequest_VERSION, SortOrder: pb.RangeRequest_DESCEND}, "dacb", 4, false},
		{&pb.RangeRequest{SortTarget: pb.RangeRequest_VALUE, SortOrder: pb.RangeRequest_ASCEND}, "bcad", 4, false},
		{&pb.RangeRequest{SortTarget: pb.RangeRequest_KEY, SortOrder: pb.RangeRequest_DESCEND}, "dcba", 4, false},
		{&pb.RangeRequest{MinModRevision: 7, MaxModRevision: 8}, "cd", 4, false},
		{&pb.RangeRequest{MinCreateRevision: 2, MaxCreateRevision: 4}, "ab", 4, false},
		{&pb.RangeRequest{MinCreateRevision: 2, MaxCreateRevision: 4, Limit: 1}, "a", 4, true},
		{&pb.RangeRequest{CountOnly: true}, "", 4, false},
		{&pb.RangeRequest{CountOnly: true, Limit: 1}, "", 4, false},
	} {
		resp, err := e.shapeRange(c.req, kvs, false)
		if err != nil {
			t.Fatalf("%v: %v", c.req, err)
		}
		var keys strings.Builder
		for _, kv := range resp.Kvs {
			keys.Write(kv.Key)
		}
		if keys.String() != c.keys || resp.Count != c.count || resp.More != c.more {
			t.Errorf("%v: keys %q count %d more %v, want %q %d %v", c.req, keys.String(), resp.Count, resp.More,
				c.keys, c.count, c.more)
		}
	}
	resp, err := e.shapeRange(&pb.RangeRequest{KeysOnly: true}, kvs, false)
	if err != nil || len(resp.Kvs[0].Value) != 0 || resp.Kvs[0].ModRevision != 9 {
		t.Fatalf("keys only: %v, %v", resp, err)
	}
	// A transaction's get cut by its limit answers only what needs no missing key.
	if _, err := e.shapeRange(&pb.RangeRequest{SortTarget: pb.RangeRequest_CREATE}, kvs, true); err == nil {
		t.Fatal("a sorted answer over a cut range was served")
	}
	if resp, err := e.shapeRange(&pb.RangeRequest{Limit: 2}, kvs, true); err != nil || len(resp.Kvs) != 2 || !resp.More {
		t.Fatalf("the first keys of a cut range: %v, %v", resp, err)
	}
	if kvs[0].Key[0] != 'a' {
		t.Fatal("shapeRange reordered its input (shared with other readers)")
	}
}

// The etcd door validates the ops and compares of nested transactions with the KV
// API's rules at every depth (limits.op, limits.compare), and bounds the nesting
// (kills: nested requests translated without validation; no depth bound).
func TestEtcdTxnValidatesNested(t *testing.T) {
	cfg := kv.DefaultConfig()
	cfg.MaxKeyBytes, cfg.MaxValueBytes, cfg.MaxListLimit = 8, 8, 10
	core, err := kv.NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &Server{core: core}
	nest := func(op *pb.RequestOp) *pb.TxnRequest {
		inner := &pb.TxnRequest{Failure: []*pb.RequestOp{op}}
		return &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: inner}}}}
	}
	put := func(k, v string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
	}
	txn, err := e.etcdTxn(nest(put("k", "v")), 1)
	if err != nil || txn.Success[0].Type != fsm.OpTxn || string(txn.Success[0].Txn.Failure[0].Key) != "k" {
		t.Fatalf("a valid nested put: %+v, %v", txn, err)
	}
	for name, c := range map[string]struct {
		req  *pb.TxnRequest
		want error
	}{
		"long key":   {nest(put("123456789", "v")), kv.ErrInvalidKey},
		"not UTF-8":  {nest(put("\xff", "v")), kv.ErrInvalidKey},
		"long value": {nest(put("k", "123456789")), kv.ErrTooLarge},
		"compare": {nest(&pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: []byte("123456789"), Target: pb.Compare_LEASE}}}}}), kv.ErrInvalidKey},
	} {
		if _, err := e.etcdTxn(c.req, 1); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	deep := &pb.TxnRequest{}
	for range fsm.MaxTxnDepth {
		deep = &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestTxn{RequestTxn: deep}}}}
	}
	if _, err := e.etcdTxn(deep, 1); !errors.Is(err, fsm.ErrTooManyOps) {
		t.Fatalf("transactions nested %d deep: %v, want ErrTooManyOps", fsm.MaxTxnDepth+1, err)
	}
}

// A limited range in key order is read as one page (the core's RangeRequest.Limit)
// and answers what the whole-range path answers — keys, values, count, more — for
// every limit, over a plain prefix and over a range that holds keys the door hides;
// count_only answers the same count (kills: count taken from the page, more off by
// one, hidden keys counted or shown, count_only applying the filters).
func TestRangePageAsWholeRange(t *testing.T) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := etcdKV{e: &Server{core: core}}
	var ops []fsm.Op
	for i := range 25 {
		ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: fmt.Appendf(nil, "p/%02d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: []byte(versions.SystemPrefix + "x"), Value: []byte("hidden")},
		fsm.Op{Type: fsm.OpPut, Key: []byte("a"), Value: []byte("a")}, fsm.Op{Type: fsm.OpDelete, Key: []byte("p/03")})
	if res, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: ops}}); err != nil || res.Err != nil {
		t.Fatalf("load: %v %v", err, res)
	}
	for _, rg := range [][2]string{{"p/", "p0"}, {"p/1", "p/2"}, {"\x00", "\x00"}, {"q", "r"}} {
		for _, limit := range []int64{1, 2, 10, 23, 24, 25, 100} {
			req := &pb.RangeRequest{Key: []byte(rg[0]), RangeEnd: []byte(rg[1]), Limit: limit}
			got, err := k.Range(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			// MinModRevision 1 keeps every key, and takes the whole-range path.
			whole := &pb.RangeRequest{Key: req.Key, RangeEnd: req.RangeEnd, Limit: limit, MinModRevision: 1}
			want, err := k.Range(context.Background(), whole)
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != want.Count || got.More != want.More || fmt.Sprint(got.Kvs) != fmt.Sprint(want.Kvs) {
				t.Errorf("%q limit %d: count %d more %v %d keys, whole range: count %d more %v %d keys",
					rg, limit, got.Count, got.More, len(got.Kvs), want.Count, want.More, len(want.Kvs))
			}
			// count_only ignores limit and filters, and is counted by the store unless
			// the range hides keys: the same count, no keys, never more.
			only := &pb.RangeRequest{Key: req.Key, RangeEnd: req.RangeEnd, Limit: limit, CountOnly: true, MinModRevision: 1 << 40}
			if got, err := k.Range(context.Background(), only); err != nil || got.Count != want.Count || got.More || len(got.Kvs) != 0 {
				t.Errorf("%q limit %d count_only: %v, %v; want count %d", rg, limit, got, err, want.Count)
			}
			if pageOnly(whole) || !pageOnly(req) {
				t.Fatal("pageOnly: a filtered range paged, or a plain limited one not")
			}
		}
	}
}
