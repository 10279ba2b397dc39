package etcdv3

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// Issue #33: one hostile client cannot exhaust a node through the etcd door. Each
// test runs the attack in small over loopback against a door served as the agent
// serves it (behind the node's listener bounds) and measures the goroutines, and the
// heap and stacks, it leaves behind. bench/flood runs them at the size of the report.

// floodDoor is an etcd door over an in-memory store, served behind the node's
// connection bounds (kv.Server.LimitListener) as the agent serves it.
type floodDoor struct{ addr string }

func newFloodDoor(t *testing.T, cfg kv.Config) *floodDoor {
	t.Helper()
	core, err := kv.NewServer(cfg, kvtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := New(core)
	port, err := freeport.TCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Serve(core.LimitListener(ln)) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.Stop(ctx)
		<-done
	})
	return &floodDoor{addr: ln.Addr().String()}
}

// dial connects to the door with a fixed flow-control window (no BDP growth), so that
// answers the client does not read stop the server's sends after 64 KiB.
func (d *floodDoor) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(d.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<16), grpc.WithInitialConnWindowSize(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// settled is runtime.NumGoroutine once it has stopped moving (three reads 100 ms
// apart within 2 of each other), or the last of 50 reads.
func settled() int {
	last, same := runtime.NumGoroutine(), 0
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n-last <= 2 && last-n <= 2 {
			if same++; same == 3 {
				return n
			}
		} else {
			same = 0
		}
		last = n
	}
	return last
}

var progressRequest = &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}

// createWatch opens a watch of key on stream and returns its ID, reading past any
// other answer (progress answers).
func createWatch(t *testing.T, stream pb.Watch_WatchClient, key string) int64 {
	t.Helper()
	cr := &pb.WatchCreateRequest{Key: []byte(key)}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}); err != nil {
		t.Fatal(err)
	}
	for range 1 << 20 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("create %s: %v", key, err)
		}
		if resp.Created {
			if resp.Canceled {
				t.Fatalf("create %s: refused: %s", key, resp.CancelReason)
			}
			return resp.WatchId
		}
	}
	t.Fatalf("create %s: no created answer", key)
	return 0
}

// A RequestProgress flood on one Watch stream whose answers the client never reads
// costs the server nothing that grows with it: progress requests are coalesced, at
// most one outstanding per stream, as etcd's are (kill: a goroutine per request, each
// blocked on its send, the door before issue #33: 20,000 requests held ~18,000
// goroutines). The stream still serves afterwards.
func TestWatchProgressFloodIsCoalesced(t *testing.T) {
	const flood = 20000
	d := newFloodDoor(t, kv.DefaultConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := pb.NewWatchClient(d.dial(t)).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := createWatch(t, stream, "app/a") // the stream's goroutines run
	before, heap := settled(), inUse()
	for i := range flood {
		if err := stream.Send(progressRequest); err != nil {
			t.Fatalf("progress request %d: %v", i, err)
		}
	}
	grew, heapGrew := settled()-before, inUse()-heap
	t.Logf("%d progress requests never read: %+d goroutines, %+d KiB heap and stacks", flood, grew, heapGrew>>10)
	if grew > 1000 || heapGrew > 32<<20 {
		t.Fatalf("%d progress requests never read: %d more goroutines, %d MiB more heap and stacks; want at most 1000 and 32 MiB",
			flood, grew, heapGrew>>20)
	}
	if second := createWatch(t, stream, "app/b"); second == first {
		t.Fatalf("second watch has the first's ID %d", first)
	}
}
