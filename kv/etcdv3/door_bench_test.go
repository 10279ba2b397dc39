package etcdv3

import (
	"context"
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// The door's per-call cost (issue #39): one Put, one linearizable Range or one
// serializable Range of a 256-byte value through the etcd door over a real gRPC
// connection on loopback (etcd's generated client, as clientv3 calls it), one call at
// a time or 64 at once (32 goroutines per GOMAXPROCS on the 2 cores this runs on).
// The store is kvtest's in-process one, so what is measured is the door's and gRPC's
// cost per call, client included, plus the core's and the state machine's — no Raft.
func BenchmarkDoorPut1(b *testing.B)                { benchmarkDoor(b, doorPut, 0) }
func BenchmarkDoorPut64(b *testing.B)               { benchmarkDoor(b, doorPut, 32) }
func BenchmarkDoorRangeLinearizable1(b *testing.B)  { benchmarkDoor(b, doorRangeLinearizable, 0) }
func BenchmarkDoorRangeLinearizable64(b *testing.B) { benchmarkDoor(b, doorRangeLinearizable, 32) }
func BenchmarkDoorRangeSerializable1(b *testing.B)  { benchmarkDoor(b, doorRangeSerializable, 0) }
func BenchmarkDoorRangeSerializable64(b *testing.B) { benchmarkDoor(b, doorRangeSerializable, 32) }

var benchKey = []byte("w0000001")

// doorCall is one call of a door benchmark.
type doorCall func(ctx context.Context, cl pb.KVClient) error

func doorPut(ctx context.Context, cl pb.KVClient) error {
	_, err := cl.Put(ctx, &pb.PutRequest{Key: benchKey, Value: make([]byte, 256)})
	return err
}

func doorRangeLinearizable(ctx context.Context, cl pb.KVClient) error {
	return doorRange(ctx, cl, false)
}

func doorRangeSerializable(ctx context.Context, cl pb.KVClient) error {
	return doorRange(ctx, cl, true)
}

func doorRange(ctx context.Context, cl pb.KVClient, serializable bool) error {
	resp, err := cl.Range(ctx, &pb.RangeRequest{Key: benchKey, Serializable: serializable})
	if err == nil && len(resp.Kvs) != 1 {
		return fmt.Errorf("range: %d keys, want 1", len(resp.Kvs))
	}
	return err
}

func benchmarkDoor(b *testing.B, call doorCall, par int) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		b.Fatal(err)
	}
	put := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: benchKey, Value: make([]byte, 256)}}}
	if _, err := store.Apply(context.Background(), &fsm.Command{Type: fsm.CmdTxn, Txn: put}); err != nil {
		b.Fatal(err)
	}
	cl := pb.NewKVClient(serveDoor(b, New(core)))
	ctx := context.Background()
	if err := call(ctx, cl); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	if par == 0 {
		for b.Loop() {
			if err := call(ctx, cl); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(par)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := call(ctx, cl); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
