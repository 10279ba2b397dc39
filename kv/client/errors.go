package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"

	"github.com/keel-kv/keel/kv/api"
)

// Error is the server's answer to a failed request: HTTP status Code, machine-readable
// Reason (the api.Reason constants), Message, and, on a 410 from a list, an
// inconsistent Continue token. It is api.Error itself, so errors.As works with either.
type Error = api.Error

// asError returns the *Error in err's chain, if any.
func asError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// IsNotFound reports whether err is a 404: the key does not exist at the revision read.
func IsNotFound(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusNotFound
}

// IsConflict reports whether err is a 409: a compare-and-swap guard failed and nothing
// was written.
func IsConflict(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusConflict
}

// IsCompacted reports whether err is a 410 ResourceExpired: the revision asked for is
// compacted. For a list, the *Error's Continue token resumes the scan inconsistently
// at the latest revision (see PagerOptions.AllowInconsistent).
func IsCompacted(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusGone
}

// IsTooLarge reports whether err is a 413: a value or body exceeds the server's limit.
func IsTooLarge(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusRequestEntityTooLarge
}

// IsBadRequest reports whether err is a 400: bad key, parameter, body or token.
func IsBadRequest(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusBadRequest
}

// IsDuplicateKey reports whether err is a 400 DuplicateKey: one branch of a
// transaction writes a key twice (two puts, or a put under a delete of the same
// branch). Nothing was written; the message names the key.
func IsDuplicateKey(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusBadRequest && e.Reason == api.ReasonDuplicateKey
}

// IsRetriable reports whether the same request may succeed later: a 503 or 504, or a
// transport failure. The client has already retried what was safe; for a write this
// can also mean its outcome is unknown, so retry it only if it is idempotent.
func IsRetriable(err error) bool {
	if e, ok := asError(err); ok {
		return e.Code == http.StatusServiceUnavailable || e.Code == http.StatusGatewayTimeout
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, errBrokenResponse) ||
		errors.Is(err, errStreamLost) || notSent(err)
}

// notApplied: a 503 whose reason says the request was not applied.
func notApplied(e *Error) bool {
	return e.Reason == api.ReasonUnavailable || e.Reason == api.ReasonNoLeader
}

// isNoLeader: the node answered 503 NoLeader: it is cut off from the leader, and
// another node may not be.
func isNoLeader(err error) bool {
	e, ok := asError(err)
	return ok && e.Code == http.StatusServiceUnavailable && e.Reason == api.ReasonNoLeader
}

// errBrokenResponse marks a response that ended before its body could be read.
var errBrokenResponse = errors.New("client: broken response")

// notSent reports whether a transport error proves the request never reached a
// server: the connection could not be made.
func notSent(err error) bool {
	var ns *notSentError
	if errors.As(err, &ns) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// nodeTrouble reports whether err says more about the node than about the request: no
// answer (a transport error or a timeout) or a 503/504 (the node is cut off from the
// leader or could not learn an outcome). Another node may do better.
func nodeTrouble(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	if e, ok := asError(err); ok {
		return e.Code == http.StatusServiceUnavailable || e.Code == http.StatusGatewayTimeout
	}
	return true
}

// safeToRetry decides whether a failed attempt may be repeated. A write is repeated
// only when it is known not to have been applied.
func safeToRetry(err error, write bool) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if e, ok := asError(err); ok {
		switch {
		case e.Code == http.StatusServiceUnavailable && notApplied(e):
			return true
		case e.Code == http.StatusServiceUnavailable, e.Code == http.StatusGatewayTimeout:
			return !write
		}
		return false
	}
	if notSent(err) {
		return true
	}
	return !write && IsRetriable(err)
}
