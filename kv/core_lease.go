package kv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
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
// cluster in the words of leases, the usual cause: they need format 3, and a grant
// under ACLs (with its owner) format 5. The wrapped error names the command's format.
func leaseFormatError(err error) error {
	if errors.Is(err, raft.ErrFormatNotAgreed) {
		return fmt.Errorf("leases need Raft command format %d, and leases of a token (their owner recorded) "+
			"format %d, which some voter (a node of an older release) cannot apply; finish the upgrade first: %w",
			fsm.CommandFormatV3, fsm.CommandFormatV5, err)
	}
	return err
}

// The lease operations below serve every door (through core_kv.go's Lease* methods);
// every rule on leases is here, once, the lease right included (leaseRight: a write
// right on some key prefix), checked for the caller in ctx.
//
// A lease is its owner's from its grant on (issue #33: a rule on its keys alone left
// a lease without keys to everyone, and let anyone who learned its ID keep another
// tenant's lock alive forever). The owner is the set of policies of the token that
// granted it (leaseOwner), recorded in the grant itself (fsm.Lease.Owner, one Raft
// entry: no lease ever exists without its owner, on any node, after any failover or
// snapshot restore). A token may use a lease — see it listed, renew it, look it up,
// revoke it, attach a key to it — when it holds every one of those policies, or when
// it is a management token (the operator right "*"). So
//
//	token t1 [app-writer] grants L          L.Owner = [app-writer]
//	t1 re-issued as t2 [app-writer]         t2 may use L (a rotated token keeps it)
//	t3 [app-writer, ops]                    may use L (it holds every right t1 had)
//	t4 [other-writer]                       may not: L is not in its list; keepalive,
//	                                        time to live, revoke, put with L: 403
//
// Why in the grant and not in a hidden record (a key under "\x00keel/" attached to the
// lease): a grant and a put are two Raft entries, so a lease would live without owner
// between them — for ever if the put failed — and the record would move the revision
// on every grant, appear among the lease's keys and count as a key its revoke deleted.
// The grant carries the owner in command format 5 instead, gated like every format.
//
// Why policies and not the token: etcd's concurrency sessions grant, renew and revoke
// with one client, but a keel token may expire or be rotated while the session's lease
// lives, and a token of the same policies holds the same rights on the lease's keys
// anyway (it could delete them); sharing the lease grants it nothing it could not do.
//
// Besides the owner, the keys keep their own rule: the keys of a lease (GET
// /v1/leases/{id}) are shown only to a token that may read every one of them (403,
// never a partial list), and revoking it, which deletes them, needs the write right on
// every one. The revoke's check reads a linearizable view before the command is
// proposed: a key attached between the two is deleted with the rest; only the owner
// can attach it.
//
// Leases without owner under ACLs: granted while ACLs were not enforced, or by a
// release before owners. Their rule is the keys': a token may use one only if keys are
// attached and it may read (list, look up) or write (renew, revoke, attach) every one
// of them — a lease without keys and owner is a management token's alone. While some
// voter cannot apply format 5 the grant of a token is refused (503, nothing written;
// leaseFormatError) rather than written without owner. Without ACLs leases have no
// owner and no rule but the keys' (none).

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

// leaseOwnerPolicies prefixes an owner made of policy names (leaseOwner); another
// prefix (a later release's kind of owner) is an owner no token of this one matches.
const leaseOwnerPolicies = "p:"

// leaseOwner is the owner a grant by az records: its policies, one per line (policy
// names hold no newline); "" without ACLs.
func leaseOwner(az *acl.Authorizer) string {
	if az == nil {
		return ""
	}
	return leaseOwnerPolicies + strings.Join(az.Policies(), "\n")
}

// leaseUsable is nil when the token in ctx may use lease l of view v (the rule above):
// ACLs not enforced, a management token, a token holding every policy of its owner,
// or, for a lease without owner, keys attached and every one readable (writable when
// write: renew, revoke, attach).
func leaseUsable(ctx context.Context, v *fsm.View, l fsm.Lease, write bool) error {
	az := authzOf(ctx)
	if az == nil || az.Right(api.RightAll) {
		return nil
	}
	if l.Owner == "" {
		if len(v.LeaseKeys(l.ID, 1)) == 0 {
			return fmt.Errorf("%w: lease %d has no owner and no key: only a management token has the right to use it",
				ErrForbidden, l.ID)
		}
		return leaseKeysAllowed(ctx, v, l.ID, write)
	}
	if names, ok := strings.CutPrefix(l.Owner, leaseOwnerPolicies); ok && az.HoldsPolicies(strings.Split(names, "\n")) {
		return nil
	}
	return fmt.Errorf("%w: lease %d is another token's: only a token holding every policy of the token that "+
		"granted it, or a management token, has the right to use it", ErrForbidden, l.ID)
}

// checkLeaseUsable is nil when the token in ctx may use lease id (leaseUsable). It
// looks in this node's view first — an owner never changes while its lease lives —
// and in a linearizable one only when this node has not applied the grant yet;
// ErrLeaseNotFound when neither holds it. Without ACLs it reads nothing: the state
// machine or the lessor answers for a lease that does not exist.
func (s *Server) checkLeaseUsable(ctx context.Context, id int64, write bool) error {
	if authzOf(ctx) == nil {
		return nil
	}
	for _, c := range []fsm.Consistency{fsm.Serializable, fsm.Linearizable} {
		v, err := s.viewAt(ctx, c, 0)
		if err != nil {
			return err
		}
		if l, ok := v.Lease(id); ok {
			return leaseUsable(ctx, v, l, write)
		}
	}
	return fmt.Errorf("lease %d: %w", id, fsm.ErrLeaseNotFound)
}

// checkTxnLeases refuses a transaction that attaches a key to a lease the token in
// ctx may not use (leaseUsable, write): a key of another tenant's lease would go with
// it, and its owner could no longer revoke it without the right on that key. A lease
// that does not exist is the state machine's to refuse.
func (s *Server) checkTxnLeases(ctx context.Context, txn *fsm.Txn) error {
	if authzOf(ctx) == nil || txn == nil {
		return nil
	}
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, o := range ops {
			var err error
			switch {
			case o.Type == fsm.OpTxn:
				err = s.checkTxnLeases(ctx, o.Txn)
			case o.Type == fsm.OpPut && o.Lease != 0:
				if err = s.checkLeaseUsable(ctx, o.Lease, true); errors.Is(err, fsm.ErrLeaseNotFound) {
					err = nil
				}
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// grantLease grants lease id (0: a new random ID) for ttl seconds and returns its ID;
// under ACLs the lease is the granting token's policies' (leaseOwner).
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
	owner := leaseOwner(authzOf(ctx))
	if len(owner) > fsm.MaxLeaseOwner {
		return 0, fmt.Errorf("lease grant: %w: the token's policies' names take %d bytes, a lease's owner at most %d",
			ErrInvalidParam, len(owner), fsm.MaxLeaseOwner)
	}
	if id == 0 {
		id = newLeaseID()
	}
	done, err := s.reserveLease(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("lease grant: %w", err)
	}
	_, err = s.apply(ctx, &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: id, LeaseTTL: ttl * 1000, LeaseOwner: owner})
	done(err == nil)
	if errors.Is(err, fsm.ErrLeaseExists) {
		return 0, fmt.Errorf("lease grant: %w: lease %d: %w", ErrConflict, id, err)
	}
	if err != nil {
		return 0, fmt.Errorf("lease grant: %w", err)
	}
	return id, nil
}

// revokeLease revokes lease id, deleting its keys in the same revision. Its caller
// (LeaseRevoke) has checked the lease right.
func (s *Server) revokeLease(ctx context.Context, id int64) (api.LeaseRevokeResponse, error) {
	if authzOf(ctx) != nil {
		v, err := s.viewAt(ctx, fsm.Linearizable, 0)
		if err != nil {
			return api.LeaseRevokeResponse{}, err
		}
		if l, ok := v.Lease(id); ok {
			if err := leaseUsable(ctx, v, l, true); err != nil {
				return api.LeaseRevokeResponse{}, err
			}
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
// Under ACLs the owner check reads this node's view (a linearizable one only when the
// grant has not reached it yet): a keepalive stays cheap. Its caller (LeaseKeepAlive)
// has checked the lease right.
func (s *Server) keepAliveLease(ctx context.Context, id int64) (time.Duration, error) {
	if err := s.checkLeaseUsable(ctx, id, true); err != nil {
		return 0, fmt.Errorf("lease keepalive: %w", err)
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
// time left from the leader; only to a token that may use it (leaseUsable) and read
// every key attached.
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
	if err := leaseUsable(ctx, v, l, false); err != nil {
		return api.LeaseResponse{}, err
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

// listLeases returns the leases the token may use (leaseUsable): without ACLs all, else
// its policies' (and, of leases without owner, those whose keys it may all read).
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
		if leaseUsable(ctx, v, l, false) == nil {
			resp.Leases = append(resp.Leases, api.LeaseInfo{ID: l.ID, GrantedTTL: l.TTL / 1000})
		}
	}
	return resp, nil
}
