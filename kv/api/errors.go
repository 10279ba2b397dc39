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
	// ReasonNotFound (404): no such key, or no such route.
	ReasonNotFound = "NotFound"
	// ReasonMethodNotAllowed (405): the route exists but not for this method.
	ReasonMethodNotAllowed = "MethodNotAllowed"
	// ReasonConflict (409): a compare-and-swap guard failed; nothing was written.
	ReasonConflict = "Conflict"
	// ReasonResourceExpired (410): the requested revision has been compacted.
	ReasonResourceExpired = "ResourceExpired"
	// ReasonTooLarge (413): the value or body exceeds the server's limit.
	ReasonTooLarge = "TooLarge"
	// ReasonUnavailable (503): no leader, shutting down or not ready. The request was
	// not applied; any request, writes included, may be retried (see Retry-After).
	ReasonUnavailable = "Unavailable"
	// ReasonShuttingDown (503): the answering node is shutting down. A write's outcome
	// is unknown; reads may be retried on another node.
	ReasonShuttingDown = "ShuttingDown"
	// ReasonLeadershipLost (503): the leader stepped down while the write was in
	// flight; its outcome is unknown. Reads may be retried; check before rewriting.
	ReasonLeadershipLost = "LeadershipLost"
	// ReasonTimeout (504): the request did not finish in time; a write's outcome is
	// unknown (it may still be applied). Reads may be retried.
	ReasonTimeout = "Timeout"
	// ReasonInternal (500): a bug or corrupt data on the server.
	ReasonInternal = "Internal"
)
