package api

// Paths of the HTTP API.
const (
	// PathKV is the prefix of single-key and list routes; the key follows it.
	PathKV = "/v1/kv/"
	// PathTxn accepts POST TxnRequest.
	PathTxn = "/v1/txn"
	// PathCompact accepts POST CompactRequest.
	PathCompact = "/v1/compact"
	// PathStatus answers GET with StatusResponse.
	PathStatus = "/v1/status"
	// PathHealth answers 200 while the process is alive.
	PathHealth = "/healthz"
	// PathReady answers 200 only when the node can serve consistent requests.
	PathReady = "/readyz"
)

// Query parameters of the /v1/kv/ routes.
const (
	// ParamRevision reads at this revision (GET, list). Absent or 0 = the latest.
	ParamRevision = "revision"
	// ParamConsistency is "linearizable" (default) or "serializable".
	ParamConsistency = "consistency"
	// ParamRaw = "true" makes GET return the bare value bytes.
	ParamRaw = "raw"
	// ParamPrevRevision makes PUT/DELETE a compare-and-swap on the key's mod revision.
	ParamPrevRevision = "prev_revision"
	// ParamPrefix = "true" makes DELETE remove every key starting with the path key.
	ParamPrefix = "prefix"
	// ParamList = "true" makes GET list the keys starting with the path key.
	ParamList = "list"
	// ParamLimit asks for a page of at most this many items (at most 10000); absent or
	// 0 = the whole list, refused (413 ListTooLarge) when it holds more than 10000
	// items or 32 MiB (the node's MaxListLimit and MaxListBytes).
	ParamLimit = "limit"
	// ParamContinue is the continue token of the previous page of a list.
	ParamContinue = "continue"
	// ParamRevisionMatch says how a list's ?revision=N is matched: "exact" (the
	// default: revision N itself, 410 once compacted) or "not_older_than" (the
	// answering node's latest revision, once it is at least N; 504
	// ResourceVersionTooLarge when the cluster has not reached N).
	ParamRevisionMatch = "revision_match"
)

// Values of ParamRevisionMatch.
const (
	RevisionMatchExact        = "exact"
	RevisionMatchNotOlderThan = "not_older_than"
)

// Values of ParamConsistency.
const (
	// ConsistencyLinearizable reflects every write acknowledged before the request.
	ConsistencyLinearizable = "linearizable"
	// ConsistencySerializable reads the answering node's local state, possibly stale.
	ConsistencySerializable = "serializable"
)

// Headers of a raw GET (?raw=true) response; each holds a decimal number.
const (
	// HeaderRevision is the revision the read was served at.
	HeaderRevision = "X-Keel-Revision"
	// HeaderCreateRevision is the key's create revision.
	HeaderCreateRevision = "X-Keel-Create-Revision"
	// HeaderModRevision is the key's mod revision.
	HeaderModRevision = "X-Keel-Mod-Revision"
	// HeaderVersion is the key's version (writes since creation).
	HeaderVersion = "X-Keel-Version"
)
