package etcdv3

import (
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
)

// Every op response of a transaction carries a header with the revision etcd gives
// it (server/etcdserver/txn: a range, or a delete that deleted nothing, before the
// transaction's first write answers the revision before the transaction; a put, and
// every op after a write, the transaction's revision), and a nested transaction an
// empty header: clients read them (kube-apiserver reads a put's
// Responses[0].ResponsePut.Header.Revision). Found by the etcdctl judge (`txn -w
// json`). Kills: no op headers; every op at the transaction's revision; a nested
// transaction without a header.
func TestTxnOpHeadersAsEtcd(t *testing.T) {
	e := &Server{core: &kv.Server{}}
	rng := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
	}
	del := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k)}}}
	}
	put := &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), Value: []byte("v")}}}
	nested := &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: []*pb.RequestOp{rng("c")}}}}
	req := &pb.TxnRequest{Success: []*pb.RequestOp{rng("a"), del("x"), put, rng("a"), del("y"), nested}}
	resps := []fsm.OpResponse{{Type: fsm.OpGet}, {Type: fsm.OpDeleteRange}, {Type: fsm.OpPut}, {Type: fsm.OpGet},
		{Type: fsm.OpDeleteRange, Deleted: 1},
		{Type: fsm.OpTxn, Txn: &fsm.Result{Succeeded: true, Responses: []fsm.OpResponse{{Type: fsm.OpGet}}}}}

	resp, err := e.txnAnswer(req, &fsm.Result{Revision: 10, Succeeded: true, Responses: resps})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Responses
	got := []int64{r[0].GetResponseRange().GetHeader().GetRevision(), r[1].GetResponseDeleteRange().GetHeader().GetRevision(),
		r[2].GetResponsePut().GetHeader().GetRevision(), r[3].GetResponseRange().GetHeader().GetRevision(),
		r[4].GetResponseDeleteRange().GetHeader().GetRevision()}
	for i, want := range []int64{9, 9, 10, 10, 10} {
		if got[i] != want {
			t.Errorf("#%d: header revision = %d, want %d", i, got[i], want)
		}
	}
	inner := r[5].GetResponseTxn()
	if inner.GetHeader() == nil || inner.Header.Revision != 0 {
		t.Errorf("nested txn header = %v, want an empty header", inner.GetHeader())
	}
	if rev := inner.GetResponses()[0].GetResponseRange().GetHeader().GetRevision(); rev != 10 {
		t.Errorf("nested range header revision = %d, want 10", rev)
	}

	// A transaction that writes nothing answers the current revision everywhere.
	ro := &pb.TxnRequest{Success: []*pb.RequestOp{rng("a"), del("x")}}
	resp, err = e.txnAnswer(ro, &fsm.Result{Revision: 7, Succeeded: true,
		Responses: []fsm.OpResponse{{Type: fsm.OpGet}, {Type: fsm.OpDeleteRange}}})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := resp.Responses[0].GetResponseRange().GetHeader().GetRevision(),
		resp.Responses[1].GetResponseDeleteRange().GetHeader().GetRevision(); a != 7 || b != 7 {
		t.Errorf("read-only txn: header revisions %d, %d, want 7, 7", a, b)
	}
}
