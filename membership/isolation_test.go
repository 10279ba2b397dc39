package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// fastSync makes full state syncs frequent, so a leak between clusters would show
// within the observation window.
func fastSync(c *Config) { c.PushPullInterval = 200 * time.Millisecond }

// staysApart checks for a while that every node of each cluster sees exactly its own.
func staysApart(t *testing.T, clusters ...[]*testNode) {
	t.Helper()
	holdsFor(t, 1500*time.Millisecond, "clusters merged", func() string {
		for _, c := range clusters {
			var want []string
			for _, n := range c {
				want = append(want, n.cfg.NodeID)
			}
			for _, n := range c {
				var seen []string
				for _, m := range n.Members() {
					seen = append(seen, m.ID())
				}
				if !slices.Equal(seen, want) {
					return fmt.Sprintf("%s sees %v, want %v", n.cfg.NodeID, seen, want)
				}
			}
		}
		return ""
	})
}

func waitFormed(t *testing.T, nodes []*testNode) {
	t.Helper()
	waitFor(t, "cluster to form", func() string {
		for _, n := range nodes {
			if len(aliveIDs(n)) != len(nodes) {
				return fmt.Sprintf("%s sees %v", n.cfg.NodeID, aliveIDs(n))
			}
		}
		return ""
	})
}

// TestClusterLabelsIsolate: two clusters with different labels on nearby ports; a
// cross join fails and, even with a node listing both clusters' addresses, they never
// merge.
func TestClusterLabelsIsolate(t *testing.T) {
	a := startCluster(t, "a", 2, func(c *Config) { fastSync(c); c.ClusterLabel = "alpha" })
	b := startCluster(t, "b", 2, func(c *Config) { fastSync(c); c.ClusterLabel = "beta" })
	waitFormed(t, a)
	waitFormed(t, b)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := b[0].Join(ctx, []string{a[0].addr()}); !errors.Is(err, ErrJoin) {
		t.Fatalf("cross-label join: err = %v, want ErrJoin", err)
	}
	// b3 joins through both clusters' addresses: only its own answers.
	cfg := testConfig("b3")
	fastSync(&cfg)
	cfg.ClusterLabel, cfg.Join = "beta", []string{a[1].addr(), b[1].addr()}
	b = append(b, startNode(t, cfg, testMeta("b3")))
	waitFormed(t, b)
	staysApart(t, a, b)
}

// TestEncryption: nodes sharing a key gossip; a node with another key, or none,
// cannot join, and the clusters stay apart.
func TestEncryption(t *testing.T) {
	key1, key2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	k := startCluster(t, "k", 3, func(c *Config) { fastSync(c); c.EncryptKey = key1 })
	waitFormed(t, k)

	other := testConfig("x1")
	fastSync(&other)
	other.EncryptKey = key2
	x := startNode(t, other, testMeta("x1"))
	plain := testConfig("p1")
	fastSync(&plain)
	p := startNode(t, plain, testMeta("p1"))

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, n := range []*testNode{x, p} {
		if _, err := n.Join(ctx, []string{k[0].addr()}); !errors.Is(err, ErrJoin) {
			t.Errorf("%s joining with the wrong key: err = %v, want ErrJoin", n.cfg.NodeID, err)
		}
	}
	if _, err := k[2].Join(ctx, []string{x.addr()}); !errors.Is(err, ErrJoin) {
		t.Errorf("joining the other key's node: err = %v, want ErrJoin", err)
	}
	staysApart(t, k, []*testNode{x}, []*testNode{p})
}

// rogueDelegate serves fixed metadata for a bare memberlist node.
type rogueDelegate struct{ meta []byte }

func (r rogueDelegate) NodeMeta(int) []byte                 { return r.meta }
func (r rogueDelegate) NotifyMsg([]byte)                    {}
func (r rogueDelegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (r rogueDelegate) LocalState(bool) []byte              { return nil }
func (r rogueDelegate) MergeRemoteState(buf []byte, _ bool) {}

// TestForeignMetadataRejected: a node that speaks the same transport label but whose
// metadata names another cluster (here a bare memberlist, so nothing of this package
// stops it at home) is never admitted, and a join through it is refused.
func TestForeignMetadataRejected(t *testing.T) {
	nodes := startCluster(t, "m", 2, fastSync)
	m1, m2 := nodes[0], nodes[1]
	waitFormed(t, nodes)

	raw, err := EncodeMeta(Meta{NodeID: "rogue", ClusterLabel: "other", MaxCommandFormat: 1})
	if err != nil {
		t.Fatal(err)
	}
	rc := memberlist.DefaultLocalConfig()
	rc.Name, rc.BindAddr, rc.BindPort = "rogue", "127.0.0.1", 0
	rc.ProbeInterval, rc.PushPullInterval, rc.GossipInterval = 200*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond
	rc.Delegate = rogueDelegate{meta: raw}
	rc.Logger = discardLogger().StandardLogger(nil)
	rogue, err := memberlist.Create(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer rogue.Shutdown()
	// The rogue has no merge check of its own, so its join "succeeds" from its side.
	if _, err := rogue.Join([]string{m1.addr()}); err != nil {
		t.Fatalf("rogue join: %v", err)
	}
	waitFor(t, "m1 to refuse the rogue's merge and both to reject its alive messages", func() string {
		s1, s2 := m1.Stats(), m2.Stats()
		if s1.MergesRejected == 0 || s1.PeersRejected == 0 || s2.PeersRejected == 0 {
			return fmt.Sprintf("m1 %+v, m2 %+v", s1, s2)
		}
		return ""
	})
	staysApart(t, nodes)

	// A fresh node joining through the rogue is offered a foreign node: refused.
	m3 := startNode(t, testConfig("m3"), testMeta("m3"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rogueAddr := rogue.LocalNode().Address()
	if _, err := m3.Join(ctx, []string{rogueAddr}); !errors.Is(err, ErrJoin) || !errors.Is(err, ErrForeignCluster) {
		t.Errorf("join through a foreign node: err = %v, want ErrJoin wrapping ErrForeignCluster", err)
	}
	if ids := aliveIDs(m3); !slices.Equal(ids, []string{"m3"}) {
		t.Errorf("m3 sees %v after the refused join", ids)
	}
}

// TestDelegateVetsPeers calls the memberlist hooks directly with crafted nodes.
func TestDelegateVetsPeers(t *testing.T) {
	m := &Membership{cfg: testConfig("self")}
	m.cfg.ClusterLabel = "c"
	d := &delegate{m: m}
	enc := func(meta Meta) []byte {
		b, err := EncodeMeta(meta)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		meta []byte
		want error
	}{
		{"p", enc(Meta{NodeID: "p", ClusterLabel: "c"}), nil},
		{"p", enc(Meta{NodeID: "p", ClusterLabel: "other"}), ErrForeignCluster},
		{"p", enc(Meta{NodeID: "p"}), ErrForeignCluster},
		{"p", enc(Meta{NodeID: "q", ClusterLabel: "c"}), ErrInvalidMeta},
		{"p", []byte{1, 1, 1, 'p', 5, 1, 3, 6, 1, 1, 7, 1, 'c'}, ErrInvalidMeta}, // Min 3 > Max 1
		{"p", []byte{200}, ErrUnknownMetaFormat},
		{"p", nil, ErrMetaCorrupt},
	}
	for i, c := range cases {
		node := &memberlist.Node{Name: c.name, Meta: c.meta}
		if err := d.NotifyAlive(node); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("#%d: NotifyAlive err = %v, want %v", i, err, c.want)
		}
		good := &memberlist.Node{Name: "g", Meta: enc(Meta{NodeID: "g", ClusterLabel: "c"})}
		if err := d.NotifyMerge([]*memberlist.Node{good, node}); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("#%d: NotifyMerge err = %v, want %v", i, err, c.want)
		}
	}
	if st := m.Stats(); st.PeersRejected != 6 || st.MergesRejected != 6 {
		t.Errorf("PeersRejected = %d, MergesRejected = %d, want 6 and 6", st.PeersRejected, st.MergesRejected)
	}
}
