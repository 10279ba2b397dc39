package etcdctl

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestMoveLeader: `etcdctl move-leader ID` on a 3-node keel (processes) hands
// leadership to the voter ID and prints etcd's line, as it does on etcd
// (Maintenance.MoveLeader); every node then names ID as leader. An ID that names no
// member is etcd's "bad leader transferee", and leadership stays.
func TestMoveLeader(t *testing.T) {
	nodes := startKeelCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var eps []string
	for _, n := range nodes {
		eps = append(eps, n.etcdAddr)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	from, target := votersBesideLeader(ctx, t, c, nodes)
	out, err := exec.CommandContext(ctx, etcdctlBin, "--endpoints", strings.Join(eps, ","),
		"move-leader", fmt.Sprintf("%x", target)).CombinedOutput()
	if want := fmt.Sprintf("Leadership transferred from %x to %x", from, target); err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("etcdctl move-leader %x: %v\n%s\nwant %q", target, err, out, want)
	}
	for i, n := range nodes {
		if got := leaderSeenBy(ctx, n.etcdAddr, target); got != target {
			t.Errorf("node %d names %x as leader after the move, want %x", i, got, target)
		}
	}

	out, err = exec.CommandContext(ctx, etcdctlBin, "--endpoints", strings.Join(eps, ","), "move-leader", "1234").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "etcdserver: bad leader transferee") {
		t.Errorf("etcdctl move-leader 1234 (no member): %v\n%s\nwant etcd's bad leader transferee", err, out)
	}
	if got := leaderSeenBy(ctx, nodes[0].etcdAddr, target); got != target {
		t.Errorf("leadership moved to %x on a refused move", got)
	}
}

// votersBesideLeader waits (at most 30 s) until the cluster has a leader and a voter
// that is not the leader (a joined node votes once caught up), and returns both IDs.
func votersBesideLeader(ctx context.Context, t *testing.T, c *clientv3.Client, nodes []*keelNode) (lead, other uint64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		i := leaderOf(ctx, nodes, -1)
		ml, err := c.MemberList(ctx)
		if i < 0 || err != nil {
			continue
		}
		lead = leaderSeenBy(ctx, nodes[i].etcdAddr, 0)
		for _, m := range ml.Members {
			if !m.IsLearner && m.ID != lead {
				return lead, m.ID
			}
		}
	}
	t.Fatal("no leader and second voter within 30s")
	return 0, 0
}

// leaderSeenBy is the leader the node at addr names, waiting (at most 10 s) for want
// when want is not 0.
func leaderSeenBy(ctx context.Context, addr string, want uint64) uint64 {
	c, err := newClient(addr)
	if err != nil {
		return 0
	}
	defer c.Close()
	var got uint64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := c.Status(sctx, addr)
		cancel()
		if err == nil {
			got = st.Leader
		}
		if got != 0 && (want == 0 || got == want) {
			break
		}
	}
	return got
}
