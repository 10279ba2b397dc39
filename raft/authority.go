package raft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Membership is authority on the raft port. With mutual TLS (Config.TLS) every
// connection names its peer: the node ID of its verified certificate. Then:
//
//   - a join request (rpcAddVoter, rpcAddNonvoter) is the one request a non-member may
//     send, to add itself only, at an address where it answers with its own
//     certificate (mayAdd); a member may add any node (it forwards joins);
//   - every other keel RPC (forwarded writes and reads, leader calls, remove,
//     transfer, ...) and every hashicorp/raft connection (AppendEntries, RequestVote,
//     InstallSnapshot, TimeoutNow) is served only to a member of this node's latest
//     Raft configuration. That is the configuration hashicorp/raft itself uses,
//     appended changes included: a server just added is a member on the leader at
//     once, and on a follower as soon as it holds the entry;
//   - a node absent from its own latest configuration (a new node waiting to join, to
//     be added, or to bootstrap with -bootstrap-expect) has no cluster to protect and
//     cannot tell its future leader from anyone: it accepts Raft connections and the
//     read-only state requests (rpcApplied, rpcFormats) from any node of the CA, and
//     nothing else;
//   - when a peer leaves the configuration its accepted Raft connections are cut
//     (within a members refresh, half a second), so a pooled connection outlives no
//     removal; its keel RPCs are refused from the next request on;
//   - a certificate the cluster revoked (revoke.go) is refused on both sides.
//
// Without TLS the port is plain text (insecure dev mode): there is no identity, and
// none of this applies — anyone who reaches the port is a member.

// ErrNotMember: a peer that is not a member of the Raft configuration sent a request
// only members may send. Nothing was done.
var ErrNotMember = errors.New("raft: the peer is not a member of the raft configuration")

// membership reports whether id is in this node's latest configuration, and whether
// this node itself is. hashicorp/raft answers GetConfiguration from an atomic copy,
// without its main loop.
func (n *Node) membership(id string) (member, self bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false, false
	}
	for _, s := range f.Configuration().Servers {
		member = member || string(s.ID) == id
		self = self || string(s.ID) == n.cfg.NodeID
	}
	return member, self
}

// mayCall refuses a request of kind from peer ("" without TLS) unless peer may send
// it; joins are decided by mayAdd.
func (n *Node) mayCall(peer string, kind byte) error {
	if peer == "" || kind == rpcAddVoter || kind == rpcAddNonvoter {
		return nil
	}
	member, self := n.membership(peer)
	if member || (!self && (kind == rpcApplied || kind == rpcFormats)) {
		return nil
	}
	return fmt.Errorf("%w: node %q may only ask to join", ErrNotMember, peer)
}

// admitRaft reports whether peer may speak hashicorp/raft's protocol to this node.
func (n *Node) admitRaft(peer string) bool {
	member, self := n.membership(peer)
	return member || !self
}

// mayAdd refuses a join request in which peer asks to add a node other than itself,
// unless peer is a member (a member forwards joins to the leader). A non-member
// adding itself must answer at addr with its own certificate: a node of the CA
// cannot add itself at an address it does not serve (a voter nobody can reach
// lowers the cluster's fault tolerance). Without TLS (peer "") there is no identity
// to check.
func (n *Node) mayAdd(ctx context.Context, peer, id, addr string) error {
	if peer == "" {
		return nil
	}
	if member, _ := n.membership(peer); member {
		return nil
	}
	if peer != id {
		return fmt.Errorf("raft rpc: node %q may not add node %q: a node joins only as the node its certificate names", peer, id)
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	conn, err := n.mux.dialNode(addr, id, protoRPC, timeout)
	if err != nil {
		return fmt.Errorf("raft rpc: node %q may not join at %s: it does not answer there with its certificate: %w", id, addr, err)
	}
	conn.Close()
	return nil
}

// cutNonMembers closes the accepted Raft connections of peers that are no longer members,
// once this node is in its configuration.
func (n *Node) cutNonMembers(ms []Member) {
	in := map[string]bool{}
	for _, m := range ms {
		in[m.ID] = true
	}
	if !in[n.cfg.NodeID] {
		return
	}
	if k := n.mux.accepted.cut(func(peer string) bool { return in[peer] }); k > 0 {
		n.log.Warn("cut the connections of peers that are not members", "connections", k)
	}
}

// peerConns tracks accepted Raft connections with their peer's node ID.
type peerConns struct {
	mu    sync.Mutex
	conns map[*peerConn]struct{}
}

// peerConn is an accepted connection that leaves its peerConns when closed.
type peerConn struct {
	net.Conn
	peer string
	set  *peerConns
	once sync.Once
}

func (c *peerConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

func (s *peerConns) add(c net.Conn, peer string) net.Conn {
	pc := &peerConn{Conn: c, peer: peer, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*peerConn]struct{}{}
	}
	s.conns[pc] = struct{}{}
	return pc
}

// cut closes the connections whose peer keep refuses and returns how many.
func (s *peerConns) cut(keep func(peer string) bool) int {
	s.mu.Lock()
	var gone []*peerConn
	for c := range s.conns {
		if !keep(c.peer) {
			gone = append(gone, c)
		}
	}
	s.mu.Unlock()
	for _, c := range gone {
		c.Close()
	}
	return len(gone)
}
