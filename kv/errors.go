package kv

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/internal/ctoken"
	"github.com/keel-kv/keel/migrate"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/versions"
)

// Sentinel errors of the HTTP layer. Every one of them means nothing was changed.
var (
	// ErrInvalidKey: a key is empty, longer than MaxKeyBytes, or not UTF-8.
	ErrInvalidKey = errors.New("kv: invalid key")
	// ErrEmptyKey: a key is empty; an ErrInvalidKey (400 on HTTP), which the etcd door
	// answers as etcd does (key is not provided).
	ErrEmptyKey = fmt.Errorf("%w: key is empty", ErrInvalidKey)
	// ErrInvalidParam: a query parameter is unknown, malformed or out of range.
	ErrInvalidParam = errors.New("kv: invalid parameter")
	// ErrInvalidBody: a JSON body cannot be decoded or fails validation.
	ErrInvalidBody = errors.New("kv: invalid request body")
	// ErrInvalidContinueToken: a continue token is garbled, tampered with, signed by
	// another cluster, or used for a range it was not issued for. It is the codec's
	// ctoken.ErrInvalid (one value under two names).
	ErrInvalidContinueToken = ctoken.ErrInvalid
	// ErrTooLarge: a value or body exceeds its configured limit.
	ErrTooLarge = errors.New("kv: request too large")
	// ErrConflict: a compare-and-swap guard failed; nothing was written.
	ErrConflict = errors.New("kv: compare failed")
	// ErrDowngraded: storing an object would lose values (see versions.Write); nothing
	// was written. ?force=true accepts the loss.
	ErrDowngraded = errors.New("kv: write would lose data")
	// ErrReservedPrefix: a KV API write touches a typed resource's keys or keel's own
	// records; nothing was written.
	ErrReservedPrefix = errors.New("kv: reserved key prefix")
	// ErrNotReady: the node cannot serve the request yet (no cluster secret, a
	// readiness check failing).
	ErrNotReady = errors.New("kv: node not ready")
	// ErrNoRoute: no route matches the path.
	ErrNoRoute = errors.New("kv: no such route")
	// ErrMethodNotAllowed: the route exists but not for the request's method.
	ErrMethodNotAllowed = errors.New("kv: method not allowed")
	// ErrTooManyLeases (leaselimits.go) is declared beside the lease bounds.
	// ErrTooManyWatches: the node already serves Config.MaxWatches watches.
	ErrTooManyWatches = errors.New("kv: too many watches")
	// ErrUnauthorized: ACLs are enforced and the request carries no valid token. It is
	// the ACL engine's acl.ErrUnauthorized (one value under two names).
	ErrUnauthorized = acl.ErrUnauthorized
	// ErrClientCertRequired: the node requires a client certificate (RequireClientCert)
	// and the request came without one the cluster CA verified (CheckClientCert). It is
	// an ErrUnauthorized, answered 401 with its own reason.
	ErrClientCertRequired = fmt.Errorf("%w: client certificate required", ErrUnauthorized)
	// ErrForbidden: the request's token lacks the right the request needs. It is the
	// ACL engine's acl.ErrForbidden (one value under two names).
	ErrForbidden = acl.ErrForbidden
	// ErrAlreadyBootstrapped: the cluster's ACL system was bootstrapped before.
	ErrAlreadyBootstrapped = errors.New("kv: acl system already bootstrapped")
)

// expiredError is a 410 that carries an inconsistent continue token.
type expiredError struct {
	err  error
	cont string
}

func (e *expiredError) Error() string { return e.err.Error() }
func (e *expiredError) Unwrap() error { return e.err }

// classify maps an error to its HTTP status and api reason. It is the only place that
// decides statuses; order matters where sentinels could overlap.
func classify(err error) (code int, reason string) {
	switch {
	case errors.Is(err, fsm.ErrSlowWatcher): // a watch's end: resume from its revision
		return http.StatusTooManyRequests, api.ReasonSlowWatcher
	case errors.Is(err, fsm.ErrWatchRestored): // a watch's end: resume on another node or later
		return http.StatusServiceUnavailable, api.ReasonRestored
	case errors.Is(err, ErrInvalidContinueToken):
		return http.StatusBadRequest, api.ReasonInvalidContinueToken
	case errors.Is(err, ErrTooLargeResourceVersion):
		return http.StatusGatewayTimeout, api.ReasonResourceVersionTooLarge
	case errors.Is(err, fsm.ErrFutureRevision):
		return http.StatusBadRequest, api.ReasonFutureRevision
	case errors.Is(err, fsm.ErrDuplicateKey):
		return http.StatusBadRequest, api.ReasonDuplicateKey
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidParam),
		errors.Is(err, ErrInvalidBody), errors.Is(err, fsm.ErrInvalidCommand),
		errors.Is(err, fsm.ErrTooManyOps), errors.Is(err, versions.ErrBadObject),
		errors.Is(err, versions.ErrConversion), errors.Is(err, migrate.ErrBadSettings):
		return http.StatusBadRequest, api.ReasonBadRequest
	case errors.Is(err, versions.ErrBadSchema):
		return http.StatusBadRequest, api.ReasonBadSchema
	case errors.Is(err, versions.ErrSchemaChange):
		return http.StatusConflict, api.ReasonSchemaChangeRefused
	case errors.Is(err, migrate.ErrPhaseRefused):
		return http.StatusConflict, api.ReasonPhaseRefused
	case errors.Is(err, migrate.ErrNoCommonVersion):
		return http.StatusConflict, api.ReasonNoCommonVersion
	case errors.Is(err, migrate.ErrNotRunning):
		return http.StatusConflict, api.ReasonNotRunning
	case errors.Is(err, ErrClientCertRequired): // an ErrUnauthorized: first
		return http.StatusUnauthorized, api.ReasonClientCertRequired
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, api.ReasonUnauthorized
	case errors.Is(err, ErrForbidden), errors.Is(err, raft.ErrCallerRefused):
		return http.StatusForbidden, api.ReasonForbidden
	case errors.Is(err, ErrAlreadyBootstrapped):
		return http.StatusConflict, api.ReasonAlreadyBootstrapped
	case errors.Is(err, ErrReservedPrefix):
		return http.StatusForbidden, api.ReasonReservedPrefix
	case errors.Is(err, ErrDowngraded):
		return http.StatusConflict, api.ReasonDowngraded
	case errors.Is(err, fsm.ErrLeaseNotFound):
		return http.StatusNotFound, api.ReasonLeaseNotFound
	case errors.Is(err, ErrLastVoter), errors.Is(err, ErrNotVoter):
		return http.StatusBadRequest, api.ReasonBadRequest
	case errors.Is(err, fsm.ErrKeyNotFound), errors.Is(err, ErrNoRoute), errors.Is(err, ErrNotMember):
		return http.StatusNotFound, api.ReasonNotFound
	case errors.Is(err, ErrMethodNotAllowed):
		return http.StatusMethodNotAllowed, api.ReasonMethodNotAllowed
	case errors.Is(err, ErrConflict), errors.Is(err, migrate.ErrConflict):
		return http.StatusConflict, api.ReasonConflict
	case errors.Is(err, fsm.ErrCompacted):
		return http.StatusGone, api.ReasonResourceExpired
	case errors.Is(err, ErrTooManyWatches):
		return http.StatusTooManyRequests, api.ReasonTooManyWatches
	case errors.Is(err, ErrTooManyLeases):
		return http.StatusTooManyRequests, api.ReasonTooManyLeases
	case errors.Is(err, ErrTooManyRequests):
		return http.StatusTooManyRequests, api.ReasonTooManyRequests
	case errors.Is(err, ErrTooManyConnections):
		return http.StatusTooManyRequests, api.ReasonTooManyConnections
	case errors.Is(err, ErrListTooLarge):
		return http.StatusRequestEntityTooLarge, api.ReasonListTooLarge
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge, api.ReasonTooLarge
	case errors.Is(err, raft.ErrNoLeader):
		return http.StatusServiceUnavailable, api.ReasonNoLeader
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, ErrNotReady), errors.Is(err, raft.ErrFormatNotAgreed),
		errors.Is(err, versions.ErrNotRegistered), errors.Is(err, versions.ErrNoCommonEncoding),
		errors.Is(err, versions.ErrUndecodable):
		return http.StatusServiceUnavailable, api.ReasonUnavailable
	case errors.Is(err, raft.ErrShutdown):
		return http.StatusServiceUnavailable, api.ReasonShuttingDown
	case errors.Is(err, raft.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled):
		return http.StatusGatewayTimeout, api.ReasonTimeout
	}
	return http.StatusInternalServerError, api.ReasonInternal
}

// WatchEnd is the end event of a watch that ended with err, in keel's wire form for
// every door: the reason classify gives err (the one a client acts on) and the
// revisions it resumes from.
func WatchEnd(err error) api.WatchEvent {
	line := api.WatchEvent{Type: api.EventEnd, Message: err.Error()}
	var werr *fsm.WatchError
	if errors.As(err, &werr) {
		line.Revision, line.CompactRevision = werr.LastRevision, werr.CompactRevision
	}
	_, line.Reason = classify(err)
	return line
}

// WireError is keel's one error table (classify) in its wire form, for every door:
// the status code, reason and message of err. write says the request could have
// changed state (then a 503/504 says the outcome is unknown).
func WireError(err error, write bool) api.Error {
	code, reason := classify(err)
	body := api.Error{Code: code, Reason: reason, Message: err.Error()}
	var expired *expiredError
	if errors.As(err, &expired) {
		body.Continue = expired.cont
	}
	var werr *fsm.WatchError
	if errors.As(err, &werr) {
		body.CompactRevision = werr.CompactRevision
	}
	if (code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout) &&
		reason != api.ReasonUnavailable && reason != api.ReasonNoLeader && write {
		body.Message += "; the outcome of the write is unknown: it may or may not be applied"
	}
	return body
}
