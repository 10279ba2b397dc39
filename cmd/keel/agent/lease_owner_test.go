package agent

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// TestClusterLeaseOwnerSurvivesSnapshotAndLeaderChange: a lease's owner is replicated
// state. Tenant A grants a lease and attaches app/lock; a follower snapshots its state
// and restarts from that snapshot (the grant is in it, not in the log it replays);
// leadership then moves to that follower. Every node, the restored one leading, still
// refuses tenant B the lease (list, keepalive, time to live, revoke) and serves
// tenant A.
func TestClusterLeaseOwnerSurvivesSnapshotAndLeaderChange(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	boot, err := c.client(0).ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mgmt := aclClient(t, c.agents[0], boot.SecretID)
	secrets := map[string]string{}
	for _, p := range []api.ACLPolicy{
		{Name: "tenant-a", Keys: []api.ACLKeyRule{{Prefix: "app/", Access: api.AccessWrite}}},
		{Name: "tenant-b", Keys: []api.ACLKeyRule{{Prefix: "other/", Access: api.AccessWrite}}},
	} {
		if _, err := mgmt.ACLPolicyPut(ctx, p); err != nil {
			t.Fatal(err)
		}
		tok, err := mgmt.ACLTokenCreate(ctx, api.ACLTokenRequest{Policies: []string{p.Name}})
		if err != nil {
			t.Fatal(err)
		}
		secrets[p.Name] = tok.SecretID
	}
	lead := c.leader()
	a := aclClient(t, c.agents[lead], secrets["tenant-a"])
	g, err := a.Grant(ctx, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutLease(ctx, "app/lock", []byte("me"), g.ID); err != nil {
		t.Fatal(err)
	}
	c.waitConverged()

	victim := (lead + 1) % 3
	if err := c.agents[victim].Node().Snapshot(); err != nil {
		t.Fatalf("snapshot on node %d: %v", victim, err)
	}
	c.restart(victim)
	c.waitReady(victim)
	if l, ok := c.agents[victim].Store().View().Lease(g.ID); !ok || l.Owner == "" {
		t.Fatalf("lease %d on the node restored from its snapshot: %+v, %v; want it with its owner", g.ID, l, ok)
	}
	waitFor(t, fmt.Sprintf("node %d leads", victim), 30*time.Second, func() error {
		if c.leader() == victim {
			return nil
		}
		return c.agents[c.leader()].Node().TransferLeadership(ctx, c.agents[victim].NodeID())
	})

	for i, ag := range c.agents {
		b := aclClient(t, ag, secrets["tenant-b"])
		owner := aclClient(t, ag, secrets["tenant-a"])
		waitFor(t, fmt.Sprintf("node %d serves tenant A's keepalive", i), 30*time.Second, func() error {
			_, err := owner.KeepAliveOnce(ctx, g.ID)
			return err
		})
		if ls, err := b.Leases(ctx); err != nil || slices.ContainsFunc(ls, func(l api.LeaseInfo) bool { return l.ID == g.ID }) {
			t.Errorf("node %d: lease list by tenant B = %v, %v; want it without %d", i, ls, err, g.ID)
		}
		if _, err := b.KeepAliveOnce(ctx, g.ID); !client.IsForbidden(err) {
			t.Errorf("node %d: keepalive by tenant B = %v, want 403", i, err)
		}
		if _, err := b.Lease(ctx, g.ID); !client.IsForbidden(err) {
			t.Errorf("node %d: time to live by tenant B = %v, want 403", i, err)
		}
		if _, err := b.Revoke(ctx, g.ID); !client.IsForbidden(err) {
			t.Errorf("node %d: revoke by tenant B = %v, want 403", i, err)
		}
		if ls, err := owner.Leases(ctx); err != nil || !slices.ContainsFunc(ls, func(l api.LeaseInfo) bool { return l.ID == g.ID }) {
			t.Errorf("node %d: lease list by tenant A = %v, %v; want it with %d", i, ls, err, g.ID)
		}
		if l, err := owner.Lease(ctx, g.ID); err != nil || !slices.Equal(l.Keys, []string{"app/lock"}) {
			t.Errorf("node %d: time to live by tenant A = %+v, %v; want it with app/lock", i, l, err)
		}
	}
	if _, err := aclClient(t, c.agents[victim], secrets["tenant-a"]).Revoke(ctx, g.ID); err != nil {
		t.Fatalf("revoke by tenant A on the restored leader: %v", err)
	}
}
