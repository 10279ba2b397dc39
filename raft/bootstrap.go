package raft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	hraft "github.com/hashicorp/raft"
)

// HasState reports whether this node has Raft state: it was opened on existing state,
// it is being rebuilt from its peers (rejoin.go), or it is part of a configuration now.
// A node with state must never bootstrap.
func (n *Node) HasState() bool {
	return n.existing || n.rejoin != nil || n.inConfiguration() || n.raft.LastIndex() > 0
}

// IsLeader reports whether this node is the leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == hraft.Leader }

// BootstrapServers starts a new cluster whose first configuration is servers. Every
// node of a -bootstrap-expect group calls it with the same list, which raft accepts as
// one cluster; a node with Raft state refuses.
func (n *Node) BootstrapServers(servers []Member) error {
	if n.HasState() {
		return errors.New("raft: bootstrap refused: this node already has raft state")
	}
	var cfg hraft.Configuration
	for _, s := range servers {
		cfg.Servers = append(cfg.Servers, hraft.Server{Suffrage: hraft.Voter,
			ID: hraft.ServerID(s.ID), Address: hraft.ServerAddress(s.Address)})
	}
	if err := n.raft.BootstrapCluster(cfg).Error(); err != nil {
		return fmt.Errorf("raft: bootstrap: %w", err)
	}
	n.log.Info("bootstrapped a new cluster", "servers", len(servers))
	n.refreshMembers()
	return nil
}

// PeerState is what a server reports of itself to the leader.
type PeerState struct {
	Applied   uint64 // applied index
	Nonce     uint64 // random per process start
	Recovered bool   // Raft state was on disk when the process opened it, or it is rejoining after a rebuild
}

// PeerAppliedIndex asks the node at raft address addr for its applied index; the
// leader uses it to decide when a new server has caught up.
func (n *Node) PeerAppliedIndex(ctx context.Context, addr string) (uint64, error) {
	st, err := n.Peer(ctx, addr)
	return st.Applied, err
}

// Peer asks the node at raft address addr for its state.
func (n *Node) Peer(ctx context.Context, addr string) (PeerState, error) {
	resp, err := n.pool.call(ctx, addr, rpcApplied, nil)
	if err != nil {
		return PeerState{}, err
	}
	var st PeerState
	var k1, k2 int
	st.Applied, k1 = binary.Uvarint(resp)
	if k1 > 0 {
		st.Nonce, k2 = binary.Uvarint(resp[k1:])
	}
	if k1 <= 0 || k2 <= 0 || len(resp) != k1+k2+1 {
		return PeerState{}, errors.New("raft rpc: bad peer state")
	}
	st.Recovered = resp[k1+k2] == 1
	return st, nil
}

// LastIndex is the index of the last entry in this node's log.
func (n *Node) LastIndex() uint64 { return n.raft.LastIndex() }
