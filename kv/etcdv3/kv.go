package etcdv3

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
)

// etcdKV serves etcd's KV service: reads are the core's Range, writes one core Txn
// each, with the same rights, limits and reserved prefixes as POST /v1/txn.
type etcdKV struct {
	pb.UnimplementedKVServer
	e *Server
}

// rangeEnd translates etcd's range end: "\x00" (every key from the start key on) is
// etcdKeyspaceEnd. An empty key is the core's to refuse (kv.ErrEmptyKey).
func rangeEnd(key, end []byte) ([]byte, error) {
	if bytes.Equal(end, []byte{0}) {
		return []byte(etcdKeyspaceEnd), nil
	}
	return end, nil
}

// rangeOp validates the range of an etcd request as a ranged get (the core's CheckOp)
// and returns it as a state machine op: End nil for one key.
func (e *Server) rangeOp(key, end []byte) (fsm.Op, error) {
	end, err := rangeEnd(key, end)
	if err != nil {
		return fsm.Op{}, err
	}
	return e.core.CheckOp(api.Op{Type: api.OpGet, Key: string(key), End: string(end)})
}

// Range serves KV.Range: one key, or the keys of [key, range_end), filtered,
// sorted and limited as etcd does, at the request's revision.
func (k etcdKV) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	e := k.e
	end, err := rangeEnd(r.Key, r.RangeEnd)
	if err != nil {
		return nil, err
	}
	req := kv.RangeRequest{Key: r.Key, End: end, Revision: r.Revision, Serializable: r.Serializable}
	if pageOnly(r) {
		req.Limit = r.Limit
	}
	// count_only ignores limit, sort and filters (etcd's count does): the store
	// counts the range from its ranks instead of the door counting every key.
	req.CountOnly = r.CountOnly
	res, err := e.core.Range(ctx, callerOf(ctx), req)
	if err != nil {
		return nil, err
	}
	var resp *pb.RangeResponse
	if res.Counted {
		resp = &pb.RangeResponse{Count: res.Count, More: res.More}
		if !r.CountOnly {
			resp.Kvs = etcdKeyValues(res.KVs, r.KeysOnly)
		}
	} else if resp, err = e.shapeRange(r, res.KVs, false); err != nil {
		return nil, err
	}
	resp.Header = e.header(res.Revision)
	return resp, nil
}

// pageOnly says a limited range needs only its first Limit keys in key order and the
// range's count (no sort, filter or count_only): the core then reads just the page.
func pageOnly(r *pb.RangeRequest) bool {
	return r.Limit > 0 && !r.CountOnly && !hasRevisionFilters(r) && r.SortTarget == pb.RangeRequest_KEY &&
		(r.SortOrder == pb.RangeRequest_NONE || r.SortOrder == pb.RangeRequest_ASCEND)
}

// etcdKeyValues converts kvs to etcd's form.
func etcdKeyValues(kvs []fsm.KeyValue, keysOnly bool) []*mvccpb.KeyValue {
	out := make([]*mvccpb.KeyValue, len(kvs))
	vals := make([]mvccpb.KeyValue, len(kvs)) // one allocation for every key
	for i, kv := range kvs {
		setKeyValue(&vals[i], kv, keysOnly)
		out[i] = &vals[i]
	}
	return out
}

// shapeRange turns the keys of a range into etcd's answer: keys this door hides are
// dropped and the rest counted (etcd's count ignores the revision filters), then
// etcd's revision filters, sort, limit, keys_only and count_only apply. cut says the keys came from a get that its limit cut (a transaction's get):
// an answer that needs every key (a sort, a filter, a count) is then refused.
func (e *Server) shapeRange(r *pb.RangeRequest, kvs []fsm.KeyValue, cut bool) (*pb.RangeResponse, error) {
	hidden := func(kv fsm.KeyValue) bool { return e.core.Hidden(kv.Key) }
	// The keys are dropped and sorted in place, in a copy (kvs is the core's) made only
	// when some are: a plain range in key order, the most common, copies none.
	if hasRevisionFilters(r) || r.SortOrder != pb.RangeRequest_NONE || r.SortTarget != pb.RangeRequest_KEY ||
		slices.ContainsFunc(kvs, hidden) {
		kvs = slices.DeleteFunc(slices.Clone(kvs), hidden)
	}
	count := int64(len(kvs))
	kvs = slices.DeleteFunc(kvs, func(kv fsm.KeyValue) bool { return !inRevisionFilters(r, kv) })
	if err := sortRange(r, kvs); err != nil {
		return nil, err
	}
	if cut && (r.SortOrder != pb.RangeRequest_NONE || r.SortTarget != pb.RangeRequest_KEY ||
		r.Limit == 0 || int64(len(kvs)) < r.Limit || hasRevisionFilters(r) || r.CountOnly) {
		return nil, errRangeCut
	}
	if r.CountOnly {
		return &pb.RangeResponse{Count: count}, nil // etcd: no keys, so never "more"
	}
	resp := &pb.RangeResponse{Count: count}
	if r.Limit > 0 && int64(len(kvs)) > r.Limit {
		kvs, resp.More = kvs[:r.Limit], true
	}
	if cut {
		resp.More = true // and Count is only a lower bound
	}
	resp.Kvs = etcdKeyValues(kvs, r.KeysOnly)
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
	out := &mvccpb.KeyValue{}
	setKeyValue(out, kv, keysOnly)
	return out
}

// setKeyValue sets out, a zero KeyValue, to kv in etcd's form.
func setKeyValue(out *mvccpb.KeyValue, kv fsm.KeyValue, keysOnly bool) {
	out.Key, out.CreateRevision, out.ModRevision = kv.Key, kv.CreateRevision, kv.ModRevision
	out.Version, out.Lease = kv.Version, kv.Lease
	if !keysOnly {
		out.Value = kv.Value
	}
}

// Put serves KV.Put as a one-op transaction.
func (k etcdKV) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	op, err := k.e.putOp(r)
	if err != nil {
		return nil, err
	}
	or, rev, err := k.e.applyOne(ctx, op)
	if err != nil {
		return nil, err
	}
	resp := putResponse(r, or)
	resp.Header = k.e.header(rev)
	return resp, nil
}

// applyOne applies op as a one-op transaction and returns its response and revision.
func (e *Server) applyOne(ctx context.Context, op fsm.Op) (fsm.OpResponse, int64, error) {
	one := &struct { // the transaction and its one op in one allocation
		txn fsm.Txn
		ops [1]fsm.Op
	}{ops: [1]fsm.Op{op}}
	one.txn.Success = one.ops[:]
	res, err := e.applyEtcdTxn(ctx, &one.txn, nil)
	if err != nil {
		return fsm.OpResponse{}, 0, err
	}
	if len(res.Responses) != 1 {
		return fsm.OpResponse{}, 0, fmt.Errorf("one-op transaction: %d responses", len(res.Responses))
	}
	return res.Responses[0], res.Revision, nil
}

// putOp translates a put, validated by limits.op. ignore_value and ignore_lease keep
// the key's value or lease (fsm.Op.IgnoreValue, IgnoreLease); the key must exist.
// The refusals come in etcd's order (checkPutRequest): an empty key, then the
// ignore flags, then keel's other rules.
func (e *Server) putOp(r *pb.PutRequest) (fsm.Op, error) {
	op, err := e.core.CheckOp(api.Op{Type: api.OpPut, Key: string(r.Key), Value: r.Value, Lease: r.Lease})
	switch {
	case errors.Is(err, kv.ErrEmptyKey):
		return fsm.Op{}, err
	case r.IgnoreValue && len(r.Value) != 0:
		return fsm.Op{}, errEtcdValueProvided
	case r.IgnoreLease && r.Lease != 0:
		return fsm.Op{}, errEtcdLeaseProvided
	case err != nil:
		return fsm.Op{}, err
	}
	op.IgnoreValue, op.IgnoreLease = r.IgnoreValue, r.IgnoreLease
	return op, nil
}

// applyEtcdTxn applies a transaction with the core's Txn, which also refuses what etcd
// refuses before proposing: the duplicate-key check of etcd's checkIntervals, on the
// request as etcd sees it (dupView; not the KV API's stricter one). r is nil for a
// one-op request, which writes one key.
func (e *Server) applyEtcdTxn(ctx context.Context, txn *fsm.Txn, r *pb.TxnRequest) (*fsm.Result, error) {
	opts := kv.TxnOptions{EtcdDuplicates: true, DeleteAroundReserved: true}
	if r != nil {
		opts.DuplicateView = dupView(r, txn)
	}
	return e.core.Txn(ctx, callerOf(ctx), txn, opts)
}

// dupView is txn as CheckDuplicateKeysEtcd must see it: a delete whose range_end was
// "\x00" (every key from key on, translated to the end etcdKeyspaceEnd) has no end
// again, the shape whose etcd quirk that check knows; a delete up to an explicit end
// keeps it. txn is the translation of r (etcdTxn), op for op.
func dupView(r *pb.TxnRequest, txn *fsm.Txn) *fsm.Txn {
	view := &fsm.Txn{Compares: txn.Compares}
	view.Success = dupViewOps(r.Success, txn.Success)
	view.Failure = dupViewOps(r.Failure, txn.Failure)
	return view
}

func dupViewOps(reqs []*pb.RequestOp, ops []fsm.Op) []fsm.Op {
	out := slices.Clone(ops)
	for i := range out {
		switch x := reqs[i].Request.(type) {
		case *pb.RequestOp_RequestDeleteRange:
			if bytes.Equal(x.RequestDeleteRange.RangeEnd, []byte{0}) {
				out[i].End = nil
			}
		case *pb.RequestOp_RequestTxn:
			out[i].Txn = dupView(x.RequestTxn, out[i].Txn)
		}
	}
	return out
}

// deleteOp translates a delete, validated as a get of its range (rangeOp); prev_kv
// asks the state machine for the deleted keys (fsm.Op.PrevKV).
func (e *Server) deleteOp(r *pb.DeleteRangeRequest) (fsm.Op, error) {
	op, err := e.rangeOp(r.Key, r.RangeEnd)
	if err != nil {
		return fsm.Op{}, err
	}
	del := fsm.Op{Type: fsm.OpDelete, Key: op.Key, PrevKV: r.PrevKv}
	if op.End != nil {
		del.Type, del.End = fsm.OpDeleteRange, op.End
	}
	return del, nil
}

// DeleteRange serves KV.DeleteRange as a one-op transaction.
func (k etcdKV) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	op, err := k.e.deleteOp(r)
	if err != nil {
		return nil, err
	}
	or, rev, err := k.e.applyOne(ctx, op)
	if err != nil {
		return nil, err
	}
	resp := deleteResponse(r, or)
	resp.Header = k.e.header(rev)
	return resp, nil
}

// Compact serves KV.Compact: the core's Compact (POST /v1/compact's rule and
// command). physical is ignored: reads below the revision fail at once, the space
// is reclaimed in the background.
func (k etcdKV) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	res, err := k.e.core.Compact(ctx, callerOf(ctx), r.Revision)
	if err != nil {
		return nil, err
	}
	return &pb.CompactionResponse{Header: k.e.header(res.Revision)}, nil
}
