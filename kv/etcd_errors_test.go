package kv

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
)

// Every keel error an etcd client can meet is answered with etcd's own error, code
// and message exactly (clients compare messages), also when wrapped; keel's other
// refusals keep their code and say what is wrong (kills: any mapping of etcdError
// changed or dropped).
func TestEtcdErrorIsEtcds(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("put %q: apply: %w", "k", err) }
	for _, c := range []struct {
		err  error
		want error
	}{
		{fsm.ErrCompacted, rpctypes.ErrGRPCCompacted},
		{fsm.ErrFutureRevision, rpctypes.ErrGRPCFutureRev},
		{fmt.Errorf("%w: 129 success entries: %w", ErrInvalidBody, fsm.ErrTooManyOps), rpctypes.ErrGRPCTooManyOps},
		{fsm.ErrDuplicateKey, rpctypes.ErrGRPCDuplicateKey},
		{fsm.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
		{fmt.Errorf("lease grant: %w: lease 7: %w", ErrConflict, fsm.ErrLeaseExists), rpctypes.ErrGRPCLeaseExist},
		{errEtcdEmptyKey, rpctypes.ErrGRPCEmptyKey},
		{fsm.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
		{errEtcdValueProvided, rpctypes.ErrGRPCValueProvided},
		{errEtcdLeaseProvided, rpctypes.ErrGRPCLeaseProvided},
		{ErrTooLarge, rpctypes.ErrGRPCRequestTooLarge},
		{ErrUnauthorized, rpctypes.ErrGRPCInvalidAuthToken},
		{errEtcdAuthFailed, rpctypes.ErrGRPCAuthFailed},
		{errEtcdAuthNotEnabled, rpctypes.ErrGRPCAuthNotEnabled},
		{ErrForbidden, rpctypes.ErrGRPCPermissionDenied},
		{ErrReservedPrefix, rpctypes.ErrGRPCPermissionDenied},
		{ErrTooManyWatches, rpctypes.ErrGRPCRequestTooManyRequests},
		{ErrTooManyRequests, rpctypes.ErrGRPCRequestTooManyRequests},
		{raft.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
		{raft.ErrNotLeader, rpctypes.ErrGRPCLeaderChanged},
		{raft.ErrShutdown, rpctypes.ErrGRPCStopped},
		{raft.ErrTimeout, rpctypes.ErrGRPCTimeout},
		{context.DeadlineExceeded, rpctypes.ErrGRPCDeadlineExceeded},
		{context.Canceled, rpctypes.ErrGRPCCanceled},
	} {
		got := status.Convert(etcdError(wrap(c.err)))
		want := status.Convert(c.want)
		if got.Code() != want.Code() || got.Message() != want.Message() {
			t.Errorf("%v: answered %v %q, want etcd's %v %q", c.err, got.Code(), got.Message(), want.Code(), want.Message())
		}
	}
	for _, c := range []struct {
		err  error
		code codes.Code
	}{
		{etcdUnsupported("a range at a revision inside a transaction"), codes.InvalidArgument},
		{ErrInvalidKey, codes.InvalidArgument},
		{ErrInvalidParam, codes.InvalidArgument},
		{ErrConflict, codes.FailedPrecondition},
		{ErrNotReady, codes.Unavailable},
	} {
		got := status.Convert(etcdError(wrap(c.err)))
		if got.Code() != c.code || got.Message() != "etcdserver: "+wrap(c.err).Error() {
			t.Errorf("%v: answered %v %q, want %v with keel's message", c.err, got.Code(), got.Message(), c.code)
		}
	}
	if etcdError(nil) != nil {
		t.Error("etcdError(nil) is not nil")
	}
}

// The etcd RPCs that do what an HTTP route does take that route's rule; a pattern
// without a rule is refused, never let through (kills: a missing rule read as the
// zero rule, which checks nothing).
func TestRouteRightFailsClosed(t *testing.T) {
	none := context.WithValue(context.Background(), authzKey{}, &authorizer{operator: map[string]bool{}})
	compact := context.WithValue(context.Background(), authzKey{}, &authorizer{operator: map[string]bool{api.RightCompact: true}})
	for _, c := range []struct {
		ctx     context.Context
		pattern string
		ok      bool
	}{
		{context.Background(), "POST " + api.PathCompact, true}, // ACLs not enforced
		{none, "POST " + api.PathCompact, false},
		{compact, "POST " + api.PathCompact, true},
		{compact, "GET " + api.PathAgentSnapshot, false},
		{compact, "POST /v1/no-such-route", false},
		{compact, "GET " + PathAPIs + "/{group}/{version}/{resource}", false},
	} {
		err := routeRight(c.ctx, c.pattern)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrForbidden)) {
			t.Errorf("%s: %v, want allowed %v", c.pattern, err, c.ok)
		}
	}
}
