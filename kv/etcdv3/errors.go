package etcdv3

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/raft"
)

// errEtcdUnsupported: the etcd door does not serve an option or a request kind yet;
// nothing was done. The message names what is missing.
var errEtcdUnsupported = errors.New("etcdv3: not supported by keel's etcd API")

// etcdUnsupported refuses what the door does not serve, naming it.
func etcdUnsupported(what string) error {
	return fmt.Errorf("%w: %s", errEtcdUnsupported, what)
}

// etcdUnimplemented answers an RPC this door does not serve.
func etcdUnimplemented(method string) error {
	return status.Error(codes.Unimplemented, "etcdserver: "+method+" is not served by keel's etcd API")
}

// etcdError maps an error to the gRPC status an etcd server would answer. It is the
// only place that decides them. Where etcd has an error of its own, the answer is
// exactly that one (clients compare messages: rpctypes.Error); keel's other refusals
// keep their own message under the matching code. A status error passes unchanged.
func etcdError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if e := etcdSentinel(err); e != nil {
		return e
	}
	if errors.Is(err, errEtcdUnsupported) {
		return status.Error(codes.InvalidArgument, "etcdserver: "+err.Error())
	}
	if errors.Is(err, kv.ErrLastVoter) { // a precondition of the cluster, not a bad request
		return status.Error(codes.FailedPrecondition, "etcdserver: "+err.Error())
	}
	return status.Error(grpcCode(kv.WireError(err, true).Code), "etcdserver: "+err.Error())
}

// grpcCode is the gRPC code of the HTTP status the core's one classification gives an
// error (kv.WireError): the etcd door never decides a class of its own, so a refusal
// the core adds reaches etcd clients with a code they recognise, never Unknown for
// what HTTP answers as a client error or an outage.
func grpcCode(httpStatus int) codes.Code {
	switch httpStatus {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict, http.StatusPreconditionFailed:
		return codes.FailedPrecondition
	case http.StatusGone:
		return codes.OutOfRange
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}

// etcdSentinel is etcd's own error for err, nil when etcd has none.
func etcdSentinel(err error) error {
	switch {
	case errors.Is(err, kv.ErrNotMember):
		return rpctypes.ErrGRPCMemberNotFound
	case errors.Is(err, kv.ErrNotVoter):
		return rpctypes.ErrGRPCBadLeaderTransferee
	case errors.Is(err, fsm.ErrCompacted):
		return rpctypes.ErrGRPCCompacted
	case errors.Is(err, fsm.ErrFutureRevision):
		return rpctypes.ErrGRPCFutureRev
	case errors.Is(err, fsm.ErrTooManyOps):
		return rpctypes.ErrGRPCTooManyOps
	case errors.Is(err, fsm.ErrDuplicateKey):
		return rpctypes.ErrGRPCDuplicateKey
	case errors.Is(err, fsm.ErrLeaseNotFound), errors.Is(err, kv.ErrInvalidLeaseID):
		return rpctypes.ErrGRPCLeaseNotFound
	case errors.Is(err, fsm.ErrLeaseExists):
		return rpctypes.ErrGRPCLeaseExist
	case errors.Is(err, kv.ErrEmptyKey):
		return rpctypes.ErrGRPCEmptyKey
	case errors.Is(err, fsm.ErrKeyNotFound):
		return rpctypes.ErrGRPCKeyNotFound
	case errors.Is(err, errEtcdValueProvided):
		return rpctypes.ErrGRPCValueProvided
	case errors.Is(err, errEtcdLeaseProvided):
		return rpctypes.ErrGRPCLeaseProvided
	case errors.Is(err, kv.ErrTooLarge):
		return rpctypes.ErrGRPCRequestTooLarge
	case errors.Is(err, kv.ErrStatusNoToken): // etcd 3.7's answer to a Status without a user
		return rpctypes.ErrGRPCUserEmpty
	case authSentinel(err) != nil:
		return authSentinel(err)
	case errors.Is(err, kv.ErrUnauthorized):
		return rpctypes.ErrGRPCInvalidAuthToken
	case errors.Is(err, errEtcdAuthFailed):
		return rpctypes.ErrGRPCAuthFailed
	case errors.Is(err, errEtcdAuthNotEnabled):
		return rpctypes.ErrGRPCAuthNotEnabled
	case errors.Is(err, kv.ErrForbidden), errors.Is(err, kv.ErrReservedPrefix), errors.Is(err, raft.ErrCallerRefused):
		return rpctypes.ErrGRPCPermissionDenied
	case errors.Is(err, kv.ErrTooManyWatches), errors.Is(err, kv.ErrTooManyRequests), errors.Is(err, kv.ErrTooManyLeases),
		errors.Is(err, kv.ErrTooManyConnections):
		return rpctypes.ErrGRPCRequestTooManyRequests
	case errors.Is(err, raft.ErrNoLeader):
		return rpctypes.ErrGRPCNoLeader
	case errors.Is(err, raft.ErrNotLeader):
		return rpctypes.ErrGRPCLeaderChanged
	case errors.Is(err, raft.ErrShutdown):
		return rpctypes.ErrGRPCStopped
	case errors.Is(err, raft.ErrTimeout):
		return rpctypes.ErrGRPCTimeout
	case errors.Is(err, context.DeadlineExceeded):
		return rpctypes.ErrGRPCDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return rpctypes.ErrGRPCCanceled
	}
	return nil
}

// Errors only the etcd door raises (mapped in etcdSentinel).
var (
	// errEtcdValueProvided: a put with ignore_value and a value.
	errEtcdValueProvided = errors.New("etcdv3: value is provided")
	// errEtcdLeaseProvided: a put with ignore_lease and a lease.
	errEtcdLeaseProvided = errors.New("etcdv3: lease is provided")
	// errEtcdAuthFailed: Authenticate with an unknown user or a wrong password.
	errEtcdAuthFailed = errors.New("etcdv3: authentication failed")
	// errEtcdAuthNotEnabled: Authenticate while the cluster enforces no ACLs.
	errEtcdAuthNotEnabled = errors.New("etcdv3: authentication is not enabled")
)
