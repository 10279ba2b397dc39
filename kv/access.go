package kv

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
)

// Access: who a request runs for (authenticate, the node's ACL state) and what its
// token may touch (checkKey, readFilter, listRights, checkTxnAccess). Every right
// decision is the ACL engine's (kv/acl); the core asks it, for every door.

// CheckClientCert is the client-certificate rule (Config.RequireClientCert) for every
// door: peer returns the request's TLS session (nil on a plain-text port; asked only
// when the rule needs it: reading a TLS session's state costs a copy and a lock). It
// refuses with an ErrClientCertRequired, which tells the client how to get one:
//   - a request without a client certificate the cluster CA verified, when the node
//     requires one;
//   - a verified certificate the cluster revoked: a retired node's, in the replicated
//     list of retired nodes (raft/revoke.go; the Store's CertRevoker). One list for
//     every port: the Raft port checks it at the handshake, the client ports here, on
//     every request, so a connection opened before the removal is refused too.
//
// Health checks are the door's to exempt (load balancers probe without a certificate).
func (s *Server) CheckClientCert(peer func() *tls.ConnectionState) error {
	if !s.cfg.RequireClientCert && s.revoker == nil {
		return nil
	}
	cs := peer()
	if cs == nil || len(cs.VerifiedChains) == 0 {
		if !s.cfg.RequireClientCert {
			return nil
		}
		return fmt.Errorf("%w: this node requires a client certificate signed by the cluster CA "+
			"(keel tls cert create -client NAME; -cert-file/-key-file)", ErrClientCertRequired)
	}
	if s.revoker != nil {
		if err := s.revoker.CheckClientCert(*cs); err != nil {
			return fmt.Errorf("%w: %v; a removed node's certificate is refused on every port "+
				"(a client uses a client certificate: keel tls cert create -client NAME)", ErrClientCertRequired, err)
		}
	}
	return nil
}

// CertRevoker is implemented by a Store that keeps the cluster's list of revoked
// certificates (*raft.Node: the retired nodes'); CheckClientCert asks it on a node
// with TLS. It returns an error naming why cs's certificate is refused, nil if not.
type CertRevoker interface {
	CheckClientCert(cs tls.ConnectionState) error
}

type authzKey struct{}

// authzOf returns the authorizer a core call runs for (Caller.context put it in ctx):
// nil when ACLs are not enforced.
func authzOf(ctx context.Context) *acl.Authorizer {
	a, _ := ctx.Value(authzKey{}).(*acl.Authorizer)
	return a
}

// minLinearizableRefresh bounds how often an unknown token makes the node re-read the
// ACL records at the leader (a token created a moment ago may not be applied here).
const minLinearizableRefresh = 100 * time.Millisecond

// authenticate resolves the Authorization header: (nil, nil) when ACLs are not
// enforced, the token's authorizer, or ErrUnauthorized. Errors never hold the token.
func (s *Server) authenticate(ctx context.Context, header string) (*acl.Authorizer, error) {
	st, err := s.aclStateConfirmed(ctx)
	if err != nil {
		return nil, err
	}
	if !st.Enforced() {
		if err := s.notBootstrapped(); err != nil && header == "" {
			return nil, noToken{err}
		}
		return nil, s.notBootstrapped()
	}
	secret, err := acl.ParseBearer(header)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	return s.tokenAuthz(ctx, st, acl.HashSecret(secret))
}

// noToken is a refusal of a request that carries no token (under -acl-default deny
// before a bootstrap): it is also an acl.ErrNoToken, so that the etcd door answers
// etcd's "user name is empty" (answered once) rather than "invalid auth token" (which
// etcd clients retry). Its message is err's.
type noToken struct{ error }

func (e noToken) Unwrap() error        { return e.error }
func (e noToken) Is(target error) bool { return target == acl.ErrNoToken }

// aclStateConfirmed returns the node's ACL state, read at the leader at least once.
func (s *Server) aclStateConfirmed(ctx context.Context) (*acl.State, error) {
	st, err := s.aclStateNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("acl state: %w", err)
	}
	if !s.aclConfirmed.Load() {
		// A node that has just started (or joined) may not have applied the ACL records
		// yet: its empty state would say "not bootstrapped" and let everything through
		// (allow) or refuse everything (deny). Until one read at the leader has shown it
		// the records, it asks the leader; the watch keeps it current afterwards.
		if st, err = s.reloadACL(ctx, fsm.Linearizable); err != nil {
			return nil, fmt.Errorf("acl state: %w", err)
		}
		s.aclConfirmed.Store(true)
	}
	return st, nil
}

// notBootstrapped is what a request gets before the ACL system is bootstrapped: nil
// (not enforced) under -acl-default allow, ErrUnauthorized under deny.
func (s *Server) notBootstrapped() error {
	if s.cfg.ACLDefault == ACLDeny {
		return fmt.Errorf("%w: ACLs are on (-acl-default deny) and the cluster's ACL system is not "+
			"bootstrapped yet: run `keel acl bootstrap`", ErrUnauthorized)
	}
	return nil
}

// tokenAuthz returns the authorizer of the token whose secret hashes to h in st, or
// ErrUnauthorized. An unknown token makes the node re-read the records at the leader
// (at most every minLinearizableRefresh): it may have been created a moment ago.
func (s *Server) tokenAuthz(ctx context.Context, st *acl.State, h acl.SecretHash) (*acl.Authorizer, error) {
	t := st.Lookup(h)
	if t == nil {
		now := time.Now().UnixNano()
		if last := s.aclRefresh.Load(); now-last > int64(minLinearizableRefresh) && s.aclRefresh.CompareAndSwap(last, now) {
			if st2, err := s.reloadACL(ctx, fsm.Linearizable); err == nil {
				t = st2.Lookup(h)
			}
		}
	}
	if t == nil {
		return nil, fmt.Errorf("%w: %v", ErrUnauthorized, acl.ErrUnknownToken)
	}
	if t.Expired(time.Now()) {
		return nil, t.ExpiredError()
	}
	return t.Authorizer(), nil
}

// checkKey refuses the request unless its token may read (write) key.
func checkKey(ctx context.Context, key []byte, write bool) error {
	if az := authzOf(ctx); az != nil && !az.Key(key, write) {
		return acl.ForbiddenKey(key, write)
	}
	return nil
}

// readFilter returns nil when the token may read every key of [start, end), a
// per-key filter when it may read some of them, and ErrForbidden when none.
func readFilter(ctx context.Context, start, end []byte) (func(key []byte) bool, error) {
	az := authzOf(ctx)
	if az == nil || az.Span(start, end, false) {
		return nil, nil
	}
	if !az.Some(start, end) {
		return nil, acl.ForbiddenRange(start, end, false)
	}
	return func(key []byte) bool { return az.Key(key, false) }, nil
}

// listRights returns the token whose key rights filter a list of [start, end): nil
// when it may read every key of it (or ACLs are not enforced), ErrForbidden when it
// may read none.
func listRights(ctx context.Context, start, end []byte) (*acl.Authorizer, error) {
	az := authzOf(ctx)
	if az == nil || az.Span(start, end, false) {
		return nil, nil
	}
	if !az.Some(start, end) {
		return nil, acl.ForbiddenRange(start, end, false)
	}
	return az, nil
}

// checkTxnAccess refuses a KV API transaction unless az (nil: ACLs not enforced) may
// read every key (or range) it compares or gets and write every key it puts or
// deletes, in both branches, nested transactions (OpTxn) included. A put's lease is
// checkTxnLeases' (core_lease.go).
func checkTxnAccess(az *acl.Authorizer, txn *fsm.Txn) error {
	if az == nil || txn == nil {
		return nil
	}
	for _, c := range txn.Compares {
		if c.End != nil {
			if !az.Span(c.Key, c.End, false) {
				return acl.ForbiddenRange(c.Key, c.End, false)
			}
		} else if !az.Key(c.Key, false) {
			return acl.ForbiddenKey(c.Key, false)
		}
	}
	for _, ops := range [][]fsm.Op{txn.Success, txn.Failure} {
		for _, o := range ops {
			if err := opAccess(az, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// opAccess refuses op of a transaction unless az may read (write) what it touches.
func opAccess(az *acl.Authorizer, o fsm.Op) error {
	switch {
	case o.Type == fsm.OpTxn:
		return checkTxnAccess(az, o.Txn) // both branches: either may run
	case o.Type == fsm.OpDeleteRange:
		if !az.Span(o.Key, o.End, true) {
			return acl.ForbiddenRange(o.Key, o.End, true)
		}
	case o.Type == fsm.OpGet && o.End != nil:
		if !az.Span(o.Key, o.End, false) {
			return acl.ForbiddenRange(o.Key, o.End, false)
		}
	default:
		if write := o.Type != fsm.OpGet; !az.Key(o.Key, write) {
			return acl.ForbiddenKey(o.Key, write)
		}
	}
	return nil
}
