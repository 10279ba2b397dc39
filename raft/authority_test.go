package raft

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/internal/freeport"
	"github.com/keel-kv/keel/internal/tlsutil/tlstest"
)

// clusterState is what a stranger must not change: the configuration and the data.
type clusterState struct {
	members []string
	rev     int64
}

func stateOf(t *testing.T, c *testCluster) clusterState {
	t.Helper()
	lead := c.nodes[c.leader()]
	var ids []string
	for _, m := range lead.Status().Members {
		ids = append(ids, m.ID+"@"+m.Address+"/"+m.Suffrage.String())
	}
	slices.Sort(ids)
	return clusterState{members: ids, rev: lead.store.View().Revision()}
}

// TestNonMemberCertificateIsRefused: a 3-node TLS cluster, and a client holding a
// certificate of the cluster CA for n9, which never joined, talking to every node's
// raft port: (a) forwarded writes, reads and leader calls, (b) remove-server,
// (c) transfer-leadership and (d) adding itself at an address it does not serve are
// answered ErrNotMember (or refused to join); (e) hashicorp/raft's own AppendEntries
// and RequestVote, with a higher term and a member's ID in the header, get no answer.
// The configuration and the data are unchanged, no term jumps to the stranger's, and a
// node that joins afterwards works.
func TestNonMemberCertificateIsRefused(t *testing.T) {
	c, ca := newTLSCluster(t, 3)
	mustPut(t, c.nodes[0], "before", "ok")
	before := stateOf(t, c)
	n9 := tlstest.Reloader(t, ca.Node(t, "n9"))
	cfg := n9.PeerClientConfig("")

	put, err := fsm.EncodeCommand(putCmd("\x00keel/acl/tokens/stolen", "global-management"))
	if err != nil {
		t.Fatal(err)
	}
	free, err := freeport.TCP("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	unreachable := net.JoinHostPort("127.0.0.1", strconv.Itoa(free))
	for _, n := range c.nodes {
		other := c.nodes[0].cfg.NodeID
		if other == n.cfg.NodeID {
			other = c.nodes[1].cfg.NodeID
		}
		for _, tc := range []struct {
			what string
			kind byte
			body string
			want string
		}{
			{"(a) forwarded apply", rpcApply, string(put), "not a member"},
			{"(a) forwarded apply with leases", rpcApplyLeases, string(put), "not a member"},
			{"(a) leader call", rpcLeaderCall, "x", "not a member"},
			{"(a) read index", rpcReadIndex, "", "not a member"},
			{"(b) remove server", rpcRemove, "n1", "not a member"},
			{"(c) transfer leadership", rpcTransfer, other, "not a member"},
			{"(d) add itself at an address it does not serve", rpcAddVoter, "n9\x00" + unreachable, "does not answer"},
			{"(d) add itself as non-voter there", rpcAddNonvoter, "n9\x00" + unreachable, "does not answer"},
			{"(d) add itself at a member's address", rpcAddVoter, "n9\x00" + n.Addr(), "does not answer"},
		} {
			msg, err := rawRPC(n.Addr(), cfg, tc.kind, tc.body)
			if err != nil || !strings.Contains(msg, tc.want) {
				t.Errorf("%s: n9 %s: answer %q, %v; want refused (%q)", n.cfg.NodeID, tc.what, msg, err, tc.want)
			}
		}
	}
	terms := map[string]uint64{}
	for _, n := range c.nodes {
		terms[n.cfg.NodeID] = n.raft.CurrentTerm()
	}
	strangerRaftRPCs(t, c, n9)

	// A busy machine may hold an election meanwhile (a new leader, a term or two
	// more); the stranger's RPCs would add ten.
	if after := stateOf(t, c); !slices.Equal(after.members, before.members) || after.rev != before.rev {
		t.Errorf("the stranger changed the cluster: before %+v, after %+v", before, after)
	}
	for _, n := range c.nodes {
		if got := n.raft.CurrentTerm(); got >= terms[n.cfg.NodeID]+10 {
			t.Errorf("%s: term %d, was %d before the stranger's raft RPCs of term +10", n.cfg.NodeID, got, terms[n.cfg.NodeID])
		}
		if _, err := n.store.View().Get([]byte("\x00keel/acl/tokens/stolen"), 0); !errors.Is(err, fsm.ErrKeyNotFound) {
			t.Errorf("%s: the stranger's record: %v, want not found", n.cfg.NodeID, err)
		}
	}
	joinedNodeWorks(t, c, ca)
}

// strangerRaftRPCs sends hashicorp/raft RPCs as n9 to every node: an AppendEntries
// heartbeat of a higher term in the name of a member, and a RequestVote of a higher
// term in a member's name marked as a leadership transfer (which a follower grants
// without checking who leads). Each must fail without an answer.
func strangerRaftRPCs(t *testing.T, c *testCluster, n9 PeerTLS) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := newMux(ln, ln.Addr(), func(conn net.Conn) { conn.Close() }, nil, n9, nil, nil)
	trans := hraft.NewNetworkTransportWithConfig(&hraft.NetworkTransportConfig{
		Stream: streamLayer{m}, MaxPool: 1, Timeout: 2 * time.Second})
	defer trans.Close()
	for _, n := range c.nodes {
		term := n.raft.CurrentTerm() + 10
		hdr := hraft.RPCHeader{ProtocolVersion: hraft.ProtocolVersionMax, ID: []byte("n1"), Addr: []byte(c.nodes[0].Addr())}
		if n.cfg.NodeID == "n1" {
			hdr.ID, hdr.Addr = []byte("n2"), []byte(c.nodes[1].Addr())
		}
		var ar hraft.AppendEntriesResponse
		err := trans.AppendEntries(hraft.ServerID(n.cfg.NodeID), hraft.ServerAddress(n.Addr()),
			&hraft.AppendEntriesRequest{RPCHeader: hdr, Term: term, LeaderCommitIndex: 0}, &ar)
		if err == nil {
			t.Errorf("%s: n9's AppendEntries of term %d answered %+v, want the connection refused", n.cfg.NodeID, term, ar)
		}
		var vr hraft.RequestVoteResponse
		err = trans.RequestVote(hraft.ServerID(n.cfg.NodeID), hraft.ServerAddress(n.Addr()),
			&hraft.RequestVoteRequest{RPCHeader: hdr, Term: term + 1, LastLogIndex: 1 << 40, LastLogTerm: term,
				LeadershipTransfer: true}, &vr)
		if err == nil {
			t.Errorf("%s: n9's RequestVote of term %d answered %+v, want the connection refused", n.cfg.NodeID, term+1, vr)
		}
	}
}

// joinedNodeWorks: a node with its own certificate joins through a follower and
// then writes (forwarded to the leader) and reads.
func joinedNodeWorks(t *testing.T, c *testCluster, ca *tlstest.CA) {
	t.Helper()
	follower := c.nodes[(c.leader()+1)%3]
	cfg := testConfig(t, "n4")
	cfg.TLS = tlstest.Reloader(t, ca.Node(t, "n4"))
	cfg.Join = []string{follower.Addr()}
	n4, err := Open(context.Background(), cfg, fsm.NewStore())
	if err != nil {
		t.Fatal(err)
	}
	c.nodes = append(c.nodes, n4)
	c.waitMembers(4)
	mustPut(t, n4, "from-n4", "ok")
	v, err := n4.View(context.Background(), fsm.Linearizable)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Get([]byte("before"), 0); err != nil {
		t.Errorf("n4 reads the cluster's data: %v", err)
	}
}

// TestRetiredNodeCertificateIsRefused: in a 3-node TLS cluster, follower A retires
// itself (keel leave) and the leader retires follower B (keel remove-peer). Both
// keep running with their certificates, yet the leader refuses them: a request to join
// again gets no answer, and the configuration keeps the leader alone.
func TestRetiredNodeCertificateIsRefused(t *testing.T) {
	c, _ := newTLSCluster(t, 3)
	ctx := context.Background()
	li := c.leader()
	lead, a, b := c.nodes[li], c.nodes[(li+1)%3], c.nodes[(li+2)%3]
	if err := a.RetireServer(ctx, a.cfg.NodeID); err != nil {
		t.Fatalf("%s retires itself: %v", a.cfg.NodeID, err)
	}
	if err := lead.RetireServer(ctx, b.cfg.NodeID); err != nil {
		t.Fatalf("leader retires %s: %v", b.cfg.NodeID, err)
	}
	waitFor(t, 10*time.Second, "the leader alone in the configuration", func() bool {
		ms := lead.Status().Members
		return len(ms) == 1 && ms[0].ID == lead.cfg.NodeID
	})
	for _, n := range []*Node{a, b} {
		rec, ok := lead.revocationOf(n.cfg.NodeID)
		if !ok || len(rec.SHA256) == 0 {
			t.Errorf("revocation record of %s: %+v, %v; want one listing its certificate", n.cfg.NodeID, rec, ok)
		}
		old := n.cfg.TLS.PeerClientConfig("")
		msg, err := rawRPC(lead.Addr(), old, rpcAddVoter, n.cfg.NodeID+"\x00"+n.Addr())
		if err == nil {
			t.Errorf("retired %s asks to join with its old certificate: answered %q, want the connection refused", n.cfg.NodeID, msg)
		}
	}
	if ms := lead.Status().Members; len(ms) != 1 {
		t.Errorf("members after the retired nodes' join requests: %+v, want the leader alone", ms)
	}
	mustPut(t, lead, "after", "ok")
}

// TestRevocationRevokes: a record refuses the listed certificates and any issued
// before the removal; a certificate issued after it is admitted.
func TestRevocationRevokes(t *testing.T) {
	removed := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	listed := &x509.Certificate{Raw: []byte("listed"), NotBefore: removed.Add(time.Hour)}
	rec := revocation{RemovedUnixNano: removed.UnixNano(), SHA256: []string{fingerprint(listed)}}
	for i, tc := range []struct {
		cert *x509.Certificate
		want bool
	}{
		{listed, true}, // listed, whatever its dates
		{&x509.Certificate{Raw: []byte("unseen old"), NotBefore: removed.Add(-time.Second)}, true},
		{&x509.Certificate{Raw: []byte("reissued"), NotBefore: removed.Add(time.Second)}, false},
		{&x509.Certificate{Raw: []byte("same instant"), NotBefore: removed}, false},
	} {
		if got := rec.revokes(tc.cert); got != tc.want {
			t.Errorf("#%d: revokes = %v, want %v", i, got, tc.want)
		}
	}
}

// acceptedFrom counts the accepted Raft connections of peer.
func (s *peerConns) acceptedFrom(peer string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := 0
	for c := range s.conns {
		if c.peer == peer {
			k++
		}
	}
	return k
}

// TestRemovedPeerConnectionsAreCut: the leader of a 3-node TLS cluster removes
// itself; the followers held its Raft connections (AppendEntries) and cut them once it
// is out of their configuration, so a pooled connection serves no removed node.
func TestRemovedPeerConnectionsAreCut(t *testing.T) {
	c, _ := newTLSCluster(t, 3)
	li := c.leader()
	old := c.nodes[li]
	f := c.nodes[(li+1)%3]
	mustPut(t, old, "k", "v")
	if k := f.mux.accepted.acceptedFrom(old.cfg.NodeID); k == 0 {
		t.Fatalf("%s holds no raft connection of the leader %s", f.cfg.NodeID, old.cfg.NodeID)
	}
	if err := old.RemoveServer(context.Background(), old.cfg.NodeID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the removed leader's connections cut", func() bool {
		return f.mux.accepted.acceptedFrom(old.cfg.NodeID) == 0
	})
}
