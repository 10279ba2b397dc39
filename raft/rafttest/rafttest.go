// Package rafttest starts real keel Raft nodes for the tests of the packages built on
// them. Test support only: no production code imports it.
package rafttest

import (
	"context"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// Single starts a real one-node Raft cluster (node ID id) on loopback with its data in
// a temp dir, waits until it leads, and closes it when the test ends.
func Single(t testing.TB, id string) *raft.Node {
	t.Helper()
	cfg := raft.DefaultConfig()
	cfg.NodeID = id
	cfg.DataDir = t.TempDir()
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Bootstrap = true
	cfg.HeartbeatTimeout = 300 * time.Millisecond
	cfg.ElectionTimeout = 300 * time.Millisecond
	cfg.LeaderLeaseTimeout = 150 * time.Millisecond
	n, err := raft.Open(context.Background(), cfg, fsm.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	deadline := time.Now().Add(10 * time.Second)
	for !n.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("rafttest: no leader after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}
