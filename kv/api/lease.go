package api

// PathLeases is the prefix of the lease routes:
//
//	POST   /v1/leases                 LeaseGrantRequest → LeaseGrantResponse
//	GET    /v1/leases                 → LeaseListResponse
//	GET    /v1/leases/{id}            → LeaseResponse (remaining TTL, attached keys)
//	POST   /v1/leases/{id}/keepalive  → LeaseKeepAliveResponse
//	DELETE /v1/leases/{id}            → LeaseRevokeResponse (attached keys deleted at one revision)
//
// A lease is attached to a key by PUT /v1/kv/{key}?lease=ID or a txn put's "lease";
// a put without a lease detaches the key. IDs are positive 64-bit integers: keel
// chooses them below 2^53 (exact in JSON numbers everywhere); a client may ask for any
// (etcd's clients do, and leases imported from etcd keep etcd's, most above 2^53,
// which a JavaScript client must not parse as a Number). Leases need every voter to apply command format 3
// (v0.9.0 and later): until then grants and lease puts are refused with 503
// Unavailable, nothing written. Under ACLs a lease is the granting token's policies'
// (docs/api.md "Who may use a lease"): any other token but a management one gets 403
// for it, and a grant needs command format 5.
const PathLeases = "/v1/leases"

// ParamLease attaches the key of a PUT to a lease.
const ParamLease = "lease"

// Lease TTL limits, in seconds.
const (
	MinLeaseTTL = 1
	MaxLeaseTTL = 86400
)

// MaxLeaseID bounds the lease IDs keel chooses itself: 2^53 − 1, exact as a JSON
// number everywhere. A grant that names its ID may use any positive int64.
const MaxLeaseID = 1<<53 - 1

// LeaseGrantRequest is the body of POST /v1/leases.
//
//	{"ttl":10}
type LeaseGrantRequest struct {
	// TTL is the lease's time to live in seconds, MinLeaseTTL..MaxLeaseTTL.
	TTL int64 `json:"ttl"`
	// ID asks for this lease ID (any positive int64); 0 lets the server choose one
	// (1..MaxLeaseID). An ID in use is 409 Conflict.
	ID int64 `json:"id,omitempty"`
}

// LeaseGrantResponse answers POST /v1/leases.
//
//	{"id":7212398123,"ttl":10}
type LeaseGrantResponse struct {
	ID  int64 `json:"id"`
	TTL int64 `json:"ttl"` // seconds
}

// LeaseKeepAliveResponse answers POST /v1/leases/{id}/keepalive: TTL is how long, in
// seconds (rounded down), the lease is guaranteed to live from the answer on, whatever
// leader changes come, if no other keepalive arrives. It may be below the granted TTL
// (never below half of it): send the next keepalive well before it runs out (every
// third of the granted TTL, as the Go client does).
type LeaseKeepAliveResponse struct {
	ID  int64 `json:"id"`
	TTL int64 `json:"ttl"`
	// TTLMillis is TTL in milliseconds, not rounded.
	TTLMillis int64 `json:"ttl_ms"`
}

// LeaseResponse answers GET /v1/leases/{id}.
//
//	{"id":7,"granted_ttl":10,"ttl":6,"ttl_ms":6120,"keys":["svc/a"],"revision":12}
type LeaseResponse struct {
	ID         int64 `json:"id"`
	GrantedTTL int64 `json:"granted_ttl"` // seconds
	// TTL is the time left on the leader, in seconds rounded down (TTLMillis exact).
	TTL       int64    `json:"ttl"`
	TTLMillis int64    `json:"ttl_ms"`
	Keys      []string `json:"keys"`
	Revision  int64    `json:"revision"`
}

// LeaseListResponse answers GET /v1/leases.
type LeaseListResponse struct {
	Leases   []LeaseInfo `json:"leases"`
	Revision int64       `json:"revision"`
}

// LeaseInfo is one lease of a list.
type LeaseInfo struct {
	ID         int64 `json:"id"`
	GrantedTTL int64 `json:"granted_ttl"` // seconds
}

// LeaseRevokeResponse answers DELETE /v1/leases/{id}.
type LeaseRevokeResponse struct {
	// Revision is the revision of the deletes (the current one if no key was attached).
	Revision int64 `json:"revision"`
	// Deleted counts the attached keys deleted.
	Deleted int64 `json:"deleted"`
}
