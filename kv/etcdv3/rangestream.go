package etcdv3

import (
	"bytes"
	"context"
	"math"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/keel-kv/keel/kv"
)

// RangeStream (etcd 3.7's KV.RangeStream, which kube-apiserver tries before Range)
// answers a Range in chunks, as etcd does (server/etcdserver/v3_server.go
// rangeStream): each chunk a disjoint slice of the keys in order, the first 10 keys
// long, the next doubled or halved to land near etcdChunkBytes; header, more and count
// on the last chunk only, so that proto.Merge of the chunks is the Range answer.
//
// A range in key order is read a chunk at a time (streamPages): the first read fixes
// the revision, every later chunk reads that revision, so writes made meanwhile are not
// seen, and the server holds one chunk at a time. A single key, count_only, and a range
// overlapping keys this door hides (whose count must leave them out) are read as Range
// reads them, then sent in chunks. Rights are Range's: the read right on all of the
// range.
func (k etcdKV) RangeStream(r *pb.RangeRequest, ss grpc.ServerStreamingServer[pb.RangeStreamResponse]) error {
	if err := checkRangeStream(r); err != nil {
		return err
	}
	// A request as a unary Range is: it takes a slot of the client's and the node's
	// bound, and each read is bounded by the request timeout.
	src := peerAddr(ss.Context())
	if err := k.e.core.AdmitRequest(src); err != nil {
		return err
	}
	defer k.e.core.ReleaseRequest(src)
	end, err := rangeEnd(r.Key, r.RangeEnd)
	if err != nil {
		return err
	}
	if end != nil && !r.CountOnly && r.SortTarget == pb.RangeRequest_KEY {
		return k.e.streamPages(ss, r, end)
	}
	ctx, cancel := k.e.core.RequestContext(ss.Context())
	defer cancel()
	resp, err := k.Range(ctx, r)
	if err != nil {
		return err
	}
	return sendRangeChunks(ss, resp)
}

// etcdChunkBytes is the size RangeStream aims its chunks at: etcd's default
// --max-request-bytes, which etcd aims them at.
const etcdChunkBytes = 3 << 19

// etcdFirstChunk is the number of keys of the first chunk, as etcd's
// initialStreamChunkLimit.
const etcdFirstChunk = 10

// checkRangeStream refuses what etcd's RangeStream refuses (v3rpc
// checkRangeStreamRequest), with etcd's codes and messages.
func checkRangeStream(r *pb.RangeRequest) error {
	if r.SortOrder != pb.RangeRequest_NONE && !(r.SortTarget == pb.RangeRequest_KEY && r.SortOrder == pb.RangeRequest_ASCEND) {
		return status.Errorf(codes.Unimplemented, "RangeStream does not support custom sort orders")
	}
	if hasRevisionFilters(r) {
		return status.Errorf(codes.Unimplemented, "RangeStream does not support revision filters")
	}
	return nil
}

// streamPages streams the range [r.Key, end) in key order a chunk at a time: each
// chunk one limited read (kv.Server.Range with Limit) at the revision of the first
// one (serializable after the first: this node has applied it), counted only when it
// may end the stream with keys left (r.Limit reached), as etcd counts the rest then.
func (e *Server) streamPages(ss grpc.ServerStreamingServer[pb.RangeStreamResponse], r *pb.RangeRequest, end []byte) error {
	total := r.Limit
	if total <= 0 {
		total = math.MaxInt64
	}
	req := kv.RangeRequest{Key: r.Key, End: end, Revision: r.Revision, Serializable: r.Serializable}
	var sent, headerRev int64
	for limit := int64(etcdFirstChunk); ; {
		req.Limit = min(limit, total-sent)
		req.NoCount = req.Limit < total-sent
		res, err := e.readChunk(ss.Context(), req)
		if err != nil {
			return err
		}
		if !res.Counted { // the range overlaps hidden keys (only the first read can)
			resp, err := e.shapeRange(r, res.KVs, false)
			if err != nil {
				return err
			}
			resp.Header = e.header(res.Revision)
			return sendRangeChunks(ss, resp)
		}
		if headerRev == 0 {
			headerRev, req.Serializable = res.Revision, true
			if req.Revision <= 0 {
				req.Revision = headerRev
			}
		}
		chunk := &pb.RangeResponse{Kvs: etcdKeyValues(res.KVs, r.KeysOnly)}
		sent += int64(len(res.KVs))
		done := !res.More || sent == total
		if done {
			chunk.Header, chunk.More, chunk.Count = e.header(headerRev), res.More, sent
			if res.More {
				chunk.Count = sent - int64(len(res.KVs)) + res.Count
			}
		}
		if err := ss.Send(&pb.RangeStreamResponse{RangeResponse: chunk}); err != nil || done {
			return err
		}
		req.Key = append(bytes.Clone(res.KVs[len(res.KVs)-1].Key), 0)
		limit = nextChunkLimit(limit, chunk.Kvs)
	}
}

// readChunk reads one chunk, bounded by the request timeout.
func (e *Server) readChunk(ctx context.Context, req kv.RangeRequest) (kv.RangeResult, error) {
	ctx, cancel := e.core.RequestContext(ctx)
	defer cancel()
	return e.core.Range(ctx, callerOf(ctx), req)
}

// sendRangeChunks sends a Range answer read at once in chunks, the last one carrying
// its header, more and count.
func sendRangeChunks(ss grpc.ServerStreamingServer[pb.RangeStreamResponse], resp *pb.RangeResponse) error {
	kvs, limit := resp.Kvs, int64(etcdFirstChunk)
	for {
		n := min(int(limit), len(kvs))
		chunk := &pb.RangeResponse{Kvs: kvs[:n:n]}
		kvs = kvs[n:]
		last := len(kvs) == 0
		if last {
			chunk.Header, chunk.More, chunk.Count = resp.Header, resp.More, resp.Count
		}
		if err := ss.Send(&pb.RangeStreamResponse{RangeResponse: chunk}); err != nil || last {
			return err
		}
		limit = nextChunkLimit(limit, chunk.Kvs)
	}
}

// nextChunkLimit is etcd's adjustChunkLimit: double the keys of a chunk under half
// the target size, halve those of one over twice it, never below one key.
func nextChunkLimit(limit int64, sent []*mvccpb.KeyValue) int64 {
	size := 0
	for _, kv := range sent {
		size += proto.Size(kv)
	}
	switch {
	case size < etcdChunkBytes/2:
		limit *= 2
	case size > etcdChunkBytes*2:
		limit /= 2
	}
	return max(limit, 1)
}
