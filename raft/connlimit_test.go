package raft

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// TestRaftPortBoundsIdleFlood: 300 idle connections from one address (127.0.0.2) are
// cut to maxPendingPerSource at once, and a node from another address still joins and
// replicates meanwhile. Kills: the accept loop without admit (every flood connection
// stays open until its 10 s handshake deadline).
func TestRaftPortBoundsIdleFlood(t *testing.T) {
	c := newCluster(t, 1, nil)
	target := c.nodes[0].Addr()
	const flood = 300
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
	var closed atomic.Int64
	for i := range flood {
		conn, err := d.Dial("tcp", target)
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close() })
		go func() {
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var b [1]byte
			if _, err := conn.Read(b[:]); err != nil {
				if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
					closed.Add(1)
				}
			}
		}()
	}
	waitFor(t, 5*time.Second, "the flood cut to the per-source bound", func() bool {
		return closed.Load() >= flood-maxPendingPerSource
	})

	cfg := testConfig(t, "n2")
	cfg.Join = []string{target}
	n2, err := Open(context.Background(), cfg, fsm.NewStore())
	if err != nil {
		t.Fatalf("a member joining during the flood: %v", err)
	}
	c.nodes = append(c.nodes, n2)
	c.waitMembers(2)
	rev := mustPut(t, c.nodes[c.leader()], "k", "v")
	waitFor(t, 5*time.Second, "the new member applies the write", func() bool { return n2.store.Revision() >= rev })
	if n := closed.Load(); n > flood-maxPendingPerSource {
		t.Errorf("%d flood connections closed, want %d (the rest wait out their handshake deadline)", n, flood-maxPendingPerSource)
	}
}
