package etcdv3

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/kv"
)

// streamKinds are the long-lived calls of the etcd door, each opened on conn until
// ctx ends; open returns once the server served the stream's first answer, or with
// the error it refused it with.
var streamKinds = []struct {
	name string
	open func(ctx context.Context, conn *grpc.ClientConn) error
}{
	{"Watch", func(ctx context.Context, conn *grpc.ClientConn) error {
		s, err := pb.NewWatchClient(conn).Watch(ctx)
		if err != nil {
			return err
		}
		cr := &pb.WatchCreateRequest{Key: []byte("k")}
		s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}) // a refusal shows in Recv
		resp, err := s.Recv()
		if err == nil && !resp.Created {
			err = errors.New("first answer is not the created one")
		}
		return err
	}},
	{"LeaseKeepAlive", func(ctx context.Context, conn *grpc.ClientConn) error {
		s, err := pb.NewLeaseClient(conn).LeaseKeepAlive(ctx)
		if err != nil {
			return err
		}
		s.Send(&pb.LeaseKeepAliveRequest{ID: -1}) // no lease has it: TTL 0
		_, err = s.Recv()
		return err
	}},
	{"health Watch", func(ctx context.Context, conn *grpc.ClientConn) error {
		s, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		_, err = s.Recv()
		return err
	}},
}

// rangeStreamOnce reads a RangeStream to its end.
func rangeStreamOnce(ctx context.Context, conn *grpc.ClientConn) error {
	s, err := pb.NewKVClient(conn).RangeStream(ctx, &pb.RangeRequest{Key: []byte("k")})
	if err != nil {
		return err
	}
	for range 1000 {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
	return errors.New("RangeStream of one key: more than 1000 chunks")
}

// Every stream of the etcd door (Watch, LeaseKeepAlive, gRPC health Watch — no token
// needed, as etcd's — and RangeStream) counts against the client's one budget, the one
// its connections count against on every door (Config.MaxConnsPerClient, by source
// address): with a budget of 40, one connection holds 39 streams of any kind, and one
// more is refused with ResourceExhausted (kill: streams not counted, the door before
// issue #33: all 120 served, 4 goroutines each). A RangeStream is refused while the
// budget is spent, and served once a stream ends.
func TestEtcdStreamsCountAgainstTheClientBudget(t *testing.T) {
	const budget = 40
	cfg := kv.DefaultConfig()
	cfg.MaxConnsPerClient = budget
	d := newFloodDoor(t, cfg)
	conn := d.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rangeStreamOnce(ctx, conn); err != nil { // connected, counted
		t.Fatal(err)
	}
	before := settled()
	admitted, refused := 0, map[string]int{}
	var first context.CancelFunc
	for i := range 3 * budget {
		k := streamKinds[i%len(streamKinds)]
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		switch err := k.open(sctx, conn); {
		case err == nil:
			if admitted++; first == nil {
				first = scancel
			}
		case status.Code(err) == codes.ResourceExhausted:
			refused[k.name]++
		default:
			t.Fatalf("%s stream #%d: %v, want served or ResourceExhausted", k.name, i, err)
		}
	}
	grew := settled() - before
	t.Logf("%d streams admitted, refused %v: %+d goroutines", admitted, refused, grew)
	if admitted != budget-1 || len(refused) != len(streamKinds) {
		t.Fatalf("one connection of a client with a budget of %d: %d streams served, refused %v; want %d served (the connection holds one slot) and each kind refused",
			budget, admitted, refused, budget-1)
	}
	if grew > 5*budget {
		t.Fatalf("%d streams: %d more goroutines, want at most %d", admitted, grew, 5*budget)
	}
	if err := rangeStreamOnce(ctx, conn); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("RangeStream while the budget is spent: %v, want ResourceExhausted", err)
	}
	first()
	var err error
	for range 50 { // the ended stream's slot comes back once its handler returns
		if err = rangeStreamOnce(ctx, conn); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("RangeStream once a stream ended: %v, want served", err)
	}
}

// One connection carries at most Config.MaxStreamInFlight streams at once (HTTP/2's
// SETTINGS_MAX_CONCURRENT_STREAMS), as one stream-protocol connection carries at most
// that many requests: a client without a per-client bound (MaxConnsPerClient 0) that
// holds 8 waits for one to end before its ninth is served (kill: no
// MaxConcurrentStreams, the door before issue #33: the ninth is served at once).
func TestEtcdStreamsPerConnectionBounded(t *testing.T) {
	const perConn = 8
	cfg := kv.DefaultConfig()
	cfg.MaxConnsPerClient, cfg.MaxStreamInFlight = 0, perConn
	d := newFloodDoor(t, cfg)
	conn := d.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	health := streamKinds[2]
	for i := range perConn {
		if err := health.open(ctx, conn); err != nil {
			t.Fatalf("health Watch %d of %d: %v", i, perConn, err)
		}
	}
	wait, waitCancel := context.WithTimeout(ctx, 2*time.Second)
	defer waitCancel()
	if err := health.open(wait, conn); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("health Watch %d on one connection: %v, want it held back until its deadline", perConn+1, err)
	}
}
