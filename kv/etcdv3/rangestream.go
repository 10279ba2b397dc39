package etcdv3

import (
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// RangeStream (etcd 3.7's KV.RangeStream, which kube-apiserver tries before Range)
// answers a Range in chunks. The answer is the Range answer, read once from one view
// (so at one revision, with the same rights, hidden keys and count), then sent as
// etcd sends it (server/etcdserver/v3_server.go rangeStream): each chunk a disjoint
// slice of the keys in order, the first 10 keys long, the next doubled or halved to
// land near etcdChunkBytes; header, more and count on the last chunk only, so that
// proto.Merge of the chunks is the Range answer. The keys are read at once, as Range
// reads them (the values are the state machine's, not copied): the stream spares the
// client one large message, not the server its memory. Rights are Range's (the read
// right on all of the range).
func (k etcdKV) RangeStream(r *pb.RangeRequest, ss grpc.ServerStreamingServer[pb.RangeStreamResponse]) error {
	if err := checkRangeStream(r); err != nil {
		return err
	}
	// A request as a unary Range is: it takes a slot of the client's and the node's
	// bound, and the read is bounded by the request timeout.
	src := peerHost(ss.Context())
	if err := k.e.core.AdmitRequest(src); err != nil {
		return err
	}
	defer k.e.core.ReleaseRequest(src)
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

// sendRangeChunks sends a Range answer in chunks, the last one carrying its header,
// more and count.
func sendRangeChunks(ss grpc.ServerStreamingServer[pb.RangeStreamResponse], resp *pb.RangeResponse) error {
	kvs, limit := resp.Kvs, etcdFirstChunk
	for {
		n := min(limit, len(kvs))
		chunk := &pb.RangeResponse{Kvs: kvs[:n:n]}
		kvs = kvs[n:]
		last := len(kvs) == 0
		if last {
			chunk.Header, chunk.More, chunk.Count = resp.Header, resp.More, resp.Count
		}
		if err := ss.Send(&pb.RangeStreamResponse{RangeResponse: chunk}); err != nil {
			return err
		}
		if last {
			return nil
		}
		limit = nextChunkLimit(limit, chunk.Kvs)
	}
}

// nextChunkLimit is etcd's adjustChunkLimit: double the keys of a chunk under half
// the target size, halve those of one over twice it, never below one key.
func nextChunkLimit(limit int, sent []*mvccpb.KeyValue) int {
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
