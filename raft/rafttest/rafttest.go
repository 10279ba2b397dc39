// Package rafttest starts real keel Raft nodes for the tests of the packages built on
// them. Test support only: no production code imports it.
package rafttest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// Single starts a real one-node Raft cluster (node ID id) on loopback with its data in
// a temp dir, waits until it leads, and closes it when the test ends.
func Single(t testing.TB, id string) *raft.Node {
	t.Helper()
	n := open(t, id, nil)
	waitUntil(t, "a leader", n.IsLeader)
	return n
}

// Cluster starts a real cluster of size nodes (IDs n1, n2, ...) on loopback: n1
// bootstraps, the others join it. It waits until every node sees every member and
// closes them when the test ends. Which node leads is not fixed.
func Cluster(t testing.TB, size int) []*raft.Node {
	t.Helper()
	nodes := []*raft.Node{open(t, "n1", nil)}
	waitUntil(t, "a leader", nodes[0].IsLeader)
	for i := 2; i <= size; i++ {
		nodes = append(nodes, open(t, fmt.Sprintf("n%d", i), []string{nodes[0].Addr()}))
	}
	waitUntil(t, "every member in every node's configuration", func() bool {
		for _, n := range nodes {
			if len(n.Status().Members) != size {
				return false
			}
		}
		return true
	})
	return nodes
}

// open starts one node that bootstraps (join nil) or joins.
func open(t testing.TB, id string, join []string) *raft.Node {
	t.Helper()
	cfg := raft.DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Bootstrap = join == nil
	cfg.Join = join
	cfg.HeartbeatTimeout = 300 * time.Millisecond
	cfg.ElectionTimeout = 300 * time.Millisecond
	cfg.LeaderLeaseTimeout = 150 * time.Millisecond
	n, err := raft.Open(context.Background(), cfg, fsm.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// waitUntil polls cond for at most 10 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("rafttest: no %s after 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
