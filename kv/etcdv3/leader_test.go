package etcdv3_test

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/internal/kvtest"
)

// etcd's require-leader rule for long streams (issue #35 item 3): a Watch or
// LeaseKeepAlive stream made with require-leader metadata outlives a loss of leader
// contact shorter than the node's stream grace (raft.StreamGraceTimeouts election
// timeouts, etcd's monitorLeader), keeps serving through it, and ends with etcd's "no
// leader" once the grace is over; a unary call with require-leader fails at once.
// Kills: a watch ended at the first loss of contact; a keepalive stream that ignores
// require-leader (it never ended).
func TestEtcdRequireLeaderStreamsEndAfterGrace(t *testing.T) {
	const grace = 1500 * time.Millisecond
	leading := kvtest.NewLeading()
	st := &kvtest.Leaderless{LocalStore: leading.LocalStore, StreamGrace: grace}
	core, err := kv.NewServer(kv.DefaultConfig(), leadingLeaderless{leading, st}, nil)
	if err != nil {
		t.Fatal(err)
	}
	core.Start()
	t.Cleanup(core.Stop)
	addr := serveDoor(t, core)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rl := metadata.AppendToOutgoingContext(ctx, rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader)

	lease, err := pb.NewLeaseClient(conn).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	// The lessor leads from its first poll on: until then a keepalive is refused.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ka, err := pb.NewLeaseClient(conn).LeaseKeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ka.Send(&pb.LeaseKeepAliveRequest{ID: lease.ID})
		_, err = ka.Recv()
		ka.CloseSend()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keepalive: %v", err)
		}
	}
	ka, err := pb.NewLeaseClient(conn).LeaseKeepAlive(rl)
	if err != nil {
		t.Fatal(err)
	}
	// One answer before the cut: the server has the stream. (Opening it returns before
	// the server starts it, and a require-leader stream started without a leader ends
	// at once, as etcd's does.)
	if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: lease.ID}); err != nil {
		t.Fatal(err)
	}
	if resp, err := ka.Recv(); err != nil || resp.ID != lease.ID {
		t.Fatalf("keepalive before the cut: %v %v", resp, err)
	}
	ws, err := pb.NewWatchClient(conn).Watch(rl)
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte("k")}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := ws.Recv(); err != nil || !resp.Created {
		t.Fatalf("watch: %v %v", resp, err)
	}
	type ended struct {
		err error
		at  time.Time
	}
	watchEnd, kaEnd := make(chan ended, 1), make(chan ended, 1)
	events := make(chan *pb.WatchResponse, 10)
	go func() {
		for {
			resp, err := ws.Recv()
			if err != nil {
				watchEnd <- ended{err, time.Now()}
				return
			}
			events <- resp
		}
	}()
	kaAnswers := make(chan *pb.LeaseKeepAliveResponse, 10)
	go func() {
		for {
			resp, err := ka.Recv()
			if err != nil {
				kaEnd <- ended{err, time.Now()}
				return
			}
			kaAnswers <- resp
		}
	}()

	st.Cut()
	cutAt := time.Now()
	if _, err := pb.NewKVClient(conn).Range(rl, &pb.RangeRequest{Key: []byte("k")}); status.Convert(err).Message() != rpctypes.ErrNoLeader.Error() {
		t.Errorf("require-leader range once cut off: %v, want %v", err, rpctypes.ErrNoLeader)
	}
	// Within the grace both streams still serve.
	if _, err := pb.NewKVClient(conn).Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	// No keepalive is sent after the cut: a renewal needs the leader, and the lessor may
	// notice the cut at its next poll and refuse it, which ends the stream as etcd's
	// LeaseRenew error does — that is not the require-leader rule this test is about.
	select {
	case <-events:
	case e := <-watchEnd:
		t.Fatalf("require-leader watch ended %v after the cut, within the grace %v: %v", e.at.Sub(cutAt), grace, e.err)
	case <-time.After(grace / 2):
		t.Fatalf("no watch event within %v of the cut", grace/2)
	}
	select {
	case e := <-kaEnd:
		t.Fatalf("require-leader keepalive stream ended %v after the cut, within the grace %v: %v", e.at.Sub(cutAt), grace, e.err)
	case <-time.After(time.Until(cutAt.Add(grace / 2))):
	}
	// After it, both end with etcd's no leader.
	for name, ch := range map[string]chan ended{"watch": watchEnd, "keepalive": kaEnd} {
		select {
		case e := <-ch:
			if status.Convert(e.err).Message() != rpctypes.ErrNoLeader.Error() {
				t.Errorf("require-leader %s stream ended with %v, want %v", name, e.err, rpctypes.ErrNoLeader)
			}
			if d := e.at.Sub(cutAt); d < grace {
				t.Errorf("require-leader %s stream ended %v after the cut, want no sooner than the grace %v", name, d, grace)
			}
		case <-time.After(grace + 10*time.Second):
			t.Errorf("require-leader %s stream still open %v after the cut", name, time.Since(cutAt))
		}
	}
}

// leadingLeaderless is a leading store (it serves lease keepalives) whose leader
// contact a test cuts (kvtest.Leaderless).
type leadingLeaderless struct {
	*kvtest.LeadingStore
	l *kvtest.Leaderless
}

func (s leadingLeaderless) LeaderContact() error            { return s.l.LeaderContact() }
func (s leadingLeaderless) ContactContext() context.Context { return s.l.ContactContext() }
func (s leadingLeaderless) StreamContext() context.Context  { return s.l.StreamContext() }
