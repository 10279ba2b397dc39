package etcdv3

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// A watcher that falls behind by more than the core's watch buffer is caught up from
// history, as etcd does, not canceled: etcd's client takes a cancel without a
// compaction for a closed watch and tells its caller nothing, so the events would be
// lost to it silently (kill: the door ends the watch on fsm.ErrSlowWatcher). The
// backlog comes in answers of at most 1,000 revisions, as etcd sends it (kill: one
// answer of everything queued).
func TestWatchSlowReaderCatchesUp(t *testing.T) {
	store := kvtest.New()
	core, err := kv.NewServer(kv.DefaultConfig(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	// clientv3's receive bound (math.MaxInt32): a catch-up answer may pass gRPC's 4 MiB.
	conn := serveDoor(t, New(core), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := &pb.WatchCreateRequest{Key: []byte("f/"), RangeEnd: []byte("f0")}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := stream.Recv(); err != nil || !resp.Created {
		t.Fatalf("create: %v %v", resp, err)
	}
	// The client reads nothing while 3 buffers' worth of 4 KiB puts are written: gRPC's
	// flow control stops the door's sends, and the core's queue passes its bound.
	const n = 3 * fsm.DefaultWatchBuffer
	val := make([]byte, 4096)
	for i := range n {
		put := &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: fmt.Appendf(nil, "f/%05d", i), Value: val}}}
		if _, err := store.Apply(ctx, &fsm.Command{Type: fsm.CmdTxn, Txn: put}); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < n; {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", got, n, err)
		}
		if resp.Canceled {
			t.Fatalf("the watch was canceled after %d of %d events: %q", got, n, resp.CancelReason)
		}
		if len(resp.Events) > etcdMaxRevsPerAnswer { // one put per revision here
			t.Fatalf("an answer of %d revisions, more than etcd's %d", len(resp.Events), etcdMaxRevsPerAnswer)
		}
		for _, ev := range resp.Events {
			if want := fmt.Sprintf("f/%05d", got); string(ev.Kv.Key) != want {
				t.Fatalf("event %d is %q, want %q", got, ev.Kv.Key, want)
			}
			got++
		}
	}
}
