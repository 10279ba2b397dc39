package api

// Access control (ACL) wire types. A token is bound to policies; a policy grants read
// or write on key prefixes, read or write on typed resources (group/resource), and
// operator rights. Requests carry the token's secret as `Authorization: Bearer
// SECRET`; the stream protocol takes it on the upgrade request.

import "time"

// Paths of the ACL routes.
const (
	// PathACLBootstrap answers POST with the first management token (ACLToken with its
	// secret), once per cluster; 409 afterwards.
	PathACLBootstrap = "/v1/acl/bootstrap"
	// PathACLTokens accepts GET (list, secrets never shown) and POST ACLTokenRequest.
	PathACLTokens = "/v1/acl/tokens"
	// PathACLTokenSelf answers GET with the calling token (without its secret).
	PathACLTokenSelf = "/v1/acl/token/self"
	// PathACLPolicies accepts GET (list); PathACLPolicies + "/{name}" PUT ACLPolicy,
	// GET and DELETE.
	PathACLPolicies = "/v1/acl/policies"
)

// HeaderAuthorization carries the token: "Bearer " + secret.
const HeaderAuthorization = "Authorization"

// Access levels of key and resource rules. Write includes read; write-only (key rules
// only) does not.
const (
	AccessRead  = "read"
	AccessWrite = "write"
	// AccessWriteOnly grants writes and no read: etcd's WRITE permission (the etcd
	// door's roles).
	AccessWriteOnly = "write-only"
)

// Operator rights. A policy's Operator list holds any of them, or "*" for all.
const (
	RightCompact       = "compact"        // POST /v1/compact
	RightMembers       = "members"        // GET /v1/agent/members, /v1/versions
	RightPeers         = "peers"          // remove a peer, make a node leave
	RightLeadership    = "leadership"     // transfer leadership
	RightSnapshot      = "snapshot"       // snapshot save (a restore needs RightAll: management)
	RightSchema        = "schema"         // apply a schema
	RightMigrations    = "migrations"     // storage-version migrations and their settings
	RightKeyMigrations = "key-migrations" // phased key migrations
	RightACL           = "acl"            // tokens and policies
	RightAll           = "*"
)

// OperatorRights lists every operator right (RightAll excluded).
var OperatorRights = []string{RightCompact, RightMembers, RightPeers, RightLeadership, RightSnapshot,
	RightSchema, RightMigrations, RightKeyMigrations, RightACL}

// ManagementPolicy is the name of the policy bootstrap creates: every right.
const ManagementPolicy = "global-management"

// ACLKeyRule grants Access on a set of keys: every key starting with Prefix ("" =
// every key) when Key is empty; otherwise the key range etcd's permissions name (the
// etcd door's roles, docs/etcd.md), with Prefix empty:
//
//	{"key": "k"}                  the key k alone
//	{"key": "a", "end": "m"}      every key of [a, m)
//	{"key": "a", "end": "\u0000"} every key from a on (etcd's range end "\x00")
//
// A prefix rule is the range [Prefix, the prefix's end): etcdctl's --prefix sends that
// range, and the etcd door stores it as such.
type ACLKeyRule struct {
	Prefix string `json:"prefix"`
	Key    string `json:"key,omitempty"`
	End    string `json:"end,omitempty"`
	Access string `json:"access"`
}

// ACLFromKey is the End of a rule that runs from its Key to the end of the keyspace.
const ACLFromKey = "\x00"

// ACLResourceRule grants Access on the objects of a typed resource; "*" matches any
// group or resource.
type ACLResourceRule struct {
	Group    string `json:"group"`
	Resource string `json:"resource"`
	Access   string `json:"access"`
}

// ACLPolicy is a named set of rights.
type ACLPolicy struct {
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Keys        []ACLKeyRule      `json:"keys,omitempty"`
	Resources   []ACLResourceRule `json:"resources,omitempty"`
	Operator    []string          `json:"operator,omitempty"`
	// Revision is the policy record's mod revision (GET); on PUT a non-zero Revision
	// makes the write a compare-and-swap.
	Revision int64 `json:"revision,omitempty"`
}

// ACLPoliciesResponse answers GET /v1/acl/policies.
type ACLPoliciesResponse struct {
	Policies []ACLPolicy `json:"policies"`
}

// ACLTokenRequest creates a token (POST /v1/acl/tokens).
type ACLTokenRequest struct {
	Description string   `json:"description,omitempty"`
	Policies    []string `json:"policies"`
	// ExpirationTTL, when set, is how long the token lives (a Go duration: "30m",
	// "24h"; at least MinTokenTTL): after it every request with it is a 401. Empty:
	// the token does not expire.
	ExpirationTTL string `json:"expiration_ttl,omitempty"`
}

// MinTokenTTL is the shortest ExpirationTTL.
const MinTokenTTL = time.Second

// ACLToken describes a token. SecretID is set only in the answer that created it
// (bootstrap or create): keel stores only its SHA-256.
type ACLToken struct {
	AccessorID  string   `json:"accessor_id"`
	SecretID    string   `json:"secret_id,omitempty"`
	Description string   `json:"description,omitempty"`
	Policies    []string `json:"policies"`
	CreateTime  string   `json:"create_time"`
	// ExpirationTime (RFC 3339, UTC) is when the token stops working; empty: never.
	ExpirationTime string `json:"expiration_time,omitempty"`
	// User is the etcd user the token was issued to (the etcd door's Authenticate):
	// its rights are the user's roles' (Policies is empty).
	User string `json:"user,omitempty"`
}

// ACLTokensResponse answers GET /v1/acl/tokens.
type ACLTokensResponse struct {
	Tokens []ACLToken `json:"tokens"`
}

// ACLStatus is the acl part of /v1/status.
type ACLStatus struct {
	// Default is this node's -acl-default ("allow" or "deny"): what a cluster without
	// a bootstrapped ACL system allows.
	Default      string `json:"default"`
	Bootstrapped bool   `json:"bootstrapped"`
}
