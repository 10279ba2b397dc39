package api

import "fmt"

// Error is the body of every failed request.
//
//	{"code":410,"reason":"ResourceExpired","message":"...","continue":"AQ..."}
type Error struct {
	// Code is the HTTP status code.
	Code int `json:"code"`
	// Reason is one of the Reason constants; switch on it, never on Message.
	Reason string `json:"reason"`
	// Message says what went wrong for a human.
	Message string `json:"message"`
	// Continue is set only on a 410 ResourceExpired answer to a list: an *inconsistent*
	// continue token that resumes the scan from the same next key at the latest
	// revision. Using it gives up the single-revision guarantee of the scan.
	Continue string `json:"continue,omitempty"`
	// CompactRevision is set on a 410 ResourceExpired answer to a watch: the store's
	// compact revision. Restart with a list, then watch from the list's revision + 1.
	CompactRevision int64 `json:"compact_revision,omitempty"`
}

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("keel: %d %s: %s", e.Code, e.Reason, e.Message)
}

// Reasons: the machine-readable cause of an Error.
const (
	// ReasonBadRequest (400): a bad key, parameter or body. Nothing was changed.
	ReasonBadRequest = "BadRequest"
	// ReasonInvalidContinueToken (400): the continue token is garbled, tampered with,
	// from another cluster, or for another range. Start the scan again.
	ReasonInvalidContinueToken = "InvalidContinueToken"
	// ReasonFutureRevision (400): the requested revision is newer than the store's.
	ReasonFutureRevision = "FutureRevision"
	// ReasonDuplicateKey (400): one branch of a transaction writes a key twice: two
	// puts of it, or a put of a key that a delete or delete_range of the same branch
	// also covers (etcd's "duplicate key given in txn request"). The message names the
	// key. Reads may repeat freely, and so may deletes. Nothing was changed.
	ReasonDuplicateKey = "DuplicateKey"
	// ReasonReservedPrefix (403): a /v1/kv write (put, delete, delete by prefix or
	// range, txn write; HTTP or stream) touches keys that only keel or the resource
	// API (/apis/...) may write: a typed resource's prefix or keel's system prefix.
	// Nothing was written.
	ReasonReservedPrefix = "ReservedPrefix"
	// ReasonUnauthorized (401): the request carries no token, or one keel does not
	// know (malformed, deleted, of another cluster), where ACLs require one.
	ReasonUnauthorized = "Unauthorized"
	// ReasonForbidden (403): the token is valid but lacks the right the request needs;
	// the message names that right. Nothing was changed.
	ReasonForbidden = "Forbidden"
	// ReasonAlreadyBootstrapped (409): the ACL system of the cluster was bootstrapped
	// before; the management token was shown then and is not shown again.
	ReasonAlreadyBootstrapped = "AlreadyBootstrapped"
	// ReasonNotFound (404): no such key, or no such route.
	ReasonNotFound = "NotFound"
	// ReasonLeaseNotFound (404): the lease named (keepalive, revoke, a put's lease) does
	// not exist: never granted, revoked or expired. Nothing was written.
	ReasonLeaseNotFound = "LeaseNotFound"
	// ReasonMethodNotAllowed (405): the route exists but not for this method.
	ReasonMethodNotAllowed = "MethodNotAllowed"
	// ReasonConflict (409): a compare-and-swap guard failed; nothing was written.
	ReasonConflict = "Conflict"
	// ReasonDowngraded (409): storing the object would lose values: the version
	// written through (or the encoding version) cannot hold some of them, or the
	// body was read with metadata.downgraded. Nothing was written; ?force=true
	// accepts the loss.
	ReasonDowngraded = "Downgraded"
	// ReasonResourceExpired (410): the requested revision has been compacted.
	ReasonResourceExpired = "ResourceExpired"
	// ReasonTooManyWatches (429): the node serves its maximum of watches; retry later
	// or on another node.
	ReasonTooManyWatches = "TooManyWatches"
	// ReasonTooManyLeases (429): a lease grant over the cluster's -max-leases or the
	// token's -max-leases-per-token; revoke leases or let them expire, then retry.
	ReasonTooManyLeases = "TooManyLeases"
	// ReasonTooManyRequests (429): the node runs its maximum of requests at once;
	// nothing was done. Retry later or on another node.
	ReasonTooManyRequests = "TooManyRequests"
	// ReasonTooManyConnections (429): the node holds its maximum of client
	// connections; the connection is closed after the answer.
	ReasonTooManyConnections = "TooManyConnections"
	// ReasonClientCertRequired (401): the node verifies clients (-verify-clients) and
	// the request came without a client certificate of the cluster CA.
	ReasonClientCertRequired = "ClientCertRequired"
	// ReasonTooLarge (413): the value or body exceeds the server's limit.
	ReasonTooLarge = "TooLarge"
	// ReasonListTooLarge (413): a list that did not ask for pages (no ?limit=) holds
	// more items or bytes than the node serves in one answer (the message names the
	// bound). Nothing is wrong with the request otherwise: ask for pages with ?limit=
	// and follow the continue tokens.
	ReasonListTooLarge = "ListTooLarge"
	// ReasonHeadersTooLarge (431): the request's header exceeds the server's limit.
	// The connection is closed after the answer.
	ReasonHeadersTooLarge = "HeadersTooLarge"
	// ReasonNotImplemented (501): a Transfer-Encoding the server does not implement.
	ReasonNotImplemented = "NotImplemented"
	// ReasonUnavailable (503): not ready (or, from releases before NoLeader, no
	// leader). The request was not applied; any request, writes included, may be
	// retried (see Retry-After).
	ReasonUnavailable = "Unavailable"
	// ReasonNoLeader (503): the answering node has no contact with a leader (it is cut
	// off by a partition, or an election is under way) and gave up waiting for one
	// after about half a second. The request was not applied; any request, writes
	// included, may be retried at once on another node, or here after Retry-After.
	ReasonNoLeader = "NoLeader"
	// ReasonShuttingDown (503): the answering node is shutting down. A write's outcome
	// is unknown; reads may be retried on another node.
	ReasonShuttingDown = "ShuttingDown"
	// ReasonLeadershipLost (503): the leader stepped down while the write was in
	// flight; its outcome is unknown. Reads may be retried; check before rewriting.
	ReasonLeadershipLost = "LeadershipLost"
	// ReasonTimeout (504): the request did not finish in time; a write's outcome is
	// unknown (it may still be applied). Reads may be retried.
	ReasonTimeout = "Timeout"
	// ReasonResourceVersionTooLarge (504): a list asked for a revision (exact or not
	// older than) that the cluster has not reached yet (Kubernetes' "Too large
	// resource version"). Retry later, or with an older revision.
	ReasonResourceVersionTooLarge = "ResourceVersionTooLarge"
	// ReasonInternal (500): a bug or corrupt data on the server.
	ReasonInternal = "Internal"
)
