package api

// PathWatch is the prefix of the watch route; the key (or prefix) follows it:
// GET /v1/watch/{key}?prefix=true&start_revision=R&prev_kv=true&progress=5s.
const PathWatch = "/v1/watch/"

// Query parameters of the watch route (with ParamPrefix and ParamConsistency).
const (
	// ParamStartRevision is the first revision to deliver; absent or 0 = the revision
	// after the latest one. It must be above the compact revision (410 otherwise).
	ParamStartRevision = "start_revision"
	// ParamPrevKV = "true" adds each event's previous version of the key.
	ParamPrevKV = "prev_kv"
	// ParamProgress is the interval of progress lines (a Go duration such as "5s",
	// between 100ms and 1h); absent = no progress lines.
	ParamProgress = "progress"
	// ParamRequireLeader = "true" (etcd's WithRequireLeader): a node without leader
	// contact refuses the watch (503 NoLeader), and ends it with an END line of reason
	// NoLeader within a tick of losing contact, so the client resumes on a node that
	// is not cut off rather than fall behind unnoticed until the partition heals.
	ParamRequireLeader = "require_leader"
)

// HeaderRequireLeader: "true" asks the same as ParamRequireLeader. The Go client sends
// the header, which a node of a release before it ignores (the watch then runs without
// the requirement), where the parameter would be refused as unknown.
const HeaderRequireLeader = "Keel-Require-Leader"

// ContentTypeWatch is the content type of a watch stream: one JSON WatchEvent per line.
const ContentTypeWatch = "application/x-ndjson"

// Types of a WatchEvent.
const (
	// EventPut: the key was created or updated; KV is its new version.
	EventPut = "PUT"
	// EventDelete: the key was deleted; KV holds only the key and, as mod_revision,
	// the delete's revision.
	EventDelete = "DELETE"
	// EventProgress: no event is pending; every event of a revision <= Revision has
	// been sent. Revision is the answering node's applied revision as the watch sees it.
	EventProgress = "PROGRESS"
	// EventEnd is the last line of a stream the server ends: Reason says why, Revision
	// is the last revision whose events were all sent (resume with start_revision =
	// Revision+1), CompactRevision is set with ReasonResourceExpired.
	EventEnd = "END"
)

// ReasonSlowWatcher (END line): the watcher's buffer filled because the stream was
// not read fast enough; resume from Revision+1 (the server replays it from history).
const ReasonSlowWatcher = "SlowWatcher"

// ReasonRestored (END line): the answering node installed a snapshot; resume from
// Revision+1, on this node or another.
const ReasonRestored = "Restored"

// An END line of reason ReasonNoLeader (errors.go): the watch required a leader and
// the node lost contact with it; resume from Revision+1 on another node.

// WatchEvent is one line of a watch stream.
//
// Events come in revision order with no gap and no duplicate: the events of one
// revision (one transaction) are consecutive lines, in key order, all with the same
// Revision, and are written and flushed together.
//
//	{"type":"PUT","kv":{"key":"a/1","value":"eA==",...},"revision":7}
//	{"type":"DELETE","kv":{"key":"a/2","value":"","mod_revision":7,...},"prev_kv":{...},"revision":7}
//	{"type":"PROGRESS","revision":9}
//	{"type":"END","reason":"SlowWatcher","message":"...","revision":12}
type WatchEvent struct {
	Type     string `json:"type"`
	KV       *KV    `json:"kv,omitempty"`
	PrevKV   *KV    `json:"prev_kv,omitempty"`
	Revision int64  `json:"revision"`
	// Remaining counts the events of the same revision on the lines that follow
	// (0 on a revision's last event): a reader that lost its connection mid-revision
	// knows that revision is incomplete.
	Remaining int `json:"remaining,omitempty"`
	// END only.
	Reason          string `json:"reason,omitempty"`
	Message         string `json:"message,omitempty"`
	CompactRevision int64  `json:"compact_revision,omitempty"`
}
