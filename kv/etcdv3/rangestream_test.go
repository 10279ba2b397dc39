package etcdv3

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// chunkStream is a RangeStream's server side that keeps the chunks and calls onSend
// after each one (n counts from 1).
type chunkStream struct {
	grpc.ServerStream
	chunks []*pb.RangeResponse
	onSend func(n int)
}

func (s *chunkStream) Context() context.Context { return context.Background() }

func (s *chunkStream) Send(r *pb.RangeStreamResponse) error {
	s.chunks = append(s.chunks, r.RangeResponse)
	if s.onSend != nil {
		s.onSend(len(s.chunks))
	}
	return nil
}

// A streamed range is read a chunk at a time, every chunk at the revision of the
// first: keys written or deleted between two chunks change nothing, and the merged
// chunks are the Range answer of that revision, count included (with a limit too).
// Kills: each chunk read at the latest revision; the count taken from the last chunk.
func TestRangeStreamPinsTheFirstRevision(t *testing.T) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := etcdKV{e: &Server{core: core}}
	apply := func(ops ...fsm.Op) {
		t.Helper()
		if res, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: ops}}); err != nil || res.Err != nil {
			t.Fatalf("apply: %v %v", err, res)
		}
	}
	var ops []fsm.Op
	for i := range 60 {
		ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: fmt.Appendf(nil, "p/%02d", i), Value: []byte("v")})
	}
	apply(ops...)
	for _, limit := range []int64{0, 45} {
		req := &pb.RangeRequest{Key: []byte("p/"), RangeEnd: []byte("p0"), Limit: limit}
		want, err := k.Range(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		ss := &chunkStream{}
		ss.onSend = func(n int) {
			if n == 1 { // between the first chunk and the second
				apply(fsm.Op{Type: fsm.OpPut, Key: []byte("p/99"), Value: []byte("new")},
					fsm.Op{Type: fsm.OpDelete, Key: []byte("p/50")}, fsm.Op{Type: fsm.OpPut, Key: []byte("p/20"), Value: []byte("x")})
			}
		}
		if err := k.RangeStream(req, ss); err != nil {
			t.Fatal(err)
		}
		if len(ss.chunks) < 3 {
			t.Fatalf("limit %d: %d chunks; want 10 keys, then 20, then the rest", limit, len(ss.chunks))
		}
		merged := &pb.RangeResponse{}
		for _, c := range ss.chunks {
			proto.Merge(merged, c)
		}
		if !proto.Equal(merged, want) {
			t.Errorf("limit %d: merged chunks = %d keys, count %d, more %v, header %v; the Range before the writes = %d keys, count %d, more %v, header %v",
				limit, len(merged.Kvs), merged.Count, merged.More, merged.Header, len(want.Kvs), want.Count, want.More, want.Header)
		}
		apply(fsm.Op{Type: fsm.OpDelete, Key: []byte("p/99")}, fsm.Op{Type: fsm.OpPut, Key: []byte("p/50"), Value: []byte("v")},
			fsm.Op{Type: fsm.OpPut, Key: []byte("p/20"), Value: []byte("v")})
	}
}

// The allocations of a streamed range against a Range of the same keys (10,000 keys
// of 1 KiB): the stream reads a chunk at a time.
func BenchmarkRangeStream10k(b *testing.B) { benchmarkRange(b, true) }
func BenchmarkRange10k(b *testing.B)       { benchmarkRange(b, false) }

func benchmarkRange(b *testing.B, stream bool) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		b.Fatal(err)
	}
	k := etcdKV{e: &Server{core: core}}
	value := make([]byte, 1024)
	for i := 0; i < 10_000; i += 100 {
		var ops []fsm.Op
		for j := i; j < i+100; j++ {
			ops = append(ops, fsm.Op{Type: fsm.OpPut, Key: fmt.Appendf(nil, "p/%05d", j), Value: value})
		}
		if res, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: ops}}); err != nil || res.Err != nil {
			b.Fatalf("load: %v %v", err, res)
		}
	}
	req := &pb.RangeRequest{Key: []byte("p/"), RangeEnd: []byte("p0")}
	b.ReportAllocs()
	for b.Loop() {
		if stream {
			err = k.RangeStream(req, &chunkStream{})
		} else {
			_, err = k.Range(context.Background(), req)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
