package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/membership"
)

// gossipCluster starts agents that find each other by gossip: the same command line
// (-bootstrap-expect, -join of every gossip address) for each.
type gossipCluster struct {
	t      *testing.T
	dir    string
	cfgs   []Config
	agents []*Agent
}

func newGossipConfig(t *testing.T, dir, id string, expect int) Config {
	cfg := testConfig(t, dir, id)
	g := membership.DefaultLoopbackConfig()
	g.BindAddr = freeAddr(t)
	g.RetryJoin = true
	g.ClusterLabel = "gossip-test"
	cfg.Gossip = &g
	cfg.BootstrapExpect = expect
	cfg.Raft.HeartbeatTimeout = 300 * time.Millisecond
	cfg.Raft.ElectionTimeout = 300 * time.Millisecond
	cfg.Raft.LeaderLeaseTimeout = 300 * time.Millisecond // = the heartbeat timeout, as by default
	cfg.Autopilot = AutopilotConfig{ServerStabilizationTime: time.Second, DeadServerThreshold: 2 * time.Second,
		MinQuorum: 3, MaxTrailingLogs: 64, Interval: 200 * time.Millisecond}
	return cfg
}

func (c *gossipCluster) add(expect int) int {
	c.t.Helper()
	i := len(c.cfgs)
	cfg := newGossipConfig(c.t, c.dir, fmt.Sprintf("g%d", i+1), expect)
	for _, o := range c.cfgs {
		cfg.Gossip.Join = append(cfg.Gossip.Join, o.Gossip.BindAddr)
	}
	c.cfgs = append(c.cfgs, cfg)
	c.agents = append(c.agents, nil)
	return i
}

func (c *gossipCluster) start(i int) {
	c.t.Helper()
	// Everyone lists everyone: the same flags on every host.
	var all []string
	for j, o := range c.cfgs {
		if j != i {
			all = append(all, o.Gossip.BindAddr)
		}
	}
	c.cfgs[i].Gossip.Join = all
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := Start(ctx, c.cfgs[i])
	if err != nil {
		c.t.Fatalf("start %s: %v", c.cfgs[i].NodeID, err)
	}
	c.agents[i] = a
}

func (c *gossipCluster) stop(i int) {
	if c.agents[i] == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c.agents[i].Close(ctx)
	c.agents[i] = nil
}

// voters returns the leader's view of voters and non-voters, once a leader exists.
func (c *gossipCluster) config() (leader string, voters, nonvoters []string) {
	for _, a := range c.agents {
		if a == nil || !a.Node().IsLeader() {
			continue
		}
		st := a.Node().Status()
		for _, m := range st.Members {
			if m.Suffrage == hraft.Voter {
				voters = append(voters, m.ID)
			} else {
				nonvoters = append(nonvoters, m.ID)
			}
		}
		return st.NodeID, voters, nonvoters
	}
	return "", nil, nil
}

func (c *gossipCluster) waitConfig(what string, d time.Duration, ok func(voters, nonvoters []string) bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		lead, v, nv := c.config()
		if lead != "" && ok(v, nv) {
			c.t.Logf("%s: leader %s voters %v non-voters %v", what, lead, v, nv)
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: timed out; leader %q voters %v non-voters %v", what, lead, v, nv)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitHealthy waits until the leader sees exactly n voters, each alive in gossip and
// caught up, continuously for hold: what an operator checks with `keel members`
// before taking the next server down. (A server that is still restarting is not
// healthy yet; taking two more down then would be taking three of five.)
func (c *gossipCluster) waitHealthy(what string, n int, hold, d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	var since time.Time
	var last []MemberInfo
	for {
		var leader *Agent
		for _, a := range c.agents {
			if a != nil && a.Node().IsLeader() {
				leader = a
			}
		}
		healthy := false
		if leader != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			last = leader.MembersInfo(ctx)
			cancel()
			voters := 0
			healthy = true
			for _, m := range last {
				if m.Suffrage != "Voter" {
					continue
				}
				voters++
				healthy = healthy && m.Gossip == "alive" && m.AppliedIdx > 0 && m.TrailingBy <= 64
			}
			healthy = healthy && voters == n
		}
		switch {
		case !healthy:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= hold:
			c.t.Logf("%s: healthy, %d voters", what, n)
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not healthy with %d voters after %v: %+v", what, n, d, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestGossipBootstrapExpectScaleAndReap(t *testing.T) {
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		c.add(3)
	}
	// Same command line on each, started in random order.
	for _, i := range rand.Perm(3) {
		c.start(i)
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
	}
	t.Cleanup(func() {
		for i := range c.agents {
			c.stop(i)
		}
	})
	c.waitConfig("bootstrap-expect 3", 20*time.Second, func(v, nv []string) bool { return len(v) == 3 && len(nv) == 0 })
	cl := func() int {
		for i, a := range c.agents {
			if a != nil {
				return i
			}
		}
		return -1
	}
	put := func(key string) {
		t.Helper()
		a := c.agents[cl()]
		cli := (&testCluster{t: t, agents: []*Agent{a}}).client(0)
		if _, err := cli.Put(context.Background(), key, []byte("v")); err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
	}
	put("formed")

	// Scale out 3 → 5: new nodes (no bootstrap-expect) join by gossip, enter as
	// non-voters and are promoted once caught up and stable.
	for range 2 {
		i := c.add(0)
		c.start(i)
	}
	c.waitConfig("scale to 5", 30*time.Second, func(v, nv []string) bool { return len(v) == 5 })
	put("scaled")

	// Restart of every node keeps the cluster (no second bootstrap): all down at once,
	// then all back in random order.
	for i := range c.agents {
		c.stop(i)
	}
	for _, i := range rand.Perm(len(c.agents)) {
		c.start(i)
	}
	c.waitConfig("restart all", 30*time.Second, func(v, nv []string) bool { return len(v) == 5 })
	put("restarted")

	// Kill two nodes once all five are healthy: each is reaped after the dead-server
	// threshold → 3 voters.
	c.waitHealthy("before the kill", 5, 3*time.Second, 30*time.Second)
	c.stop(3)
	c.stop(4)
	c.waitConfig("reap two dead", 30*time.Second, func(v, nv []string) bool { return len(v) == 3 })
	put("after reap")

	// A third death must not shrink the voters below the minimum quorum of 3.
	lead, _, _ := c.config()
	victim := 0
	for c.cfgs[victim].NodeID == lead {
		victim++
	}
	c.stop(victim)
	time.Sleep(4 * time.Second)
	if _, v, _ := c.config(); len(v) != 3 {
		t.Fatalf("voters %v: dead voter removed below the minimum quorum", v)
	}
	put("degraded")
}

// startGossip3 starts three gossip nodes with -bootstrap-expect 3 and waits for their
// three voters; they stop at the test's end.
func startGossip3(t *testing.T) *gossipCluster {
	t.Helper()
	c := &gossipCluster{t: t, dir: t.TempDir()}
	for range 3 {
		c.add(3)
	}
	for i := range 3 {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.agents {
			c.stop(i)
		}
	})
	c.waitConfig("bootstrap-expect 3", 20*time.Second, func(v, nv []string) bool { return len(v) == 3 })
	return c
}

func TestGossipWipedNodeRejoinsUnderSameID(t *testing.T) {
	c := startGossip3(t)
	cli := (&testCluster{t: t, agents: []*Agent{c.agents[0]}}).client(0)
	rev, err := cli.Put(context.Background(), "before-wipe", []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	// Give the leader's reconciler a few rounds to see every server's process with data
	// (it can only recognize a wiped server it has seen before), then wipe one: same ID
	// and addresses, empty data dir.
	time.Sleep(time.Second)
	victim := 2
	if c.agents[victim].Node().IsLeader() {
		victim = 1
	}
	c.stop(victim)
	if err := os.RemoveAll(c.cfgs[victim].DataDir); err != nil {
		t.Fatal(err)
	}
	c.start(victim)
	// The leader must take it out as a voter (it forgot its votes), then bring it back
	// as one once it has caught up.
	id := c.cfgs[victim].NodeID
	removed := func() int64 {
		n := int64(0)
		for _, a := range c.agents {
			if a != nil && a.gossip != nil {
				n += a.gossip.wipedRemoved.Load()
			}
		}
		return n
	}
	c.waitConfig("wiped node back as voter", 30*time.Second, func(v, nv []string) bool {
		in := false
		for _, x := range v {
			in = in || x == id
		}
		return in && removed() > 0
	})
	deadline := time.Now().Add(10 * time.Second)
	for c.agents[victim].Store().View().Revision() < rev {
		if time.Now().After(deadline) {
			t.Fatalf("wiped node never caught up to revision %d", rev)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGossipLabelsNeverMerge: two clusters with different labels, the second told to
// join the first's gossip address, stay two clusters: each node bootstraps alone and
// neither sees the other in gossip or in its Raft configuration.
func TestGossipLabelsNeverMerge(t *testing.T) {
	dir := t.TempDir()
	a := newGossipConfig(t, dir, "east", 1)
	a.Gossip.ClusterLabel, a.Gossip.RetryJoin, a.Autopilot.MinQuorum = "east", false, 1
	b := newGossipConfig(t, dir, "west", 1)
	b.Gossip.ClusterLabel, b.Gossip.Join, b.Autopilot.MinQuorum = "west", []string{a.Gossip.BindAddr}, 1
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	agA, err := Start(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer agA.Close(context.Background())
	agB, err := Start(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	defer agB.Close(context.Background())
	deadline := time.Now().Add(15 * time.Second)
	for !agA.Node().IsLeader() || !agB.Node().IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("each node should bootstrap its own cluster")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // gossip rounds in which a merge would show
	for _, ag := range []*Agent{agA, agB} {
		if ms := ag.Members(); len(ms) != 1 {
			t.Errorf("%s sees %d gossip members, want 1", ag.NodeID(), len(ms))
		}
		if ms := ag.Node().Status().Members; len(ms) != 1 || ms[0].ID != ag.NodeID() {
			t.Errorf("%s raft configuration %+v, want itself only", ag.NodeID(), ms)
		}
	}
}
