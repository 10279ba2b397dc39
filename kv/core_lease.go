package kv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/lease"
	"github.com/keel-kv/keel/raft"
)

// The core's lease operations (see core.go): the exported Lease* methods of
// core_kv.go call them, for every door.

// leaseFormatError explains a command refused by the format gate in a mixed-release
// cluster (only leases need format 3 today).
func leaseFormatError(err error) error {
	if errors.Is(err, raft.ErrFormatNotAgreed) {
		return fmt.Errorf("leases need Raft command format %d, which some voter (a node of an older release) "+
			"cannot apply; finish the upgrade first: %w", fsm.CommandFormatV3, err)
	}
	return err
}

// The lease operations below serve every door (through core_kv.go's Lease* methods);
// every rule on leases is here, once, the lease right included (leaseRight: a write
// right on some key prefix), checked for the caller in ctx.
//
// Rights on a lease follow its keys, as etcd's do (checkLeaseTimeToLive,
// checkLeasePuts): a lease is anyone's who may write some key, but
//
//   - its keys (GET /v1/leases/{id}) are shown only to a token that may read every
//     one of them; any other gets 403, never a partial list;
//   - the list (GET /v1/leases) shows only the leases the token could look up so;
//   - revoking it, which deletes its keys, needs the write right on every one;
//   - a keepalive needs only the lease right (etcd's LeaseKeepAlive checks no key): it
//     changes no key, and a client must be able to keep its lease alive cheaply.
//
// The revoke's check reads a linearizable view before the command is proposed: a key
// attached between the two is deleted with the rest. Only a writer of that key can
// attach it, to a lease it chose.

// CheckLeases is nil when c may use leases (a write right on some key prefix: leases
// are for writers). Every lease operation checks it first; a door asks it before
// reading the request.
func (s *Server) CheckLeases(c Caller) error { return leaseRightOf(c.az) }

// leaseRight is CheckLeases for the caller in ctx.
func leaseRight(ctx context.Context) error { return leaseRightOf(authzOf(ctx)) }

func leaseRightOf(az *acl.Authorizer) error {
	if az != nil && !az.AnyWrite() {
		return fmt.Errorf("%w: leases need a token with a write right on some key prefix", ErrForbidden)
	}
	return nil
}

// leaseKeysAllowed reports whether the token may read (write) every key attached to
// lease id in v. The error names the lease, not the key.
func leaseKeysAllowed(ctx context.Context, v *fsm.View, id int64, write bool) error {
	az := authzOf(ctx)
	if az == nil || az.Span(nil, nil, write) {
		return nil
	}
	for _, k := range v.LeaseKeys(id, 0) {
		if !az.Key(k, write) {
			return fmt.Errorf("%w: lease %d has keys the token has no %s right on", ErrForbidden, id, acl.AccessWord(write))
		}
	}
	return nil
}

// grantLease grants lease id (0: a new random ID) for ttl seconds and returns its ID.
func (s *Server) grantLease(ctx context.Context, id, ttl int64) (int64, error) {
	if err := leaseRight(ctx); err != nil {
		return 0, err
	}
	if ttl < api.MinLeaseTTL || ttl > api.MaxLeaseTTL {
		return 0, fmt.Errorf("lease grant: %w: ttl %d s outside [%d, %d] s", ErrInvalidBody, ttl, api.MinLeaseTTL, api.MaxLeaseTTL)
	}
	if err := checkLeaseRef(id); err != nil {
		return 0, fmt.Errorf("lease grant: %w", err)
	}
	if id == 0 {
		id = newLeaseID()
	}
	done, err := s.reserveLease(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("lease grant: %w", err)
	}
	_, err = s.apply(ctx, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: id, LeaseTTL: ttl * 1000})
	done(err == nil)
	if errors.Is(err, fsm.ErrLeaseExists) {
		return 0, fmt.Errorf("lease grant: %w: lease %d: %w", ErrConflict, id, err)
	}
	if err != nil {
		return 0, fmt.Errorf("lease grant: %w", err)
	}
	return id, nil
}

// revokeLease revokes lease id, deleting its keys in the same revision.
func (s *Server) revokeLease(ctx context.Context, id int64) (api.LeaseRevokeResponse, error) {
	if err := leaseRight(ctx); err != nil {
		return api.LeaseRevokeResponse{}, err
	}
	if authzOf(ctx) != nil {
		v, err := s.viewAt(ctx, fsm.Linearizable, 0)
		if err != nil {
			return api.LeaseRevokeResponse{}, err
		}
		if err := leaseKeysAllowed(ctx, v, id, true); err != nil {
			return api.LeaseRevokeResponse{}, err
		}
	}
	res, err := s.apply(ctx, &fsm.Command{Type: fsm.CmdLeaseRevoke, LeaseIDs: []int64{id}})
	if err != nil {
		return api.LeaseRevokeResponse{}, fmt.Errorf("lease revoke: %w", err)
	}
	if !res.Succeeded {
		return api.LeaseRevokeResponse{}, fmt.Errorf("lease revoke: lease %d: %w", id, fsm.ErrLeaseNotFound)
	}
	resp := api.LeaseRevokeResponse{Revision: res.Revision}
	if len(res.Responses) > 0 {
		resp.Deleted = res.Responses[0].Deleted
	}
	return resp, nil
}

// keepAliveLease renews lease id at the leader and returns the time it has left.
func (s *Server) keepAliveLease(ctx context.Context, id int64) (time.Duration, error) {
	if err := leaseRight(ctx); err != nil {
		return 0, err
	}
	lc, err := s.leaderCaller()
	if err != nil {
		return 0, err
	}
	left, err := lease.KeepAlive(ctx, lc, id)
	if err != nil {
		return 0, fmt.Errorf("lease keepalive: %w", err)
	}
	return left, nil
}

// newLeaseID is a random ID in [1, MaxLeaseID].
func newLeaseID() int64 {
	var b [8]byte
	rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:])%api.MaxLeaseID) + 1
}

// leaderCaller returns the store's leader calls, or a 503 if it has none.
func (s *Server) leaderCaller() (lease.LeaderCaller, error) {
	lc, ok := s.store.(lease.LeaderCaller)
	if !ok {
		return nil, fmt.Errorf("%w: this store serves no lease keepalives", ErrNotReady)
	}
	return lc, nil
}

// leaseTimeToLive returns lease id from a linearizable view with its keys, and its
// time left from the leader; only to a token that may read every key attached.
func (s *Server) leaseTimeToLive(ctx context.Context, id int64) (api.LeaseResponse, error) {
	if err := leaseRight(ctx); err != nil {
		return api.LeaseResponse{}, err
	}
	v, err := s.viewAt(ctx, fsm.Linearizable, 0)
	if err != nil {
		return api.LeaseResponse{}, err
	}
	l, ok := v.Lease(id)
	if !ok {
		return api.LeaseResponse{}, fmt.Errorf("lease %d: %w", id, fsm.ErrLeaseNotFound)
	}
	if err := leaseKeysAllowed(ctx, v, id, false); err != nil {
		return api.LeaseResponse{}, err
	}
	lc, err := s.leaderCaller()
	if err != nil {
		return api.LeaseResponse{}, err
	}
	left, err := s.leaseRemaining(ctx, lc, id)
	if err != nil {
		return api.LeaseResponse{}, err
	}
	resp := api.LeaseResponse{ID: id, GrantedTTL: l.TTL / 1000, TTL: int64(left / time.Second),
		TTLMillis: left.Milliseconds(), Keys: []string{}, Revision: v.Revision()}
	for _, k := range v.LeaseKeys(id, s.lim.maxListLimit) {
		resp.Keys = append(resp.Keys, string(k))
	}
	return resp, nil
}

// leaseRemaining asks the leader how long lease id has left.
func (s *Server) leaseRemaining(ctx context.Context, lc lease.LeaderCaller, id int64) (time.Duration, error) {
	left, err := lease.Remaining(ctx, lc, id)
	if err != nil {
		return 0, fmt.Errorf("lease %d: time left: %w", id, err)
	}
	return left, nil
}

// listLeases returns the leases the token could look up (leaseTimeToLive): those
// whose every attached key it may read.
func (s *Server) listLeases(ctx context.Context, cons fsm.Consistency) (api.LeaseListResponse, error) {
	if err := leaseRight(ctx); err != nil {
		return api.LeaseListResponse{}, err
	}
	v, err := s.viewAt(ctx, cons, 0)
	if err != nil {
		return api.LeaseListResponse{}, err
	}
	resp := api.LeaseListResponse{Leases: []api.LeaseInfo{}, Revision: v.Revision()}
	for _, l := range v.Leases() {
		if leaseKeysAllowed(ctx, v, l.ID, false) == nil {
			resp.Leases = append(resp.Leases, api.LeaseInfo{ID: l.ID, GrantedTTL: l.TTL / 1000})
		}
	}
	return resp, nil
}
