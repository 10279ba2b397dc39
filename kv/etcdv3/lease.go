package etcdv3

import (
	"context"
	"errors"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/raft"
)

// etcdLease serves etcd's Lease service with the core's lease operations (LeaseGrant,
// LeaseRevoke, LeaseKeepAlive, LeaseTimeToLive, Leases), those of /v1/leases, whose
// rights and bounds it inherits: TTLs outside [api.MinLeaseTTL, api.MaxLeaseTTL]
// seconds are refused (etcd would raise a short TTL to its minimum).
type etcdLease struct {
	pb.UnimplementedLeaseServer
	e *Server
}

// LeaseGrant serves Lease.LeaseGrant; ID 0 lets the server choose.
func (l etcdLease) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	id, err := l.e.core.LeaseGrant(ctx, callerOf(ctx), r.ID, r.TTL)
	if err != nil {
		return nil, err
	}
	return &pb.LeaseGrantResponse{Header: l.e.header(l.e.revision(ctx)), ID: id, TTL: r.TTL}, nil
}

// LeaseRevoke serves Lease.LeaseRevoke: the lease and its keys go at one revision.
func (l etcdLease) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	res, err := l.e.core.LeaseRevoke(ctx, callerOf(ctx), r.ID)
	if err != nil {
		return nil, err
	}
	return &pb.LeaseRevokeResponse{Header: l.e.header(res.Revision)}, nil
}

// LeaseTimeToLive serves Lease.LeaseTimeToLive; a lease that does not exist answers
// TTL -1, as etcd does.
func (l etcdLease) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	info, err := l.e.core.LeaseTimeToLive(ctx, callerOf(ctx), r.ID)
	if leaseMissing(err) {
		return &pb.LeaseTimeToLiveResponse{Header: l.e.header(l.e.revision(ctx)), ID: r.ID, TTL: -1}, nil
	}
	if err != nil {
		return nil, err
	}
	resp := &pb.LeaseTimeToLiveResponse{Header: l.e.header(info.Revision), ID: r.ID, TTL: info.TTL,
		GrantedTTL: info.GrantedTTL}
	if r.Keys {
		for _, k := range info.Keys {
			resp.Keys = append(resp.Keys, []byte(k))
		}
	}
	return resp, nil
}

// LeaseLeases serves Lease.LeaseLeases: the leases the token may use (the core's Leases).
func (l etcdLease) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	list, err := l.e.core.Leases(ctx, callerOf(ctx), fsm.Linearizable)
	if err != nil {
		return nil, err
	}
	resp := &pb.LeaseLeasesResponse{Header: l.e.header(list.Revision)}
	for _, li := range list.Leases {
		resp.Leases = append(resp.Leases, &pb.LeaseStatus{ID: li.ID})
	}
	return resp, nil
}

// LeaseKeepAlive serves Lease.LeaseKeepAlive: one answer per request, in order. A
// lease that does not exist answers TTL 0, as etcd does (clients then drop it).
// Each request runs with the rights the stream's token holds then.
func (l etcdLease) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	stopLost := l.e.endOnLeaderLoss(stream.Context(), cancel)
	defer stopLost()
	reqs := make(chan int64)
	go func() {
		// Ends when Recv fails: the client closed the stream, or the handler returned.
		defer close(reqs)
		for {
			req, err := stream.Recv()
			if err != nil {
				return
			}
			select {
			case reqs <- req.ID:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var id int64
		var ok bool
		select {
		case id, ok = <-reqs:
		case <-l.e.stop:
			return rpctypes.ErrGRPCStopped
		case <-ctx.Done():
			if cause := context.Cause(ctx); errors.Is(cause, raft.ErrNoLeader) {
				return cause // require-leader: no leader for the stream grace
			}
			return nil
		}
		if !ok {
			return nil // the client ended the stream, or it broke: nothing to answer
		}
		resp, err := l.keepAliveOnce(ctx, id)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return nil
		}
	}
}

func (l etcdLease) keepAliveOnce(ctx context.Context, id int64) (*pb.LeaseKeepAliveResponse, error) {
	c, err := l.e.core.Refresh(callerOf(ctx))
	if err != nil {
		return nil, err
	}
	src := peerAddr(ctx)
	if err := l.e.core.AdmitRequest(src); err != nil {
		return nil, err
	}
	defer l.e.core.ReleaseRequest(src)
	ctx, cancel := l.e.core.RequestContext(ctx)
	defer cancel()
	left, err := l.e.core.LeaseKeepAlive(ctx, c, id)
	if leaseMissing(err) {
		return &pb.LeaseKeepAliveResponse{Header: l.e.header(l.e.revision(ctx)), ID: id, TTL: 0}, nil
	}
	if err != nil {
		return nil, err
	}
	ttl := int64((left + time.Second - 1) / time.Second)
	return &pb.LeaseKeepAliveResponse{Header: l.e.header(l.e.revision(ctx)), ID: id, TTL: ttl}, nil
}

// revision is the node's applied revision, for headers of answers that read none.
func (e *Server) revision(ctx context.Context) int64 {
	rev, _, err := e.core.Revisions(ctx)
	if err != nil {
		return 0
	}
	return rev
}

// leaseMissing reports whether err says no lease has the ID: it does not exist, or the
// ID is one no lease can have (etcd answers both alike).
func leaseMissing(err error) bool {
	return errors.Is(err, fsm.ErrLeaseNotFound) || errors.Is(err, kv.ErrInvalidLeaseID)
}
