package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/keel-kv/keel/raft"
)

// etcd's require-leader rule on real nodes (issue #35 item 3). A require-leader watch
// through a follower outlives the leader's loss: the election that follows is shorter
// than the stream grace (raft.StreamGraceTimeouts election timeouts, etcd's
// monitorLeader), so the watch is not canceled and delivers every write made once the
// new leader is elected. A follower cut off for longer than the grace ends its
// require-leader watches with etcd's "no leader"; a unary call with require-leader
// fails at once. Kills: ending the stream on the first loss of leader contact (the
// watch is canceled when the leader is cut off).
func TestEtcdRequireLeaderWatchOutlivesElection(t *testing.T) {
	const size = 3
	c, network, ids := partitionableClusterWith(t, size, func(cfg *Config) { cfg.EtcdAddr = freeAddr(t) })
	lead := c.leader()
	via := (lead + 1) % size
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dial := func(i int) *grpc.ClientConn {
		conn, err := grpc.NewClient(c.agents[i].EtcdAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	conn := dial(via)
	rl := metadata.AppendToOutgoingContext(ctx, rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader)
	events, ended := openWatch(t, rl, conn, "k/")

	// The leader is cut off from both followers, as if killed.
	var rest []string
	for i, id := range ids {
		if i != lead {
			rest = append(rest, id)
		}
	}
	network.Partition([]string{ids[lead]}, rest)
	cutAt := time.Now()
	next := -1
	for deadline := time.Now().Add(15 * time.Second); next < 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for i, a := range c.agents {
			if i != lead && a.Node().Status().State == "Leader" {
				next = i
			}
		}
	}
	if next < 0 {
		t.Fatal("no new leader within 15s of the leader's cut-off")
	}
	t.Logf("new leader %s %v after the cut-off", ids[next], time.Since(cutAt).Round(time.Millisecond))
	kvc := pb.NewKVClient(dial(next))
	const writes = 5
	for n := range writes {
		if _, err := kvc.Put(ctx, &pb.PutRequest{Key: fmt.Appendf(nil, "k/%d", n), Value: []byte("v")}); err != nil {
			t.Fatalf("put %d on the new leader: %v", n, err)
		}
	}
	for n := range writes {
		select {
		case ev := <-events:
			if want := fmt.Sprintf("k/%d", n); string(ev.Kv.Key) != want {
				t.Fatalf("event %d: %q, want %q", n, ev.Kv.Key, want)
			}
		case err := <-ended:
			t.Fatalf("require-leader watch through %s ended %v after the leader's cut-off: %v; want it to outlive the election",
				ids[via], time.Since(cutAt).Round(time.Millisecond), err)
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d not delivered within 10s", n)
		}
	}
	network.Heal()

	// Now the follower itself is cut off for longer than the grace: its require-leader
	// watch ends with etcd's "no leader", not before the grace; a unary call with
	// require-leader fails at once.
	lead = c.leader()
	via = (lead + 1) % size
	// After the heal the node may not have heard from the new leader yet (the old
	// leader among them): a require-leader stream opened then is refused at once, as
	// etcd's is. Open it once the node follows.
	waitFor(t, fmt.Sprintf("%s in contact with the leader", ids[via]), 15*time.Second, c.agents[via].Node().LeaderContact)
	conn = dial(via)
	_, ended = openWatch(t, rl, conn, "j/")
	rest = nil
	for i, id := range ids {
		if i != via {
			rest = append(rest, id)
		}
	}
	network.Partition([]string{ids[via]}, rest)
	defer network.Heal()
	cutAt = time.Now()
	hb := c.cfgs[via].Raft.HeartbeatTimeout
	time.Sleep(hb + hb/2)
	start := time.Now()
	if _, err := pb.NewKVClient(conn).Range(rl, &pb.RangeRequest{Key: []byte("k")}); grpcstatus.Convert(err).Message() != rpctypes.ErrNoLeader.Error() {
		t.Errorf("require-leader range on the cut-off follower: %v, want %v", err, rpctypes.ErrNoLeader)
	} else if d := time.Since(start); d > time.Second {
		t.Errorf("require-leader range on the cut-off follower failed after %v, want at once", d)
	}
	grace := raft.StreamGraceTimeouts * hb
	select {
	case err := <-ended:
		d := time.Since(cutAt)
		if grpcstatus.Convert(err).Message() != rpctypes.ErrNoLeader.Error() {
			t.Errorf("the cut-off follower's require-leader watch ended with %v, want %v", err, rpctypes.ErrNoLeader)
		}
		if d < grace {
			t.Errorf("the cut-off follower's require-leader watch ended %v after the cut-off, want no sooner than the grace %v", d, grace)
		}
		t.Logf("the cut-off follower's require-leader watch ended %v after the cut-off: %v", d.Round(time.Millisecond), err)
	case <-time.After(grace + 10*time.Second):
		t.Fatalf("the cut-off follower's require-leader watch still open %v after the cut-off", time.Since(cutAt))
	}
}

// openWatch opens a Watch stream on conn with one watch of the keys under prefix and
// returns its put and delete events, and its end (the stream's error, or a cancel).
func openWatch(t *testing.T, ctx context.Context, conn *grpc.ClientConn, prefix string) (<-chan *mvccpb.Event, <-chan error) {
	t.Helper()
	ws, err := pb.NewWatchClient(conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	end := []byte(prefix)
	end[len(end)-1]++
	if err := ws.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{
		CreateRequest: &pb.WatchCreateRequest{Key: []byte(prefix), RangeEnd: end}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := ws.Recv()
	if err != nil || !resp.Created || resp.Canceled {
		t.Fatalf("watch %q: %v %v", prefix, resp, err)
	}
	events, ended := make(chan *mvccpb.Event, 100), make(chan error, 1)
	go func() {
		for {
			resp, err := ws.Recv()
			if err != nil {
				ended <- err
				return
			}
			if resp.Canceled {
				ended <- fmt.Errorf("watch canceled: %s", resp.CancelReason)
				return
			}
			for _, ev := range resp.Events {
				events <- ev
			}
		}
	}()
	return events, ended
}
