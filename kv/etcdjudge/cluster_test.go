package etcdjudge

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/keel-kv/keel/internal/freeport"
)

// startCluster starts three keel processes (plain text, ACLs allow): the first
// bootstraps, the others join it.
func startCluster(t *testing.T) []*node {
	t.Helper()
	dir := t.TempDir()
	raft := []string{freeport.Addr(), freeport.Addr(), freeport.Addr()}
	var nodes []*node
	for i := range 3 {
		args := []string{"-insecure", "-acl-default", "allow", "-node-id", fmt.Sprint("n", i+1)}
		if i == 0 {
			args = append(args, "-bootstrap")
		} else {
			args = append(args, "-join", raft[0])
		}
		n, err := startNodeRaft(filepath.Join(dir, fmt.Sprint("n", i+1)), raft[i], args...)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		t.Cleanup(n.stop)
	}
	return nodes
}

// Three nodes: each lists the three members (its own client URL), a write through
// one is read linearizably and watched through the others, and lockers on different
// nodes exclude each other.
func TestThreeNodes(t *testing.T) {
	nodes := startCluster(t)
	ctx := testCtx(t)
	var clients []*clientv3.Client
	for _, n := range nodes {
		c, err := n.client()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients = append(clients, c)
	}
	want := map[string]string{}
	for i, n := range nodes {
		want[fmt.Sprint("n", i+1)] = "http://" + n.etcdAddr
	}
	for _, c := range clients {
		waitMembers(t, c, want)
	}
	// clientv3's endpoint sync keeps every node.
	if err := clients[0].Sync(ctx); err != nil || len(clients[0].Endpoints()) != 3 {
		t.Fatalf("after Sync the client has endpoints %v (%v), want the three nodes", clients[0].Endpoints(), err)
	}
	put, err := clients[0].Put(ctx, "/three/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	// From the put's revision: a watch "from now" is set up asynchronously, and may
	// start after the put.
	wch := clients[2].Watch(ctx, "/three/", clientv3.WithPrefix(), clientv3.WithRev(put.Header.Revision))
	get, err := clients[1].Get(ctx, "/three/k")
	if err != nil || len(get.Kvs) != 1 || get.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("linearizable get on another node = %v, %v", get, err)
	}
	if ev := next(t, wch).Events[0]; ev.Type != mvccpb.PUT || ev.Kv.ModRevision != put.Header.Revision {
		t.Fatalf("watch on a third node saw %v", ev)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fences []int64
	for _, c := range clients {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(10))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := concurrency.NewMutex(s, "/three/lock")
			if err := m.Lock(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			fences = append(fences, m.Header().Revision)
			mu.Unlock()
			if err := m.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fencing revisions across nodes do not increase in lock order: %v", fences)
		}
	}

	// Without a quorum, a call with require-leader metadata is refused, even a
	// serializable read that the node could answer alone.
	nodes[0].stop()
	nodes[1].stop()
	for i := range 200 {
		_, err := clients[2].Get(clientv3.WithRequireLeader(ctx), "/three/k", clientv3.WithSerializable())
		if errors.Is(err, rpctypes.ErrNoLeader) {
			break
		}
		if i == 199 {
			t.Fatalf("a require-leader get on a node without a quorum: %v, want %v", err, rpctypes.ErrNoLeader)
		}
		sleep()
	}
}

// waitMembers waits until the member list names the members of want, each with its
// client URL (joins and URL records are applied a moment after a node serves).
func waitMembers(t *testing.T, c *clientv3.Client, want map[string]string) {
	t.Helper()
	var last []*etcdserverpb.Member
	for range 200 {
		ml, err := c.MemberList(testCtx(t))
		if err == nil && len(ml.Members) == len(want) {
			ok := true
			for _, m := range ml.Members {
				ok = ok && len(m.ClientURLs) == 1 && m.ClientURLs[0] == want[m.Name]
			}
			if ok {
				return
			}
			last = ml.Members
		}
		sleep()
	}
	t.Fatalf("the member list never named %v; last %v", want, last)
}
