package raft

import (
	"testing"
	"time"
)

// keel patch §5: a node whose configuration has itself as its only voter campaigns
// as soon as it starts or bootstraps, not a heartbeat timeout later (etcd fast-forwards
// a single-member cluster's election ticks the same way). The timeouts here are 10 s,
// so a leader within 3 s can only come from the immediate campaign.
func loneVoterConfig(t *testing.T) *Config {
	conf := inmemConfig(t)
	conf.HeartbeatTimeout = 10 * time.Second
	conf.ElectionTimeout = 10 * time.Second
	conf.LeaderLeaseTimeout = 10 * time.Second
	return conf
}

func waitLeaderWithin(t *testing.T, r *Raft, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if r.State() == Leader {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: no leader within %v (state %v): the lone voter waited for a heartbeat timeout", what, d, r.State())
}

func TestRaft_LoneVoterCampaignsAtStart(t *testing.T) {
	c := MakeCluster(1, t, loneVoterConfig(t))
	defer c.Close()
	waitLeaderWithin(t, c.rafts[0], 3*time.Second, "bootstrapped before start")
}

func TestRaft_LoneVoterCampaignsAtLiveBootstrap(t *testing.T) {
	c := MakeClusterNoBootstrap(1, t, loneVoterConfig(t))
	defer c.Close()
	r := c.rafts[0]
	cfg := Configuration{Servers: []Server{{Suffrage: Voter, ID: r.localID, Address: r.localAddr}}}
	if err := r.BootstrapCluster(cfg).Error(); err != nil {
		t.Fatal(err)
	}
	waitLeaderWithin(t, r, 3*time.Second, "live bootstrap")
}

// A voter among others still waits its heartbeat timeout: with a peer that has not
// spoken, campaigning at once would only disturb a leader it has not heard from yet.
func TestRaft_VoterAmongOthersWaits(t *testing.T) {
	c := MakeCluster(2, t, loneVoterConfig(t))
	defer c.Close()
	time.Sleep(2 * time.Second)
	for _, r := range c.rafts {
		if r.State() != Follower {
			t.Fatalf("%v campaigned before its heartbeat timeout", r)
		}
	}
}
