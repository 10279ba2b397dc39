package etcdv3

import (
	"context"
	"net"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// BenchmarkDoorRangeSerializable* read one key through the etcd door over a real gRPC
// connection on loopback (etcd's generated client, no clientv3), one request at a time
// or 64 at once (32 goroutines per GOMAXPROCS on the 2 cores this runs on): the
// door's and gRPC's cost per read, client included, in process.
func BenchmarkDoorRangeSerializable1(b *testing.B)  { benchmarkDoorRange(b, 0) }
func BenchmarkDoorRangeSerializable64(b *testing.B) { benchmarkDoorRange(b, 32) }

func benchmarkDoorRange(b *testing.B, par int) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		b.Fatal(err)
	}
	put := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte("w0000001"), Value: make([]byte, 256)}}}
	if _, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: put}); err != nil {
		b.Fatal(err)
	}
	e := New(core)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go e.Serve(ln)
	b.Cleanup(func() { e.Stop(context.Background()) })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	cl := pb.NewKVClient(conn)
	req := &pb.RangeRequest{Key: []byte("w0000001"), Serializable: true}
	if _, err := cl.Range(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	if par == 0 {
		for b.Loop() {
			if _, err := cl.Range(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(par)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := cl.Range(context.Background(), req)
			if err != nil || len(resp.Kvs) != 1 {
				b.Errorf("range: %v %v", resp, err)
				return
			}
		}
	})
}
