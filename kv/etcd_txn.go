package kv

import (
	"context"
	"errors"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// etcdTxnOp is where one etcd request op landed in the translated transaction: its
// ops are branch[first : first+n].
type etcdTxnOp struct {
	req      *pb.RequestOp
	first, n int
}

// Txn serves KV.Txn as one KV API transaction. Nested transactions and LEASE or
// ranged compares are refused until the state machine serves them.
func (k etcdKV) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	e := k.e
	var req api.TxnRequest
	for i, c := range r.Compare {
		ac, err := etcdCompare(c)
		if err != nil {
			return nil, fmt.Errorf("compare[%d]: %w", i, err)
		}
		req.Compare = append(req.Compare, ac)
	}
	var plans [2][]etcdTxnOp
	var err error
	if req.Success, plans[0], err = e.txnOps(r.Success, "success"); err != nil {
		return nil, err
	}
	if req.Failure, plans[1], err = e.txnOps(r.Failure, "failure"); err != nil {
		return nil, err
	}
	res, err := e.applyEtcdTxn(ctx, req)
	if err != nil {
		return nil, err
	}
	plan := plans[0]
	if !res.Succeeded {
		plan = plans[1]
	}
	resp := &pb.TxnResponse{Header: e.header(res.Revision), Succeeded: res.Succeeded}
	for _, p := range plan {
		op, err := e.txnResponse(p, res.Responses[p.first:p.first+p.n])
		if errors.Is(err, errRangeCut) {
			return nil, fmt.Errorf("%w: the transaction is applied (revision %d), but a range of its answer %v (at most %d keys)",
				ErrTooLarge, res.Revision, err, e.s.lim.maxListLimit)
		}
		if err != nil {
			return nil, err
		}
		resp.Responses = append(resp.Responses, op)
	}
	return resp, nil
}

// txnOps translates one branch.
func (e *EtcdServer) txnOps(reqs []*pb.RequestOp, branch string) ([]api.Op, []etcdTxnOp, error) {
	var ops []api.Op
	var plan []etcdTxnOp
	for i, r := range reqs {
		more, err := e.txnOp(r)
		if err != nil {
			return nil, nil, fmt.Errorf("%s[%d]: %w", branch, i, err)
		}
		plan = append(plan, etcdTxnOp{req: r, first: len(ops), n: len(more)})
		ops = append(ops, more...)
	}
	return ops, plan, nil
}

// txnOp translates one request op into the ops that serve it.
func (e *EtcdServer) txnOp(r *pb.RequestOp) ([]api.Op, error) {
	switch x := r.Request.(type) {
	case *pb.RequestOp_RequestRange:
		rr := x.RequestRange
		if rr.Revision != 0 {
			return nil, etcdUnsupported("a range at a revision inside a transaction")
		}
		op, err := e.rangeOp(rr.Key, rr.RangeEnd)
		if err != nil {
			return nil, err
		}
		return []api.Op{{Type: api.OpGet, Key: string(op.Key), End: string(op.End)}}, nil
	case *pb.RequestOp_RequestPut:
		op, err := e.putOp(x.RequestPut)
		return []api.Op{op}, err
	case *pb.RequestOp_RequestDeleteRange:
		return e.deleteOps(x.RequestDeleteRange)
	case *pb.RequestOp_RequestTxn:
		return nil, etcdUnsupported("nested transactions")
	}
	return nil, fmt.Errorf("%w: empty request op", ErrInvalidParam)
}

// txnResponse answers one request op from the responses of its ops.
func (e *EtcdServer) txnResponse(p etcdTxnOp, resps []fsm.OpResponse) (*pb.ResponseOp, error) {
	switch x := p.req.Request.(type) {
	case *pb.RequestOp_RequestRange:
		rr, err := e.shapeRange(x.RequestRange, resps[0].KVs, resps[0].More)
		if err != nil {
			return nil, err
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseRange{ResponseRange: rr}}, nil
	case *pb.RequestOp_RequestPut:
		pr := &pb.PutResponse{}
		if x.RequestPut.PrevKv && resps[0].PrevKV != nil {
			pr.PrevKv = etcdKeyValue(*resps[0].PrevKV, false)
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponsePut{ResponsePut: pr}}, nil
	case *pb.RequestOp_RequestDeleteRange:
		dr, err := e.deleteResponse(x.RequestDeleteRange, resps)
		if err != nil {
			return nil, err
		}
		return &pb.ResponseOp{Response: &pb.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}}, nil
	}
	return nil, fmt.Errorf("txn: unexpected request op %T", p.req.Request)
}

var (
	etcdCompareResults = map[pb.Compare_CompareResult]string{
		pb.Compare_EQUAL: api.ResultEqual, pb.Compare_NOT_EQUAL: api.ResultNotEqual,
		pb.Compare_LESS: api.ResultLess, pb.Compare_GREATER: api.ResultGreater,
	}
	etcdCompareTargets = map[pb.Compare_CompareTarget]string{
		pb.Compare_VERSION: api.TargetVersion, pb.Compare_CREATE: api.TargetCreateRevision,
		pb.Compare_MOD: api.TargetModRevision, pb.Compare_VALUE: api.TargetValue,
	}
)

// etcdCompare translates one guard; limits.compare validates it with the rest.
func etcdCompare(c *pb.Compare) (api.Compare, error) {
	switch {
	case len(c.Key) == 0:
		return api.Compare{}, errEtcdEmptyKey
	case len(c.RangeEnd) > 0:
		return api.Compare{}, etcdUnsupported("compares over a key range (range_end)")
	case c.Target == pb.Compare_LEASE:
		return api.Compare{}, etcdUnsupported("LEASE compares")
	}
	target, ok := etcdCompareTargets[c.Target]
	if !ok {
		return api.Compare{}, fmt.Errorf("%w: unknown compare target %v", ErrInvalidParam, c.Target)
	}
	result, ok := etcdCompareResults[c.Result]
	if !ok {
		return api.Compare{}, fmt.Errorf("%w: unknown compare result %v", ErrInvalidParam, c.Result)
	}
	ac := api.Compare{Key: string(c.Key), Target: target, Result: result}
	switch c.Target {
	case pb.Compare_VERSION:
		ac.Int = c.GetVersion()
	case pb.Compare_CREATE:
		ac.Int = c.GetCreateRevision()
	case pb.Compare_MOD:
		ac.Int = c.GetModRevision()
	case pb.Compare_VALUE:
		ac.Value = c.GetValue()
		if ac.Value == nil {
			ac.Value = []byte{}
		}
	}
	return ac, nil
}
