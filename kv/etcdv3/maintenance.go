package etcdv3

import (
	"context"
	"crypto/tls"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/keel-kv/keel/versions"
)

// etcdCluster serves Cluster.MemberList from the Raft configuration, and
// MemberRemove (members.go). The other membership changes are keel's own (keel agent
// -join, autopilot): MemberAdd, MemberUpdate and MemberPromote answer Unimplemented.
type etcdCluster struct {
	pb.UnimplementedClusterServer
	e *Server
}

// URLKey is the record of a node's etcd client URL, written by the node when it
// serves the etcd API (keel's own record: invisible through the KV APIs).
func URLKey(nodeID string) string { return versions.SystemPrefix + "etcd/members/" + nodeID }

// MemberList lists the Raft members to any authenticated caller, as etcd lists them
// to every client (kv.Server.MembersOfAny; GET /v1/agent/members needs the members
// right). A member's client URL is the one its record
// (URLKey) holds: empty for a node that serves no etcd API, or has not written it
// yet (this node's own is then its listener's).
func (c etcdCluster) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	st, v, err := c.e.core.MembersOfAny(ctx, callerOf(ctx)) // etcd: every client may list them
	if err != nil {
		return nil, err
	}
	resp := &pb.MemberListResponse{Header: c.e.header(0)} // etcd answers no revision here
	for _, m := range st.Members {
		pm := &pb.Member{ID: memberID(m.ID), Name: m.ID, PeerURLs: []string{"http://" + m.Address},
			IsLearner: m.Suffrage.String() != "Voter"}
		if kv, err := v.Get([]byte(URLKey(m.ID)), 0); err == nil && len(kv.Value) > 0 {
			pm.ClientURLs = []string{string(kv.Value)}
		} else if m.ID == st.NodeID {
			pm.ClientURLs = []string{c.e.urlScheme() + c.e.Addr()}
		}
		resp.Members = append(resp.Members, pm)
	}
	return resp, nil
}

// etcdMaintenance serves Maintenance.Status, Alarm (none is ever raised), Defragment
// (nothing to do: the store is in memory; the compact right), HashKV and Snapshot (snapshot.go).
// MoveLeader (members.go) hands leadership over. Downgrade answers Unimplemented:
// keel's mixed-release rules (versions) do that job.
type etcdMaintenance struct {
	pb.UnimplementedMaintenanceServer
	e *Server
}

// Status answers a caller the core's status rule lets read the whole status
// (kv.Server.CheckStatus: a valid token, any, while ACLs are enforced, as etcd 3.7
// asks an authenticated user); it refuses a caller without a token as etcd does ("user
// name is empty": a client without credentials gives up at once, where "invalid auth
// token" would make it retry) — etcd's Status has no public view as GET /v1/status has —
// and a bad token as invalid auth token. Version is Version.
// db_size is the bytes of the node's data directory on disk (its Raft log, stable
// store and snapshots; kv.Server.DataSize), and so is db_size_in_use: keel keeps no free
// pages to tell apart. A size that cannot be measured is left 0.
func (m etcdMaintenance) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	if err := m.e.core.CheckStatus(ctx, tokenOf(ctx),
		func() *tls.ConnectionState { return peerTLS(ctx) }); err != nil {
		return nil, err
	}
	st := m.e.core.NodeStatus()
	resp := &pb.StatusResponse{Header: m.e.header(m.e.revision(ctx)), Version: Version, StorageVersion: Version,
		Leader: memberID(st.LeaderID), RaftIndex: st.CommitIndex, RaftTerm: st.Term, RaftAppliedIndex: st.AppliedIndex,
		DowngradeInfo: &pb.DowngradeInfo{}} // no downgrade in progress, as etcd answers
	if size, err := m.e.core.DataSize(); err == nil {
		resp.DbSize, resp.DbSizeInUse = size, size
	}
	for _, mb := range st.Members {
		if mb.ID == st.NodeID {
			resp.IsLearner = mb.Suffrage.String() != "Voter"
		}
	}
	if st.LeaderID == "" {
		resp.Errors = []string{"etcdserver: no leader"}
	}
	return resp, nil
}

// Alarm lists no alarms and accepts no change: keel raises none.
func (m etcdMaintenance) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if r.Action != pb.AlarmRequest_GET {
		return nil, etcdUnsupported("alarm activate and deactivate")
	}
	return &pb.AlarmResponse{Header: m.e.header(m.e.revision(ctx))}, nil
}

// Defragment does nothing: there is no file to defragment. It needs what compaction
// needs (the core's CheckCompact, the compact right), as etcd's needs its root role: a
// token that may not reclaim space is told so, not answered a success.
func (m etcdMaintenance) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	if err := m.e.core.CheckCompact(callerOf(ctx)); err != nil {
		return nil, err
	}
	return &pb.DefragmentResponse{Header: m.e.header(m.e.revision(ctx))}, nil
}

// Hash digests the node's state (python-etcd3's hash()). etcd hashes its backend
// file; keel's state is its keyspace and its history, which HashKV's digest covers, so
// Hash answers the same digest at the latest revision, with the same right.
func (m etcdMaintenance) Hash(ctx context.Context, _ *pb.HashRequest) (*pb.HashResponse, error) {
	v, err := m.e.core.StateView(ctx, callerOf(ctx))
	if err != nil {
		return nil, err
	}
	h := v.Hash()
	return &pb.HashResponse{Header: m.e.header(v.Revision()), Hash: uint32(h ^ h>>32)}, nil
}

// HashKV digests the node's state at its latest revision (fsm.View.Hash, folded to
// 32 bits), for a token with the snapshot right (GET /v1/agent/snapshot's rule); only
// revision 0 or the latest one is served. Nodes at the same revision
// answer the same hash.
func (m etcdMaintenance) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	v, err := m.e.core.StateView(ctx, callerOf(ctx))
	if err != nil {
		return nil, err
	}
	if r.Revision != 0 && r.Revision != v.Revision() {
		return nil, etcdUnsupported(fmt.Sprintf("HashKV at revision %d: only the latest revision (%d)", r.Revision, v.Revision()))
	}
	h := v.Hash()
	compact := v.CompactRevision()
	if compact == 0 {
		compact = -1 // never compacted: etcd's mvcc answers -1
	}
	return &pb.HashKVResponse{Header: m.e.header(v.Revision()), Hash: uint32(h ^ h>>32),
		CompactRevision: compact, HashRevision: v.Revision()}, nil
}
