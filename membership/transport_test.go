package membership

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestGossipPortBoundsIdleFlood: 200 idle TCP connections to the gossip port from one
// address (127.0.0.2) are cut to maxGossipStreamsPerSource at once, and a node from
// another address still joins (push/pull over TCP). Kills: memberlist's own transport
// (no admission: every flood connection waits out TCPTimeout).
func TestGossipPortBoundsIdleFlood(t *testing.T) {
	cfg1 := testConfig("g1")
	cfg1.TCPTimeout = 30 * time.Second // memberlist alone would hold each flood stream this long
	g1 := startNode(t, cfg1, testMeta("g1"))
	const flood = 200
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}, Timeout: 2 * time.Second}
	var closed atomic.Int64
	for i := range flood {
		conn, err := d.Dial("tcp", g1.addr())
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		t.Cleanup(func() { conn.Close() })
		go func() {
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var b [1]byte
			var ne net.Error
			if _, err := conn.Read(b[:]); err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
				closed.Add(1)
			}
		}()
	}
	waitFor(t, "the flood cut to the per-source bound", func() string {
		if n := closed.Load(); n < flood-maxGossipStreamsPerSource {
			return fmt.Sprintf("%d closed", n)
		}
		return ""
	})
	cfg := testConfig("g2")
	cfg.Join = []string{g1.addr()}
	g2 := startNode(t, cfg, testMeta("g2"))
	waitFor(t, "g1 and g2 see each other", func() string {
		if _, ok := g1.member("g2"); !ok {
			return "g1 does not see g2"
		}
		if _, ok := g2.member("g1"); !ok {
			return "g2 does not see g1"
		}
		return ""
	})
	if n := g1.gossipStreams.Open(); n > maxGossipStreamsPerSource+2 {
		t.Errorf("%d gossip streams open on g1, want at most %d", n, maxGossipStreamsPerSource+2)
	}
}
