package api

// Operator routes of one node, served by the agent next to the kv API:
//
//	GET    /v1/agent/members           → MembersResponse: raft configuration joined with gossip
//	DELETE /v1/agent/peers/{id}        → RemovePeerResponse: remove a server from the raft configuration
//	POST   /v1/agent/transfer-leader   body = TransferLeaderRequest → TransferLeaderResponse
//	POST   /v1/agent/leave             → LeaveResponse; the node leaves the cluster and stops
//	GET    /v1/agent/snapshot          → the state machine's snapshot (application/octet-stream)
//	POST   /v1/agent/snapshot          body = a saved snapshot → SnapshotRestoreResponse (leader only);
//	                                   ?import=etcd[&skip_unholdable=true]: body = a bare fsm stream made from an etcd snapshot
//	PUT    /v1/agent/schema            body = schema YAML (?file=NAME&force=true) → the change applied
//	GET    /v1/versions                → the storage-version report (package versions' Report)
//	GET    /livez                      → {"status":"ok"} while the process serves
//	GET    /metrics                    → Prometheus text format
const (
	PathAgentMembers        = "/v1/agent/members"
	PathAgentPeers          = "/v1/agent/peers/" // the server ID follows
	PathAgentTransferLeader = "/v1/agent/transfer-leader"
	PathAgentLeave          = "/v1/agent/leave"
	PathAgentSnapshot       = "/v1/agent/snapshot"
	PathAgentSchema         = "/v1/agent/schema"
	PathVersions            = "/v1/versions"
	PathLive                = "/livez"
	PathMetrics             = "/metrics"
)

// Reasons of PUT /v1/agent/schema. Either way nothing changed.
const (
	// ReasonBadSchema (400): the schema file does not parse or is not a valid schema;
	// the message reads "NAME:LINE: problem".
	ReasonBadSchema = "BadSchema"
	// ReasonSchemaChangeRefused (409): the new schema would strand stored objects, or
	// the node was started without -schema.
	ReasonSchemaChangeRefused = "SchemaChangeRefused"
)

// MemberInfo is one server of the cluster as GET /v1/agent/members reports it (one row
// of `keel members`).
type MemberInfo struct {
	ID          string `json:"id"`
	RaftAddr    string `json:"raft_addr,omitempty"`
	HTTPAddr    string `json:"http_addr,omitempty"`
	GossipAddr  string `json:"gossip_addr,omitempty"`
	Gossip      string `json:"gossip"`   // alive, dead, left, or none (no gossip)
	Suffrage    string `json:"suffrage"` // Voter, Nonvoter, or none (not in the raft configuration)
	Leader      bool   `json:"leader"`
	Release     string `json:"release,omitempty"`
	AppliedIdx  uint64 `json:"applied_index,omitempty"`
	TrailingBy  uint64 `json:"trailing_by"`
	LastContact string `json:"last_contact,omitempty"`
}

// MembersResponse is the answer to GET /v1/agent/members.
type MembersResponse struct {
	Members []MemberInfo `json:"members"`
}

// RemovePeerResponse is the answer to DELETE /v1/agent/peers/{id}.
type RemovePeerResponse struct {
	Removed string `json:"removed"`
}

// TransferLeaderRequest is the body of POST /v1/agent/transfer-leader; an empty ID
// lets the leader pick the most up-to-date voter.
type TransferLeaderRequest struct {
	ID string `json:"id"`
}

// TransferLeaderResponse is the answer to POST /v1/agent/transfer-leader.
type TransferLeaderResponse struct {
	Transferred bool   `json:"transferred"`
	To          string `json:"to"`
}

// LeaveResponse is the answer to POST /v1/agent/leave.
type LeaveResponse struct {
	NodeID string `json:"node_id"`
	Left   bool   `json:"left"`
}

// SnapshotRestoreResponse is the answer to POST /v1/agent/snapshot.
type SnapshotRestoreResponse struct {
	Restored string `json:"restored"` // "N bytes"
	// Import says what an etcd import (?import=etcd) restored; nil for a restore.
	Import *ImportSummary `json:"import,omitempty"`
}

// ContentTypeSnapshot is the media type of a snapshot body.
const ContentTypeSnapshot = "application/octet-stream"

// ImportSummary is what an etcd import restored: keys (with Versions versions since
// etcd's compaction) and leases, at etcd's revision and compact revision; what it left
// out (skip_unholdable=true); and the cluster's own records it kept.
type ImportSummary struct {
	Keys            int   `json:"keys"`
	Versions        int   `json:"versions"`
	Leases          int   `json:"leases"`
	Revision        int64 `json:"revision"`
	CompactRevision int64 `json:"compact_revision"`
	SkippedKeys     int   `json:"skipped_keys"`
	SkippedLeases   int   `json:"skipped_leases"`
	KeptRecords     int   `json:"kept_records"`
}
