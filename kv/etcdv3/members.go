package etcdv3

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// MemberRemove removes the member MemberList names by ID (the Raft server whose node
// ID hashes to it, memberID) as DELETE /v1/agent/peers/ID removes it: for good (with
// TLS its certificates are revoked), for a caller with the peers right, never the
// last voter (FailedPrecondition). An ID that names no member is etcd's member not
// found. The answer lists the members left, as MemberList would (empty for a caller
// without the members right).
func (c etcdCluster) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	if err := c.e.core.RemoveMember(ctx, callerOf(ctx), c.e.nodeOf(r.ID)); err != nil {
		return nil, err
	}
	resp := &pb.MemberRemoveResponse{Header: c.e.header(c.e.revision(ctx))}
	if ml, err := c.MemberList(ctx, nil); err == nil {
		resp.Header = ml.Header
		for _, m := range ml.Members {
			if m.ID != r.ID { // a follower's member list trails the removal by a moment
				resp.Members = append(resp.Members, m)
			}
		}
	}
	return resp, nil
}

// nodeOf is the node ID of the Raft member whose member ID is id, "" when none is.
func (e *Server) nodeOf(id uint64) string {
	for _, m := range e.core.NodeStatus().Members {
		if memberID(m.ID) == id {
			return m.ID
		}
	}
	return ""
}

// MoveLeader hands leadership to the voter MemberList names target_id, as POST
// /v1/agent/transfer-leader does (the core's TransferLeadership: the leadership right,
// where etcd asks for its root role). Any member takes it and keel forwards it to the
// leader; etcd serves it on the leader alone and answers its followers "not leader",
// which etcdctl move-leader avoids by asking the leader. An ID that names no voter is
// etcd's bad leader transferee; moving leadership to the leader is a success. The
// answer comes once the transfer has ended, as etcd's does.
func (m etcdMaintenance) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	to := m.e.nodeOf(r.TargetID)
	if to == "" {
		// No node ID has a space ([A-Za-z0-9._-]): the core checks the caller's right,
		// then the operator finds no such voter.
		to = fmt.Sprintf("etcd member %x", r.TargetID)
	}
	if err := m.e.core.TransferLeadership(ctx, callerOf(ctx), to); err != nil {
		return nil, err
	}
	return &pb.MoveLeaderResponse{Header: m.e.header(m.e.revision(ctx))}, nil
}

// MemberAdd does not map onto keel: etcd registers a member's peer URLs before the
// member starts, a keel node asks to join by itself (keel agent -join ADDR) under the
// node ID and address it chose.
func (c etcdCluster) MemberAdd(context.Context, *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return nil, etcdUnimplemented("MemberAdd (a keel node joins by itself: keel agent -join ADDR)")
}

// MemberUpdate does not map onto keel: a node's Raft address is the one it joined with.
func (c etcdCluster) MemberUpdate(context.Context, *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return nil, etcdUnimplemented("MemberUpdate (a keel node's address is the one it joined with)")
}

// MemberPromote is keel's own: its non-voters (etcd's learners: a node gossip found, a
// rebuilt node) become voters once caught up, by autopilot or their own rejoin.
func (c etcdCluster) MemberPromote(context.Context, *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return nil, etcdUnimplemented("MemberPromote (keel promotes a caught-up non-voter by itself)")
}
