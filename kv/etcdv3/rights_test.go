package etcdv3_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/etcdv3"
	rt "github.com/keel-kv/keel/kv/internal/rightstest"
)

// etcdDoor carries the rights table's cases (kv/internal/rightstest) over the etcd v3
// gRPC API, with etcd's own client stubs: the token travels as the "token" metadata.
type etcdDoor struct {
	f       *rt.Fixture
	conn    *grpc.ClientConn
	kv      pb.KVClient
	watch   pb.WatchClient
	lease   pb.LeaseClient
	cluster pb.ClusterClient
	maint   pb.MaintenanceClient
}

// newEtcdDoor serves the fixture's server's etcd door on a free port until the test
// ends, and connects to it.
func newEtcdDoor(t *testing.T, f *rt.Fixture) *etcdDoor {
	t.Helper()
	e := etcdv3.New(f.Srv)
	ln := rt.Listen(t)
	done := make(chan error, 1)
	go func() { done <- e.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Stop(ctx)
		<-done
	})
	return &etcdDoor{f: f, conn: conn, kv: pb.NewKVClient(conn), watch: pb.NewWatchClient(conn),
		lease: pb.NewLeaseClient(conn), cluster: pb.NewClusterClient(conn), maint: pb.NewMaintenanceClient(conn)}
}

// answer maps the door's error to the tables' terms: etcd's permission denied is a
// 403, its invalid auth token a 401, its duplicate key a 400 DuplicateKey, its request
// too large a 413, any other invalid argument a 400; other errors keep their gRPC code.
func answer(err error) rt.Answer {
	if err == nil {
		return rt.Answer{}
	}
	st := status.Convert(err)
	switch st.Message() {
	case status.Convert(rpctypes.ErrGRPCPermissionDenied).Message():
		return rt.Answer{Code: http.StatusForbidden, Reason: api.ReasonForbidden, Msg: st.Message(), Fixed: true}
	case status.Convert(rpctypes.ErrGRPCInvalidAuthToken).Message(), status.Convert(rpctypes.ErrGRPCUserEmpty).Message():
		return rt.Answer{Code: http.StatusUnauthorized, Reason: api.ReasonUnauthorized, Msg: st.Message(), Fixed: true}
	case status.Convert(rpctypes.ErrGRPCDuplicateKey).Message():
		return rt.Answer{Code: http.StatusBadRequest, Reason: api.ReasonDuplicateKey, Msg: st.Message(), Fixed: true}
	case status.Convert(rpctypes.ErrGRPCRequestTooLarge).Message():
		return rt.Answer{Code: http.StatusRequestEntityTooLarge, Reason: api.ReasonTooLarge, Msg: st.Message(), Fixed: true}
	}
	if st.Code() == codes.InvalidArgument { // keel's own refusals keep their message
		return rt.Answer{Code: http.StatusBadRequest, Reason: api.ReasonBadRequest, Msg: st.Message()}
	}
	return rt.Answer{Code: 1000 + int(st.Code()), Reason: st.Code().String(), Msg: st.Message()}
}

func (d *etcdDoor) Do(t *testing.T, secret string, op rt.Op) rt.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if secret != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, secret)
	}
	key := []byte(op.Key)
	var err error
	switch op.Kind {
	case rt.Get:
		_, err = d.kv.Range(ctx, &pb.RangeRequest{Key: key, Serializable: op.Serializable, Revision: op.Revision})
	case rt.Range:
		if op.Limit != 0 { // etcd's limit only cuts the answer (etcd's meaning): no bound
			return rt.NotServed
		}
		var resp *pb.RangeResponse
		if resp, err = d.kv.Range(ctx, &pb.RangeRequest{Key: key, RangeEnd: fsm.PrefixEnd(key)}); err == nil {
			a := rt.Answer{Keys: []string{}}
			for _, kv := range resp.Kvs {
				a.Keys = append(a.Keys, string(kv.Key))
			}
			return a
		}
	case rt.Put:
		r := &pb.PutRequest{Key: key, Value: op.PutValue()}
		if op.Lease {
			r.Lease = d.f.LeaseOf(op)
		}
		_, err = d.kv.Put(ctx, r)
	case rt.Delete, rt.DeleteRange:
		if op.HasPrev { // etcd guards a delete with a Txn's compare, not on the delete
			return rt.NotServed
		}
		r := &pb.DeleteRangeRequest{Key: key}
		if op.Kind == rt.DeleteRange {
			r.RangeEnd = fsm.PrefixEnd(key)
		}
		_, err = d.kv.DeleteRange(ctx, r)
	case rt.Watch:
		err = d.watchOnce(ctx, op)
	case rt.Txn:
		if op.Body != nil { // etcd's Txn is a protobuf message: no JSON body
			return rt.NotServed
		}
		if txnHasLimit(op.Txn) { // etcd's limit only cuts the answer (etcd's meaning): no bound
			return rt.NotServed
		}
		_, err = d.kv.Txn(ctx, etcdTxn(op.Txn))
	case rt.LeaseGrant:
		_, err = d.lease.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: 600})
	case rt.LeaseKeepAlive:
		err = d.keepAliveOnce(ctx, op)
	case rt.LeaseRevoke:
		_, err = d.lease.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: d.f.LeaseOf(op)})
	case rt.LeaseTimeToLive:
		_, err = d.lease.LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: d.f.LeaseOf(op), Keys: true})
	case rt.LeaseList:
		var resp *pb.LeaseLeasesResponse
		if resp, err = d.lease.LeaseLeases(ctx, &pb.LeaseLeasesRequest{}); err == nil {
			a := rt.Answer{}
			for _, l := range resp.Leases {
				a.Leases = append(a.Leases, l.ID)
			}
			return a
		}
	case rt.Compact:
		_, err = d.kv.Compact(ctx, &pb.CompactionRequest{Revision: op.Revision})
	case rt.MemberList: // etcd serves it to every client: no right (TestEtcdAuthEnabled)
		return rt.NotServed
	case rt.MemberRemove:
		_, err = d.cluster.MemberRemove(ctx, &pb.MemberRemoveRequest{ID: rt.NoMember})
	case rt.HashKV:
		_, err = d.maint.HashKV(ctx, &pb.HashKVRequest{})
	case rt.Snapshot:
		err = d.snapshotOnce(ctx)
	case rt.Defragment:
		_, err = d.maint.Defragment(ctx, &pb.DefragmentRequest{})
	case rt.MoveLeader:
		_, err = d.maint.MoveLeader(ctx, &pb.MoveLeaderRequest{TargetID: rt.NoMember})
	default:
		t.Fatalf("etcd door: op %d unknown", op.Kind)
	}
	return answer(err)
}

// txnHasLimit reports whether an op of r carries a limit.
func txnHasLimit(r api.TxnRequest) bool {
	for _, o := range append(slices.Clone(r.Success), r.Failure...) {
		if o.Limit != 0 {
			return true
		}
	}
	return false
}

// watchOnce creates one watch and reads the answer: created (nil), or refused (the
// cancel reason, etcd's error message, as the error).
func (d *etcdDoor) watchOnce(ctx context.Context, op rt.Op) error {
	stream, err := d.watch.Watch(ctx)
	if err != nil {
		return err
	}
	defer stream.CloseSend()
	cr := &pb.WatchCreateRequest{Key: []byte(op.Key)}
	if op.Prefix {
		cr.RangeEnd = fsm.PrefixEnd(cr.Key)
	}
	if err := stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: cr}}); err != nil &&
		!errors.Is(err, io.EOF) {
		return err // io.EOF: the server ended the stream, and Recv says why
	}
	resp, err := stream.Recv()
	if err != nil {
		return err
	}
	if resp.Canceled {
		return reasonError(resp.CancelReason)
	}
	return nil
}

// reasonError turns a watch's cancel reason back into etcd's error, as clientv3 does.
func reasonError(reason string) error {
	for _, e := range []error{rpctypes.ErrGRPCPermissionDenied, rpctypes.ErrGRPCInvalidAuthToken} {
		if status.Convert(e).Message() == reason {
			return e
		}
	}
	return status.Error(codes.Unknown, reason)
}

// keepAliveOnce renews op's lease once on a keepalive stream.
func (d *etcdDoor) keepAliveOnce(ctx context.Context, op rt.Op) error {
	stream, err := d.lease.LeaseKeepAlive(ctx)
	if err != nil {
		return err
	}
	defer stream.CloseSend()
	if err := stream.Send(&pb.LeaseKeepAliveRequest{ID: d.f.LeaseOf(op)}); err != nil && !errors.Is(err, io.EOF) {
		return err // io.EOF: the server ended the stream, and Recv says why
	}
	_, err = stream.Recv()
	if errors.Is(err, io.EOF) {
		return errors.New("keepalive stream ended without an answer")
	}
	return err
}

// snapshotOnce reads a snapshot stream to its end.
func (d *etcdDoor) snapshotOnce(ctx context.Context) error {
	stream, err := d.maint.Snapshot(ctx, &pb.SnapshotRequest{})
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// etcdTxn translates a KV API transaction of the table into etcd's.
func etcdTxn(r api.TxnRequest) *pb.TxnRequest {
	out := &pb.TxnRequest{}
	results := map[string]pb.Compare_CompareResult{api.ResultEqual: pb.Compare_EQUAL,
		api.ResultNotEqual: pb.Compare_NOT_EQUAL, api.ResultGreater: pb.Compare_GREATER, api.ResultLess: pb.Compare_LESS}
	for _, c := range r.Compare {
		out.Compare = append(out.Compare, &pb.Compare{Key: []byte(c.Key), Target: pb.Compare_VERSION,
			Result: results[c.Result], TargetUnion: &pb.Compare_Version{Version: c.Int}})
	}
	out.Success, out.Failure = etcdOps(r.Success), etcdOps(r.Failure)
	return out
}

func etcdOps(ops []api.Op) []*pb.RequestOp {
	var out []*pb.RequestOp
	for _, o := range ops {
		key := []byte(o.Key)
		var end []byte
		if o.Prefix {
			end = fsm.PrefixEnd(key)
		}
		switch o.Type {
		case api.OpGet:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{
				RequestRange: &pb.RangeRequest{Key: key, RangeEnd: end}}})
		case api.OpPut:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
				RequestPut: &pb.PutRequest{Key: key, Value: o.Value}}})
		case api.OpDelete, api.OpDeleteRange:
			out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{
				RequestDeleteRange: &pb.DeleteRangeRequest{Key: key, RangeEnd: end}}})
		}
	}
	return out
}

// TestEtcdRightsTable: the rights table over the etcd API — the same cases as HTTP's
// and the stream's, refused with etcd's permission denied without their right (403 in
// the table's terms) and its invalid auth token without a token or with a deleted one
// (401), each changing nothing.
func TestEtcdRightsTable(t *testing.T) {
	f := rt.New(t)
	d := newEtcdDoor(t, f)
	rt.RunRightCases(t, f, d)
	rt.RunUnauthorizedCases(t, f, d, "", "no token")
	gone := f.NewToken(t, rt.Policies[rt.NeedRead].Name)
	f.DeleteToken(t, gone)
	rt.RunUnauthorizedCases(t, f, d, gone.SecretID, "a deleted token")
}

// TestEtcdLeaseOwner: a lease is its granter's on etcd's Lease API — another
// tenant's token neither lists it (LeaseLeases) nor renews, looks up or revokes it,
// with keys attached or not; a token of the owner's policy and a management token do.
func TestEtcdLeaseOwner(t *testing.T) {
	f := rt.New(t)
	rt.RunLeaseOwnerCases(t, f, newEtcdDoor(t, f))
}

// TestEtcdRulesTable: the rules table (key limits and UTF-8, the value limit, the
// reserved prefix, duplicate keys) over the etcd API, with every right: etcd's own
// errors where it has one (duplicate key, request too large, permission denied for
// the reserved prefix), InvalidArgument with keel's message otherwise.
func TestEtcdRulesTable(t *testing.T) {
	f := rt.New(t)
	rt.RunRuleCases(t, f, newEtcdDoor(t, f))
}
