package kv

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
)

// etcdKV serves etcd's KV service. Reads come from a view (viewAt), writes are one
// KV API transaction each (limits.txn, applyTxn): the same rights, limits and
// reserved prefixes as POST /v1/txn.
type etcdKV struct {
	pb.UnimplementedKVServer
	e *EtcdServer
}

// rangeOp validates the range of an etcd request with the KV API's rules for a ranged
// get (limits.op) and returns it as a state machine op: End nil for one key.
func (e *EtcdServer) rangeOp(key, end []byte) (fsm.Op, error) {
	if len(key) == 0 {
		return fsm.Op{}, errEtcdEmptyKey
	}
	o := api.Op{Type: api.OpGet, Key: string(key), End: string(end)}
	if bytes.Equal(end, []byte{0}) {
		o.End = etcdKeyspaceEnd
	}
	return e.s.lim.op(o)
}

// Range serves KV.Range: one key, or the keys of [key, range_end), filtered,
// sorted and limited as etcd does, at the request's revision.
func (k etcdKV) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	e := k.e
	op, err := e.rangeOp(r.Key, r.RangeEnd)
	if err != nil {
		return nil, err
	}
	if err := checkTxnAccess(authzOf(ctx), &fsm.Txn{Success: []fsm.Op{op}}); err != nil {
		return nil, err
	}
	cons := fsm.Linearizable
	if r.Serializable {
		cons = fsm.Serializable
	}
	view, err := e.s.viewAt(ctx, cons, r.Revision)
	if err != nil {
		return nil, err
	}
	rev := r.Revision
	if rev <= 0 {
		rev = view.Revision()
	}
	var kvs []fsm.KeyValue
	if op.End == nil {
		kv, err := view.Get(op.Key, rev)
		if err == nil {
			kvs = []fsm.KeyValue{kv}
		} else if !errors.Is(err, fsm.ErrKeyNotFound) {
			return nil, revisionError(view, rev, err)
		}
	} else if kvs, _, err = view.Range(op.Key, op.End, rev, 0); err != nil {
		return nil, revisionError(view, rev, err)
	}
	resp, err := e.shapeRange(r, kvs, false)
	if err != nil {
		return nil, err
	}
	resp.Header = e.header(view.Revision())
	return resp, nil
}

// shapeRange turns the keys of a range into etcd's answer: keys this door hides are
// dropped, then etcd's revision filters, sort, count, limit, keys_only and count_only
// apply. cut says the keys came from a get that its limit cut (a transaction's get):
// an answer that needs every key (a sort, a filter, a count) is then refused.
func (e *EtcdServer) shapeRange(r *pb.RangeRequest, kvs []fsm.KeyValue, cut bool) (*pb.RangeResponse, error) {
	kvs = slices.DeleteFunc(slices.Clone(kvs), func(kv fsm.KeyValue) bool {
		return e.s.reservedKey(kv.Key) || !inRevisionFilters(r, kv)
	})
	if err := sortRange(r, kvs); err != nil {
		return nil, err
	}
	if cut && (r.SortOrder != pb.RangeRequest_NONE || r.SortTarget != pb.RangeRequest_KEY ||
		r.Limit == 0 || int64(len(kvs)) < r.Limit || hasRevisionFilters(r) || r.CountOnly) {
		return nil, errRangeCut
	}
	resp := &pb.RangeResponse{Count: int64(len(kvs))}
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs, resp.More = kvs[:r.Limit], true
	}
	if cut {
		resp.More = true // and Count is only a lower bound
	}
	if r.CountOnly {
		return resp, nil
	}
	resp.Kvs = make([]*mvccpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		resp.Kvs = append(resp.Kvs, etcdKeyValue(kv, r.KeysOnly))
	}
	return resp, nil
}

// inRevisionFilters reports whether kv passes the request's min/max revision filters.
func inRevisionFilters(r *pb.RangeRequest, kv fsm.KeyValue) bool {
	return (r.MinModRevision == 0 || kv.ModRevision >= r.MinModRevision) &&
		(r.MaxModRevision == 0 || kv.ModRevision <= r.MaxModRevision) &&
		(r.MinCreateRevision == 0 || kv.CreateRevision >= r.MinCreateRevision) &&
		(r.MaxCreateRevision == 0 || kv.CreateRevision <= r.MaxCreateRevision)
}

// errRangeCut: a transaction's ranged get held more keys than one transaction reads
// (Config.MaxListLimit), and its answer needs all of them (a sort, a filter, no limit).
var errRangeCut = errors.New("the range holds more keys than one transaction reads")

func hasRevisionFilters(r *pb.RangeRequest) bool {
	return r.MinModRevision != 0 || r.MaxModRevision != 0 || r.MinCreateRevision != 0 || r.MaxCreateRevision != 0
}

// sortRange sorts kvs (in key order) as the request asks; stable, so equal fields
// stay in key order, as in etcd.
func sortRange(r *pb.RangeRequest, kvs []fsm.KeyValue) error {
	order := r.SortOrder
	if order == pb.RangeRequest_NONE {
		if r.SortTarget == pb.RangeRequest_KEY {
			return nil
		}
		order = pb.RangeRequest_ASCEND // etcd: a target without an order ascends
	}
	var field func(kv fsm.KeyValue) int64
	switch r.SortTarget {
	case pb.RangeRequest_KEY:
	case pb.RangeRequest_VERSION:
		field = func(kv fsm.KeyValue) int64 { return kv.Version }
	case pb.RangeRequest_CREATE:
		field = func(kv fsm.KeyValue) int64 { return kv.CreateRevision }
	case pb.RangeRequest_MOD:
		field = func(kv fsm.KeyValue) int64 { return kv.ModRevision }
	case pb.RangeRequest_VALUE:
	default:
		return etcdUnsupported(fmt.Sprintf("sort target %v", r.SortTarget))
	}
	byField := func(a, b fsm.KeyValue) int {
		switch {
		case r.SortTarget == pb.RangeRequest_KEY:
			return bytes.Compare(a.Key, b.Key)
		case r.SortTarget == pb.RangeRequest_VALUE:
			return bytes.Compare(a.Value, b.Value)
		}
		return cmp.Compare(field(a), field(b))
	}
	switch order {
	case pb.RangeRequest_ASCEND:
		slices.SortStableFunc(kvs, byField)
	case pb.RangeRequest_DESCEND:
		slices.SortStableFunc(kvs, func(a, b fsm.KeyValue) int { return byField(b, a) })
	default:
		return etcdUnsupported(fmt.Sprintf("sort order %v", order))
	}
	return nil
}

// etcdKeyValue converts a state machine key to etcd's form.
func etcdKeyValue(kv fsm.KeyValue, keysOnly bool) *mvccpb.KeyValue {
	out := &mvccpb.KeyValue{Key: kv.Key, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision,
		Version: kv.Version, Lease: kv.Lease}
	if !keysOnly {
		out.Value = kv.Value
	}
	return out
}

// Put serves KV.Put as a one-op transaction.
func (k etcdKV) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	req, err := k.e.putOp(r)
	if err != nil {
		return nil, err
	}
	res, err := k.e.applyEtcdTxn(ctx, api.TxnRequest{Success: []api.Op{req}})
	if err != nil {
		return nil, err
	}
	resp := &pb.PutResponse{Header: k.e.header(res.Revision)}
	if r.PrevKv && len(res.Responses) > 0 && res.Responses[0].PrevKV != nil {
		resp.PrevKv = etcdKeyValue(*res.Responses[0].PrevKV, false)
	}
	return resp, nil
}

// putOp translates a put; ignore_value and ignore_lease are not served yet.
func (e *EtcdServer) putOp(r *pb.PutRequest) (api.Op, error) {
	switch {
	case len(r.Key) == 0:
		return api.Op{}, errEtcdEmptyKey
	case r.IgnoreValue:
		return api.Op{}, etcdUnsupported("put with ignore_value")
	case r.IgnoreLease:
		return api.Op{}, etcdUnsupported("put with ignore_lease")
	}
	value := r.Value
	if value == nil {
		value = []byte{}
	}
	return api.Op{Type: api.OpPut, Key: string(r.Key), Value: value, Lease: r.Lease}, nil
}

// applyEtcdTxn validates a transaction with the KV API's rules and applies it.
func (e *EtcdServer) applyEtcdTxn(ctx context.Context, req api.TxnRequest) (*fsm.Result, error) {
	txn, err := e.s.lim.txn(req)
	if err != nil {
		return nil, err
	}
	return e.s.applyTxn(ctx, txn)
}

// deleteOps translates a delete: one op, or, for a ranged delete that wants the
// previous keys, a get of the range then its delete in the same transaction (so the
// keys read are exactly the keys deleted).
func (e *EtcdServer) deleteOps(r *pb.DeleteRangeRequest) ([]api.Op, error) {
	op, err := e.rangeOp(r.Key, r.RangeEnd)
	if err != nil {
		return nil, err
	}
	if op.End == nil {
		return []api.Op{{Type: api.OpDelete, Key: string(r.Key)}}, nil
	}
	del := api.Op{Type: api.OpDeleteRange, Key: string(op.Key), End: string(op.End)}
	if !r.PrevKv {
		return []api.Op{del}, nil
	}
	return []api.Op{{Type: api.OpGet, Key: string(op.Key), End: string(op.End)}, del}, nil
}

// deleteResponse reads a delete's answer from the responses of its ops.
func (e *EtcdServer) deleteResponse(r *pb.DeleteRangeRequest, resps []fsm.OpResponse) (*pb.DeleteRangeResponse, error) {
	last := resps[len(resps)-1]
	resp := &pb.DeleteRangeResponse{Deleted: last.Deleted}
	if !r.PrevKv {
		return resp, nil
	}
	if len(resps) == 1 {
		if last.PrevKV != nil {
			resp.PrevKvs = []*mvccpb.KeyValue{etcdKeyValue(*last.PrevKV, false)}
		}
		return resp, nil
	}
	if resps[0].More {
		return nil, fmt.Errorf("%w: the range held more than %d keys: they are deleted, but their previous "+
			"values cannot all be returned", ErrTooLarge, e.s.lim.maxListLimit)
	}
	for _, kv := range resps[0].KVs {
		resp.PrevKvs = append(resp.PrevKvs, etcdKeyValue(kv, false))
	}
	return resp, nil
}

// DeleteRange serves KV.DeleteRange as a transaction.
func (k etcdKV) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	ops, err := k.e.deleteOps(r)
	if err != nil {
		return nil, err
	}
	res, err := k.e.applyEtcdTxn(ctx, api.TxnRequest{Success: ops})
	if err != nil {
		return nil, err
	}
	resp, err := k.e.deleteResponse(r, res.Responses)
	if err != nil {
		return nil, err
	}
	resp.Header = k.e.header(res.Revision)
	return resp, nil
}

// Compact serves KV.Compact: the compact right (POST /v1/compact's rule), then the
// same command. physical is ignored: reads below the revision fail at once, the space
// is reclaimed in the background.
func (k etcdKV) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	if err := routeRight(ctx, "POST "+api.PathCompact); err != nil {
		return nil, err
	}
	res, err := k.e.s.compact(ctx, r.Revision)
	if err != nil {
		return nil, err
	}
	return &pb.CompactionResponse{Header: k.e.header(res.Revision)}, nil
}

// RangeStream is not served yet: clients fall back to Range.
func (k etcdKV) RangeStream(*pb.RangeRequest, grpc.ServerStreamingServer[pb.RangeStreamResponse]) error {
	return etcdUnimplemented("RangeStream")
}
