package raft

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
)

// clientTimeout is the Go client's usual request budget; a cut-off node must answer
// well within it.
const clientTimeout = 5 * time.Second

// newProxiedCluster starts size nodes on their own loopback IPs (127.0.0.11, .12, ...)
// behind chaos.Network proxies: every node advertises its proxy's address and dials
// from its own IP, so the network knows who sends what and can cut any link. tune, if
// set, adjusts node i's config before it opens.
func newProxiedCluster(t *testing.T, size int, tune func(i int, cfg *Config)) (*testCluster, *chaos.Network, []string) {
	t.Helper()
	ids := make([]string, size)
	ips := map[string]string{}
	for i := range ids {
		ids[i] = fmt.Sprintf("n%d", i+1)
		ips[fmt.Sprintf("127.0.0.%d", 11+i)] = ids[i]
	}
	network := chaos.NewNetwork(func(remote, _ net.Addr) string {
		if a, ok := remote.(*net.TCPAddr); ok {
			return ips[a.IP.String()]
		}
		return ""
	})
	t.Cleanup(network.Close)
	c := &testCluster{t: t}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n != nil {
				n.shutdown()
			}
		}
	})
	for i, id := range ids {
		ip := fmt.Sprintf("127.0.0.%d", 11+i)
		ports := make([]int, 2)
		for j := range ports {
			p, err := freeport.TCP(ip)
			if err != nil {
				t.Skipf("no port on %s (loopback aliases unavailable?): %v", ip, err)
			}
			ports[j] = p
		}
		cfg := testConfig(t, id)
		cfg.BindAddr = net.JoinHostPort(ip, fmt.Sprint(ports[0]))
		cfg.SourceIP = ip
		adv, err := network.Listen(id, net.JoinHostPort(ip, fmt.Sprint(ports[1])), cfg.BindAddr)
		if err != nil {
			t.Fatal(err)
		}
		cfg.AdvertiseAddr = adv
		if tune != nil {
			tune(i, &cfg)
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{c.nodes[0].Addr()}
		}
		n, err := Open(context.Background(), cfg, fsm.NewStore())
		if err != nil {
			t.Fatal(err)
		}
		c.cfgs = append(c.cfgs, cfg)
		c.nodes = append(c.nodes, n)
	}
	c.waitMembers(size)
	return c, network, ids
}

func others(ids []string, i int) []string {
	var out []string
	for j, id := range ids {
		if j != i {
			out = append(out, id)
		}
	}
	return out
}

// timed runs fn and returns its duration and error.
func timed(fn func() error) (time.Duration, error) {
	start := time.Now()
	err := fn()
	return time.Since(start), err
}

// TestCutOffNodeFailsFast: a node isolated by a partition refuses requests with
// ErrNoLeader (503 NoLeader over HTTP) well before a client's timeout instead of
// hanging; a write forwarded to the leader just before the cut ends as ErrTimeout
// (outcome unknown) as soon as the node notices, not after ApplyTimeout; and a leader
// cut off from the majority notices too. The majority keeps serving throughout.
func TestCutOffNodeFailsFast(t *testing.T) {
	c, network, ids := newProxiedCluster(t, 3, nil)
	lead := c.leader()
	mustPut(t, c.nodes[(lead+1)%3], "warm", "up") // pools a forwarding connection
	ctx, cancel := context.WithTimeout(context.Background(), clientTimeout)
	defer cancel()

	t.Run("follower", func(t *testing.T) {
		f := (lead + 1) % 3
		network.Partition([]string{ids[f]}, others(ids, f))
		defer network.Heal()

		// Right after the cut the follower still trusts its leader: the write is
		// forwarded into the void and ends when the node notices it is cut off.
		d, err := timed(func() error { _, err := c.nodes[f].Apply(ctx, putCmd("inflight", "1")); return err })
		if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrNoLeader) {
			t.Fatalf("write in flight at the cut: %v, want ErrTimeout or ErrNoLeader", err)
		}
		if d > clientTimeout/2 {
			t.Errorf("write in flight at the cut took %v, want well under %v", d, clientTimeout)
		}
		t.Logf("write in flight at the cut: %v after %v", err, d.Round(time.Millisecond))

		waitFor(t, 5*time.Second, "the follower to lose leader contact", func() bool {
			_, err := c.nodes[f].leaderContact()
			return err != nil
		})
		d, err = timed(func() error { _, err := c.nodes[f].Apply(ctx, putCmd("k", "v")); return err })
		if !errors.Is(err, ErrNoLeader) || d > clientTimeout/2 {
			t.Errorf("write on the cut-off follower: %v after %v, want ErrNoLeader well under %v", err, d, clientTimeout)
		}
		t.Logf("write on the cut-off follower: %v after %v", err, d.Round(time.Millisecond))
		d, err = timed(func() error { _, err := c.nodes[f].View(ctx, fsm.Linearizable); return err })
		if !errors.Is(err, ErrNoLeader) || d > clientTimeout/2 {
			t.Errorf("linearizable read on the cut-off follower: %v after %v, want ErrNoLeader well under %v", err, d, clientTimeout)
		}
		if _, err := c.nodes[f].View(ctx, fsm.Serializable); err != nil {
			t.Errorf("serializable read on the cut-off follower: %v", err)
		}
		mustPut(t, c.nodes[lead], "majority", "works")
	})

	network.Heal()
	waitFor(t, 10*time.Second, "every node in contact again", func() bool {
		for _, n := range c.nodes {
			if _, err := n.leaderContact(); err != nil {
				return false
			}
		}
		return true
	})

	t.Run("leader", func(t *testing.T) {
		l := c.leader()
		network.Partition([]string{ids[l]}, others(ids, l))
		defer network.Heal()
		waitFor(t, 5*time.Second, "the cut-off leader to step down", func() bool { return !c.nodes[l].IsLeader() })
		d, err := timed(func() error { _, err := c.nodes[l].Apply(ctx, putCmd("k", "v")); return err })
		if !errors.Is(err, ErrNoLeader) || d > clientTimeout/2 {
			t.Errorf("write on the deposed leader: %v after %v, want ErrNoLeader well under %v", err, d, clientTimeout)
		}
		t.Logf("write on the deposed leader: %v after %v", err, d.Round(time.Millisecond))
		d, err = timed(func() error { _, err := c.nodes[l].View(ctx, fsm.Linearizable); return err })
		if !errors.Is(err, ErrNoLeader) || d > clientTimeout/2 {
			t.Errorf("linearizable read on the deposed leader: %v after %v, want ErrNoLeader well under %v", err, d, clientTimeout)
		}
		maj := (l + 1) % 3
		waitFor(t, 10*time.Second, "a leader in the majority", func() bool {
			_, err := c.nodes[maj].leaderContact()
			return err == nil
		})
		mustPut(t, c.nodes[maj], "majority", "again")
	})
}
