package api

// StatusResponse answers GET /v1/status with the answering node's view of the cluster.
// It is served from local state and never waits for the leader.
//
//	{"node_id":"n1","state":"Leader","leader_id":"n1","leader_addr":"10.0.0.1:7371",
//	 "term":3,"revision":42,"compact_revision":10,"applied_index":57,
//	 "commit_index":57,"last_log_index":57,"members":[{"id":"n1",...}]}
type StatusResponse struct {
	// NodeID is the answering node's ID.
	NodeID string `json:"node_id"`
	// Release is the keel release the answering node runs (keel version).
	Release string `json:"release,omitempty"`
	// RaftAddr is the answering node's advertised Raft address: what -join takes.
	RaftAddr string `json:"raft_addr,omitempty"`
	// State is the node's raft state: "Leader", "Follower", "Candidate" or "Shutdown".
	State string `json:"state"`
	// LeaderID is the ID of the leader this node knows, empty when none.
	LeaderID string `json:"leader_id"`
	// LeaderAddr is the leader's raft address, empty when none.
	LeaderAddr string `json:"leader_addr"`
	// Term is the node's current raft term.
	Term uint64 `json:"term"`
	// Revision is the store revision this node has applied.
	Revision int64 `json:"revision"`
	// CompactRevision is the store's compact revision on this node.
	CompactRevision int64 `json:"compact_revision"`
	// AppliedIndex is the last raft log index applied to this node's store.
	AppliedIndex uint64 `json:"applied_index"`
	// CommitIndex is the last raft log index this node knows is committed.
	CommitIndex uint64 `json:"commit_index"`
	// LastLogIndex is the last index in this node's raft log.
	LastLogIndex uint64 `json:"last_log_index"`
	// Members is the raft configuration as this node sees it.
	Members []Member `json:"members"`
	// TLS says whether this node's ports use TLS (HTTPS, mutual TLS on Raft).
	TLS bool `json:"tls"`
	// Insecure is true when the node was started with -insecure: plain text on every
	// port, anyone who reaches a port can talk to it.
	Insecure bool `json:"insecure,omitempty"`
	// ACL says whether this node's view of the cluster has ACLs bootstrapped, and its
	// -acl-default (absent from releases without ACLs).
	ACL *ACLStatus `json:"acl,omitempty"`
	// Restricted is true when this is the public view, the answer to a caller without
	// a token while ACLs are enforced: TLS, Insecure and ACL alone (what a client needs
	// to authenticate); the node's identity, release, leader and members need a valid
	// token (kv.Server.StatusFor).
	Restricted bool `json:"restricted,omitempty"`
}

// Member is one server of the raft configuration.
type Member struct {
	// ID is the member's node ID.
	ID string `json:"id"`
	// Address is the member's raft address.
	Address string `json:"address"`
	// Suffrage is "Voter", "Nonvoter" or "Staging".
	Suffrage string `json:"suffrage"`
	// Leader is true for the member this node believes is the leader.
	Leader bool `json:"leader"`
}

// HealthResponse is the body of a 200 from /healthz or /readyz.
//
//	{"status":"ok"}
type HealthResponse struct {
	// Status is "ok".
	Status string `json:"status"`
}
