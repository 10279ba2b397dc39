package etcdv3

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
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
		{fmt.Errorf("%w: 129 success entries: %w", kv.ErrInvalidBody, fsm.ErrTooManyOps), rpctypes.ErrGRPCTooManyOps},
		{fsm.ErrDuplicateKey, rpctypes.ErrGRPCDuplicateKey},
		{fsm.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
		{fmt.Errorf("lease grant: %w: lease 7: %w", kv.ErrConflict, fsm.ErrLeaseExists), rpctypes.ErrGRPCLeaseExist},
		{kv.ErrEmptyKey, rpctypes.ErrGRPCEmptyKey},
		{fsm.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
		{errEtcdValueProvided, rpctypes.ErrGRPCValueProvided},
		{errEtcdLeaseProvided, rpctypes.ErrGRPCLeaseProvided},
		{kv.ErrTooLarge, rpctypes.ErrGRPCRequestTooLarge},
		{kv.ErrUnauthorized, rpctypes.ErrGRPCInvalidAuthToken},
		{errEtcdAuthFailed, rpctypes.ErrGRPCAuthFailed},
		{errEtcdAuthNotEnabled, rpctypes.ErrGRPCAuthNotEnabled},
		{kv.ErrForbidden, rpctypes.ErrGRPCPermissionDenied},
		{kv.ErrReservedPrefix, rpctypes.ErrGRPCPermissionDenied},
		{kv.ErrTooManyWatches, rpctypes.ErrGRPCRequestTooManyRequests},
		{kv.ErrTooManyRequests, rpctypes.ErrGRPCRequestTooManyRequests},
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
		{kv.ErrInvalidKey, codes.InvalidArgument},
		{kv.ErrInvalidParam, codes.InvalidArgument},
		{kv.ErrConflict, codes.FailedPrecondition},
		{kv.ErrNotReady, codes.Unavailable},
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
