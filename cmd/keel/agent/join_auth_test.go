package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/keel-kv/keel/internal/freeport"
)

// TestStrangersAreKeptOut: a three-node gossip cluster with a gossip key. A stranger
// agent without the key pointed at its gossip ports never becomes a gossip member nor
// a Raft server; a fake server added by two raw frames to the leader's Raft port (as
// an outsider could today) is removed by the leader's reconciler once the grace period
// has passed, because no gossip member vouches for it. The cluster keeps writing.
func TestStrangersAreKeptOut(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		i := c.add(3)
		c.cfgs[i].Gossip.EncryptKey = key
		c.cfgs[i].Autopilot.UnvouchedServerThreshold = time.Second
	}
	for i := range 3 {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.agents {
			c.stop(i)
		}
	})
	c.waitConfig("bootstrap-expect 3", 20*time.Second, func(v, nv []string) bool { return len(v) == 3 && len(nv) == 0 })

	// The stranger: same flags, no key.
	s := c.add(0)
	c.cfgs[s].Gossip.EncryptKey = nil
	c.start(s)

	// Raw frames to the leader's Raft port: protoRPC (2), then frame kind rpcAddVoter (3)
	// with "id\x00address" — wire values shared by every release.
	lead, _, _ := c.config()
	var leader *Agent
	for _, a := range c.agents[:3] {
		if a.NodeID() == lead {
			leader = a
		}
	}
	fakeAddr := "127.0.0.1:" + strconv.Itoa(mustPort(t))
	conn, err := net.DialTimeout("tcp", leader.RaftAddr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	body := append([]byte{3}, "fake\x00"+fakeAddr...)
	frame := binary.BigEndian.AppendUint32([]byte{2}, uint32(len(body)))
	if _, err := conn.Write(append(frame, body...)); err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	if _, err := bufio.NewReader(conn).Read(hdr[:]); err != nil {
		t.Fatalf("no answer to the add-voter frame: %v", err)
	}
	c.waitConfig("fake voter added by raw frames", 10*time.Second, func(v, _ []string) bool { return slices.Contains(v, "fake") })
	c.waitConfig("fake voter removed by the reconciler", 20*time.Second, func(v, nv []string) bool {
		return !slices.Contains(v, "fake") && !slices.Contains(nv, "fake")
	})
	if n := leader.gossip.unvouchedRemoved.Load(); n < 1 {
		t.Fatalf("unvouched servers removed = %d, want >= 1", n)
	}

	// By now the stranger has had seconds of gossip rounds: it is nobody's member and
	// no Raft server, and it knows only itself.
	time.Sleep(2 * time.Second)
	_, v, nv := c.config()
	if id := c.cfgs[s].NodeID; slices.Contains(v, id) || slices.Contains(nv, id) {
		t.Fatalf("the stranger %s is a raft server: voters %v non-voters %v", id, v, nv)
	}
	for _, a := range c.agents[:3] {
		for _, m := range a.Members() {
			if m.ID() == c.cfgs[s].NodeID {
				t.Fatalf("%s lists the stranger as a gossip member (%s)", a.NodeID(), m.Status)
			}
		}
	}
	if n := len(c.agents[s].Members()); n != 1 {
		t.Fatalf("the stranger sees %d gossip members, want itself only", n)
	}
	cli := (&testCluster{t: t, agents: []*Agent{leader}}).client(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "still", []byte("writing")); err != nil {
		t.Fatalf("put after the strangers: %v", err)
	}
}

func mustPort(t *testing.T) int {
	t.Helper()
	p, err := freeport.TCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
