package agent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-kv/keel/membership"
	"github.com/keel-kv/keel/raft"
)

// suffrageTrail records, from the leader's view polled every 20 ms, each change of one
// server's place in the Raft configuration: "absent", "Nonvoter" or "Voter".
type suffrageTrail struct {
	mu    sync.Mutex
	trail []string
}

func (s *suffrageTrail) note(state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.trail); n == 0 || s.trail[n-1] != state {
		s.trail = append(s.trail, state)
	}
}

func (s *suffrageTrail) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.trail...)
}

// watchSuffrage polls the gossip cluster's leader for id's place until stop is called.
func (c *gossipCluster) watchSuffrage(id string) (trail *suffrageTrail, stop func()) {
	trail = &suffrageTrail{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			lead, v, nv := c.config()
			if lead != "" {
				state := "absent"
				for _, x := range v {
					if x == id {
						state = "Voter"
					}
				}
				for _, x := range nv {
					if x == id {
						state = "Nonvoter"
					}
				}
				trail.note(state)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return trail, func() { close(done); wg.Wait() }
}

// A rebuilt node's promotion has one owner, its own rejoin: the leader's autopilot
// must not take the rebuilt node (a new process with no state, under an ID it saw with
// data) for a wiped one and remove it again once it is a voter. Found by hand: Voter →
// Nonvoter → Voter over 14 s, five membership changes.
func TestGossipRebuiltNodeIsPromotedOnce(t *testing.T) {
	c := startGossip3(t)
	cli := (&testCluster{t: t, agents: []*Agent{c.agents[0]}}).client(0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "before-rebuild", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Let the leader's reconciler see every process with data: the case where it could
	// take the rebuilt one for a wiped one.
	time.Sleep(2 * time.Second)
	victim := 2
	if c.agents[victim].Node().IsLeader() {
		victim = 1
	}
	live := (victim + 1) % 3
	id := c.cfgs[victim].NodeID
	c.stop(victim)
	liveCli := (&testCluster{t: t, agents: []*Agent{c.agents[live]}}).client(0)
	if _, err := Rebuild(ctx, c.cfgs[victim].DataDir, liveCli, time.Now()); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	trail, stop := c.watchSuffrage(id)
	c.start(victim)
	c.waitConfig("rebuilt node a voter", 30*time.Second, func(v, nv []string) bool {
		for _, x := range v {
			if x == id {
				return true
			}
		}
		return false
	})
	// Long enough for the reconciler (200 ms rounds, 1 s stabilization) to act again.
	time.Sleep(4 * time.Second)
	stop()
	got := strings.Join(trail.get(), " → ")
	if want := "absent → Nonvoter → Voter"; got != want && got != "absent → Voter" {
		t.Errorf("the rebuilt node's place in the configuration went %s, want %s", got, want)
	}
	for _, a := range c.agents {
		if a != nil && a.gossip != nil && a.gossip.wipedRemoved.Load() > 0 {
			t.Errorf("%s's autopilot removed the rebuilt node as a wiped one", a.NodeID())
		}
	}
}

// Autopilot keeps the number of voters odd: a fourth server stays a non-voter (four
// voters tolerate no more failures than three and need a larger quorum) until a fifth
// is caught up, then both are promoted.
func TestAutopilotKeepsVotersOdd(t *testing.T) {
	c := startGossip3(t)
	fourth := c.add(0)
	c.start(fourth)
	c.waitConfig("fourth joins as a non-voter", 30*time.Second, func(v, nv []string) bool { return len(nv) == 1 })
	// Well past the stabilization time (1 s): it stays a non-voter.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if _, v, _ := c.config(); len(v) > 3 {
			t.Fatalf("voters %v: a fourth voter was promoted", v)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fifth := c.add(0)
	c.start(fifth)
	c.waitConfig("fourth and fifth promoted together", 30*time.Second, func(v, nv []string) bool { return len(v) == 5 && len(nv) == 0 })
}

// A rejoining server's promotion is its own: autopilot never counts it stable, however
// long it has been alive (with the rule dropped, stable asks the nil node and panics).
func TestAutopilotLeavesRejoiningToItself(t *testing.T) {
	g := &gossip{a: &Agent{cfg: Config{Autopilot: AutopilotConfig{ServerStabilizationTime: 0}}}, healthy: map[string]time.Time{}}
	m := membership.Member{Status: membership.StatusAlive, Meta: membership.Meta{NodeID: "n2", Rejoining: true}}
	s := raft.Member{ID: "n2", Address: "127.0.0.1:1"}
	now := time.Now()
	for i := range 3 {
		if g.stable(context.Background(), s, m, now.Add(time.Duration(i)*time.Hour)) {
			t.Fatalf("round %d: a rejoining server counted as stable", i)
		}
	}
}

// promotable keeps the voter count odd unless EvenVoters.
//
//	voters ready | odd  even-allowed
//	   3     1   |  0      1
//	   3     2   |  2      2
//	   3     3   |  2      3
//	   2     1   |  1      1
//	   2     3   |  1      3
//	   1     1   |  0      1
func TestAutopilotPromotable(t *testing.T) {
	for i, c := range []struct{ voters, ready, odd, even int }{
		{3, 0, 0, 0}, {3, 1, 0, 1}, {3, 2, 2, 2}, {3, 3, 2, 3}, {2, 1, 1, 1}, {2, 3, 1, 3}, {1, 1, 0, 1},
	} {
		for _, even := range []bool{false, true} {
			g := &gossip{a: &Agent{cfg: Config{Autopilot: AutopilotConfig{EvenVoters: even}}}}
			want := c.odd
			if even {
				want = c.even
			}
			if got := g.promotable(c.voters, c.ready); got != want {
				t.Errorf("#%d: promotable(%d, %d) with EvenVoters %t = %d, want %d", i, c.voters, c.ready, even, got, want)
			}
		}
	}
}
