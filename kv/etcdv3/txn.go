package etcdv3

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// Txn serves KV.Txn as one state machine transaction, nested transactions included
// (fsm.OpTxn).
func (k etcdKV) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	e := k.e
	txn, err := e.etcdTxn(r, 1)
	if err != nil {
		return nil, err
	}
	res, err := e.applyEtcdTxn(ctx, txn, r)
	if err != nil {
		return nil, err
	}
	resp, err := e.txnAnswer(r, res)
	if errors.Is(err, errRangeCut) {
		return nil, fmt.Errorf("%w: the transaction is applied (revision %d), but a range of its answer %v (at most %d keys)",
			kv.ErrTooLarge, res.Revision, err, e.core.Config().MaxListLimit)
	}
	if err != nil {
		return nil, err
	}
	resp.Header = e.header(res.Revision)
	return resp, nil
}

// etcdTxn translates a transaction at nesting depth (the outer one is 1), validating
// every compare and op at every depth with the core's rules (CheckTxnSize,
// CheckCompare, CheckOp). The state machine checks the shared op budget of nested
// transactions.
func (e *Server) etcdTxn(r *pb.TxnRequest, depth int) (*fsm.Txn, error) {
	if err := e.core.CheckTxnSize(depth, len(r.Compare), len(r.Success), len(r.Failure)); err != nil {
		return nil, err
	}
	txn := &fsm.Txn{}
	for i, c := range r.Compare {
		fc, err := e.etcdCompare(c)
		if err != nil {
			return nil, fmt.Errorf("compare[%d]: %w", i, err)
		}
		txn.Compares = append(txn.Compares, fc)
	}
	var err error
	if txn.Success, err = e.txnOps(r.Success, "success", depth); err != nil {
		return nil, err
	}
	if txn.Failure, err = e.txnOps(r.Failure, "failure", depth); err != nil {
		return nil, err
	}
	return txn, nil
}

// txnOps translates one branch.
func (e *Server) txnOps(reqs []*pb.RequestOp, branch string, depth int) ([]fsm.Op, error) {
	ops := make([]fsm.Op, 0, len(reqs))
	for i, r := range reqs {
		op, err := e.txnOp(r, depth)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", branch, i, err)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// txnOp translates one request op.
func (e *Server) txnOp(r *pb.RequestOp, depth int) (fsm.Op, error) {
	switch x := r.Request.(type) {
	case *pb.RequestOp_RequestRange:
		rr := x.RequestRange
		op, err := e.rangeOp(rr.Key, rr.RangeEnd)
		op.Range.Revision = rr.Revision // a revision outside the window fails the transaction, as in etcd
		return op, err
	case *pb.RequestOp_RequestPut:
		return e.putOp(x.RequestPut)
	case *pb.RequestOp_RequestDeleteRange:
		return e.deleteOp(x.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		txn, err := e.etcdTxn(x.RequestTxn, depth+1)
		if err != nil {
			return fsm.Op{}, err
		}
		return fsm.Op{Type: fsm.OpTxn, Txn: txn}, nil
	}
	return fsm.Op{}, fmt.Errorf("%w: empty request op", kv.ErrInvalidParam)
}

// txnAnswer answers a transaction from its result: one response per request op of
// the branch that ran, nested transactions included, each op's header stamped as
// etcd stamps it (opRevisions). The caller sets the outer header.
func (e *Server) txnAnswer(r *pb.TxnRequest, res *fsm.Result) (*pb.TxnResponse, error) {
	revs := &opRevisions{before: res.Revision, after: res.Revision}
	if wrote(res.Responses) {
		revs.before = res.Revision - 1 // a write takes the next revision
	}
	return e.txnBranch(r, res.Succeeded, res.Responses, revs)
}

// opRevisions is the revision each op response of a transaction carries in its
// header, as etcd's server/etcdserver/txn gives it: a put answers the transaction's
// revision (after); a range, or a delete that deleted nothing, answers the revision
// before the transaction until an earlier op of it wrote, after then; a delete that
// deleted answers after. A nested transaction's own header is empty.
//
// Example: at revision 9, [get a, delete x (nothing), put b, get a] answers 9, 9,
// 10, 10; a transaction that writes nothing answers its revision everywhere.
type opRevisions struct {
	before, after int64
	wrote         bool // an op answered so far wrote
}

// next is the header revision of an op that wrote (or not).
func (o *opRevisions) next(w bool) *pb.ResponseHeader {
	o.wrote = o.wrote || w
	if o.wrote {
		return &pb.ResponseHeader{Revision: o.after}
	}
	return &pb.ResponseHeader{Revision: o.before}
}

// wrote reports whether any op (nested ones included) wrote.
func wrote(resps []fsm.OpResponse) bool {
	for _, r := range resps {
		if r.Type == fsm.OpPut || r.Deleted > 0 || (r.Txn != nil && wrote(r.Txn.Responses)) {
			return true
		}
	}
	return false
}

// txnBranch answers a transaction (nested or not) from the responses of the branch
// that ran: one response per request op.
func (e *Server) txnBranch(r *pb.TxnRequest, succeeded bool, resps []fsm.OpResponse, revs *opRevisions) (*pb.TxnResponse, error) {
	reqs := r.Success
	if !succeeded {
		reqs = r.Failure
	}
	if len(resps) != len(reqs) {
		return nil, fmt.Errorf("txn: %d responses for %d request ops", len(resps), len(reqs))
	}
	resp := &pb.TxnResponse{Succeeded: succeeded, Responses: make([]*pb.ResponseOp, 0, len(reqs))}
	for i, req := range reqs {
		op, err := e.txnResponse(req, resps[i], revs)
		if err != nil {
			return nil, err
		}
		resp.Responses = append(resp.Responses, op)
	}
	return resp, nil
}

// txnResponse answers one request op from its op's response.
func (e *Server) txnResponse(req *pb.RequestOp, r fsm.OpResponse, revs *opRevisions) (*pb.ResponseOp, error) {
	switch x := req.Request.(type) {
	case *pb.RequestOp_RequestRange:
		rr, err := e.shapeRange(x.RequestRange, r.KVs, r.More)
		if err != nil {
			return nil, err
		}
		rr.Header = revs.next(false)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}, nil
	case *pb.RequestOp_RequestPut:
		pr := putResponse(x.RequestPut, r)
		pr.Header = revs.next(true)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: pr}}, nil
	case *pb.RequestOp_RequestDeleteRange:
		dr := deleteResponse(x.RequestDeleteRange, r)
		dr.Header = revs.next(r.Deleted > 0)
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}}, nil
	case *pb.RequestOp_RequestTxn:
		if r.Txn == nil {
			return nil, errors.New("txn: a nested transaction without its result")
		}
		tr, err := e.txnBranch(x.RequestTxn, r.Txn.Succeeded, r.Txn.Responses, revs)
		if err != nil {
			return nil, err
		}
		tr.Header = &pb.ResponseHeader{}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseTxn{ResponseTxn: tr}}, nil
	}
	return nil, fmt.Errorf("txn: unexpected request op %T", req.Request)
}

// putResponse answers a put: its previous key if asked and there was one.
func putResponse(r *pb.PutRequest, resp fsm.OpResponse) *pb.PutResponse {
	pr := &pb.PutResponse{}
	if r.PrevKv && resp.PrevKV != nil {
		pr.PrevKv = etcdKeyValue(*resp.PrevKV, false)
	}
	return pr
}

// deleteResponse answers a delete: the count, and the previous keys if asked.
func deleteResponse(r *pb.DeleteRangeRequest, resp fsm.OpResponse) *pb.DeleteRangeResponse {
	dr := &pb.DeleteRangeResponse{Deleted: resp.Deleted}
	if r.PrevKv {
		dr.PrevKvs = make([]*mvccpb.KeyValue, 0, len(resp.PrevKVs))
		for _, kv := range resp.PrevKVs {
			dr.PrevKvs = append(dr.PrevKvs, etcdKeyValue(kv, false))
		}
	}
	return dr
}

var (
	etcdCompareResults = map[pb.Compare_CompareResult]string{
		pb.Compare_EQUAL: api.ResultEqual, pb.Compare_NOT_EQUAL: api.ResultNotEqual,
		pb.Compare_LESS: api.ResultLess, pb.Compare_GREATER: api.ResultGreater,
	}
	// etcdCompareTargets: a LEASE compare is validated as an integer compare (the KV
	// API has no lease target), then compares the lease (fsm.TargetLease).
	etcdCompareTargets = map[pb.Compare_CompareTarget]string{
		pb.Compare_VERSION: api.TargetVersion, pb.Compare_CREATE: api.TargetCreateRevision,
		pb.Compare_MOD: api.TargetModRevision, pb.Compare_VALUE: api.TargetValue,
		pb.Compare_LEASE: api.TargetVersion,
	}
)

// etcdCompare translates one guard, validated by the core's CheckCompare. range_end compares
// every key of the range (fsm.Compare.End): "\x00" every key from key on, an end at
// or before key an empty range, as in etcd.
func (e *Server) etcdCompare(c *pb.Compare) (fsm.Compare, error) {
	target, ok := etcdCompareTargets[c.Target]
	if !ok {
		return fsm.Compare{}, fmt.Errorf("%w: unknown compare target %v", kv.ErrInvalidParam, c.Target)
	}
	result, ok := etcdCompareResults[c.Result]
	if !ok {
		return fsm.Compare{}, fmt.Errorf("%w: unknown compare result %v", kv.ErrInvalidParam, c.Result)
	}
	ac := api.Compare{Key: string(c.Key), Target: target, Result: result}
	switch c.Target {
	case pb.Compare_VERSION:
		ac.Int = c.GetVersion()
	case pb.Compare_CREATE:
		ac.Int = c.GetCreateRevision()
	case pb.Compare_MOD:
		ac.Int = c.GetModRevision()
	case pb.Compare_LEASE:
		ac.Int = c.GetLease()
	case pb.Compare_VALUE:
		ac.Value = c.GetValue()
		if ac.Value == nil {
			ac.Value = []byte{}
		}
	}
	var end []byte
	if len(c.RangeEnd) > 0 {
		end = c.RangeEnd
		if string(end) == "\x00" {
			end = []byte(etcdKeyspaceEnd)
		}
	}
	fc, err := e.core.CheckCompare(ac, end)
	if err != nil {
		return fsm.Compare{}, err
	}
	if c.Target == pb.Compare_LEASE {
		fc.Target = fsm.TargetLease
	}
	return fc, nil
}
