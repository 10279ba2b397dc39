package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/keel-kv/keel/chaos"
	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
)

// partitionableCluster starts size agents over loopback TCP, each dialing from its
// own IP through chaos.Network proxies in front of the raft ports, so that a test can
// cut links (blackholes: connections stay open, bytes stop) between them.
func partitionableCluster(t *testing.T, size int) (*testCluster, *chaos.Network, []string) {
	t.Helper()
	return partitionableClusterWith(t, size, nil)
}

// partitionableClusterWith is partitionableCluster with tune applied to each node's
// config.
func partitionableClusterWith(t *testing.T, size int, tune func(*Config)) (*testCluster, *chaos.Network, []string) {
	t.Helper()
	ips := map[string]string{}
	network := chaos.NewNetwork(func(remote, _ net.Addr) string {
		if a, ok := remote.(*net.TCPAddr); ok {
			return ips[a.IP.String()]
		}
		return ""
	})
	t.Cleanup(network.Close)
	dir := t.TempDir()
	c := &testCluster{t: t}
	var ids []string
	for i := range size {
		id, ip := fmt.Sprintf("n%d", i+1), fmt.Sprintf("127.0.0.%d", 21+i)
		ids, ips[ip] = append(ids, id), id
		cfg := testConfig(t, dir, id)
		if tune != nil {
			tune(&cfg)
		}
		rp, err1 := freeport.TCP(ip)
		pp, err2 := freeport.TCP(ip)
		if err := errors.Join(err1, err2); err != nil {
			t.Skipf("no port on %s (loopback aliases unavailable?): %v", ip, err)
		}
		cfg.Raft.BindAddr = net.JoinHostPort(ip, fmt.Sprint(rp))
		cfg.Raft.SourceIP = ip
		adv, err := network.Listen(id, net.JoinHostPort(ip, fmt.Sprint(pp)), cfg.Raft.BindAddr)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Raft.AdvertiseAddr = adv
		if i == 0 {
			cfg.Raft.Bootstrap = true
		} else {
			cfg.Raft.Join = []string{c.cfgs[0].Raft.AdvertiseAddr}
		}
		c.cfgs, c.agents = append(c.cfgs, cfg), append(c.agents, nil)
		c.start(i)
		c.waitReady(i)
	}
	t.Cleanup(func() {
		for i := range c.agents {
			c.stop(i)
		}
	})
	return c, network, ids
}

// TestIsolatedNodeAnswersNoLeader: three agents over loopback TCP, each dialing from its
// own IP through chaos.Network proxies in front of the raft ports. Once a node is cut
// off by a partition, its HTTP API answers 503 NoLeader with Retry-After, well inside
// a client's 5s timeout, for writes and linearizable reads; a client that knows the
// other nodes moves on to them at once and succeeds.
func TestIsolatedNodeAnswersNoLeader(t *testing.T) {
	const size = 3
	c, network, ids := partitionableCluster(t, size)
	cut := (c.leader() + 1) % size
	var rest []string
	for i, id := range ids {
		if i != cut {
			rest = append(rest, id)
		}
	}
	network.Partition([]string{ids[cut]}, rest)
	defer network.Heal()
	time.Sleep(2 * c.cfgs[cut].Raft.HeartbeatTimeout) // past the point where it trusts its old leader

	only, err := client.New([]string{c.agents[cut].HTTPAddr()}, client.Options{MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"put", func() error { _, err := only.Put(ctx, "k", []byte("v")); return err }},
		{"linearizable get", func() error { _, err := only.Get(ctx, "k"); return err }},
	} {
		start := time.Now()
		err := op.do()
		d := time.Since(start)
		var e *client.Error
		if !errors.As(err, &e) || e.Code != 503 || e.Reason != api.ReasonNoLeader {
			t.Fatalf("%s on the isolated node: %v, want 503 NoLeader", op.name, err)
		}
		if d > 2500*time.Millisecond {
			t.Errorf("%s on the isolated node took %v, want well under the 5s client timeout", op.name, d)
		}
		t.Logf("%s on the isolated node: 503 %s after %v: %s", op.name, e.Reason, d.Round(time.Millisecond), e.Message)
	}

	// A client of every node skips the isolated one at once.
	var addrs []string
	for _, i := range []int{cut, (cut + 1) % size, (cut + 2) % size} {
		addrs = append(addrs, c.agents[i].HTTPAddr())
	}
	all, err := client.New(addrs, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := all.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put through a client of every node: %v", err)
	}
	t.Logf("put through a client of every node, isolated one first: %v", time.Since(start).Round(time.Millisecond))
}

// A keepalive sent to a follower is forwarded to the leader; when the leader is cut off
// mid-call (its connections blackholed, not closed), the follower gives up on it as
// soon as it loses contact and renews on the next leader, instead of holding the call
// on the dead connection until ApplyTimeout (the lease the chaos checker saw lost).
func TestKeepAliveForwardedPastALeaderCutOff(t *testing.T) {
	const size = 3
	c, network, ids := partitionableCluster(t, size)
	lead := c.leader()
	via := (lead + 1) % size
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.New([]string{c.agents[via].HTTPAddr()}, client.Options{MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	ttl := 4 * time.Second
	g, err := cl.Grant(ctx, ttl)
	if err != nil {
		t.Fatal(err)
	}
	// Every node must have heard every other voter say it applies leases (format 3)
	// before the cut: a voter never heard from counts as the oldest format, and a
	// successor that never heard from the old leader holds every lease command until it
	// answers (raft/formats.go) — true of a cluster a second old, not this test's point.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		heard := true
		for _, a := range c.agents {
			known := a.Node().VoterFormats()
			heard = heard && len(known) == size-1
			for _, f := range known {
				heard = heard && f >= fsm.CommandFormatV3
			}
		}
		if heard {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the nodes did not hear every voter apply command format 3 within 10 s")
		}
	}
	var rest []string
	for i, id := range ids {
		if i != lead {
			rest = append(rest, id)
		}
	}
	if err := network.Partition([]string{ids[lead]}, rest); err != nil {
		t.Fatal(err)
	}
	defer network.Heal()
	// One attempt, bounded by what the lease has left: before the fix the forwarded
	// call sat on the blackholed connection until ApplyTimeout and this failed.
	kctx, kcancel := context.WithTimeout(ctx, ttl)
	defer kcancel()
	start := time.Now()
	var resp *api.LeaseKeepAliveResponse
	for {
		resp, err = cl.KeepAliveOnce(kctx, g.ID)
		var e *client.Error
		if err == nil || !errors.As(err, &e) || e.Code != 503 { // 503: no leader yet
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("keepalive through a follower while the leader is cut off: %v (after %v)", err, time.Since(start).Round(time.Millisecond))
	}
	if resp.TTLMillis <= 0 {
		t.Fatalf("keepalive answered TTL %d ms", resp.TTLMillis)
	}
	t.Logf("keepalive through %s renewed on the next leader after %v", ids[via], time.Since(start).Round(time.Millisecond))
}
