package kv

import (
	"context"

	"github.com/hashicorp/go-hclog"
	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/raft"
)

// The service core: the operations keel offers, as Go methods that take the caller's
// identity (a Caller) and return typed results and typed errors (the Err* sentinels of
// errors.go, fsm's and raft's). A door in a package of its own (kv/etcdv3) decodes its
// protocol, calls these methods and encodes their answers; it states no right, limit,
// reserved prefix or validation of its own. This file holds identity, admission and the
// node's status; core_kv.go the reads, writes, leases and watches.

// Caller is who a request runs for: the rights of its token as the core resolved them
// (Authenticate), and the address it came from (for per-client bounds). The zero
// Caller is one whose rights are not checked: a server whose ACLs are not enforced.
type Caller struct {
	az *acl.Authorizer // nil: ACLs not enforced
}

// Enforced reports whether the caller's rights are checked (ACLs are enforced).
func (c Caller) Enforced() bool { return c.az != nil }

// context returns ctx carrying c's rights, where the core's checks read them.
func (c Caller) context(ctx context.Context) context.Context {
	if c.az == nil || authzOf(ctx) == c.az { // the HTTP door's authorize put it there
		return ctx
	}
	return context.WithValue(ctx, authzKey{}, c.az)
}

// Authenticate resolves a token's secret ("" for none) into a Caller: the zero Caller
// when ACLs are not enforced, the token's rights, or ErrUnauthorized. Errors never hold
// the secret.
func (s *Server) Authenticate(ctx context.Context, secret string) (Caller, error) {
	header := ""
	if secret != "" {
		header = "Bearer " + secret
	}
	return s.AuthenticateHeader(ctx, header)
}

// AuthenticateHeader is Authenticate for the value of an HTTP Authorization header
// ("Bearer SECRET", "" for none): a malformed one is ErrUnauthorized, once ACLs are
// enforced.
func (s *Server) AuthenticateHeader(ctx context.Context, header string) (Caller, error) {
	az, err := s.authenticate(ctx, header)
	if err != nil {
		return Caller{}, err
	}
	return Caller{az: az}, nil
}

// Refresh returns c with the rights its token holds now: a long-lived stream
// authenticates once but is checked against every policy change. A token deleted or
// expired since is ErrUnauthorized.
func (s *Server) Refresh(c Caller) (Caller, error) {
	az, err := s.current(c.az)
	if err != nil {
		return Caller{}, err
	}
	return Caller{az: az}, nil
}

// ACLsEnabled reports whether the cluster's ACLs are enforced: bootstrapped, and not
// paused by etcd's auth disable.
func (s *Server) ACLsEnabled(ctx context.Context) (bool, error) {
	st, err := s.aclStateNow(ctx)
	if err != nil {
		return false, err
	}
	return st.Enforced(), nil
}

// AdmitRequest takes a slot for one request in flight from the client at addr (its
// "host:port" or host; "" when unknown): the node's and the per-client bound every
// door shares, the client counted by host. It is nil or ErrTooManyRequests;
// ReleaseRequest(addr) gives an admitted request's slot back.
func (s *Server) AdmitRequest(addr string) error {
	if !s.acquireRequest(hostOf(addr)) {
		return s.tooManyRequests()
	}
	return nil
}

// ReleaseRequest gives back the slot AdmitRequest(addr) took.
func (s *Server) ReleaseRequest(addr string) { s.releaseRequest(hostOf(addr)) }

// Config is the configuration the server was made with (limits, TLS, timeouts).
func (s *Server) Config() Config { return s.cfg }

// Logger is the server's logger.
func (s *Server) Logger() hclog.Logger { return s.log }

// LeaderContact is nil while the node has leader contact, and says why not otherwise
// (raft.ErrNoLeader): the check of a request that asks for require-leader semantics.
func (s *Server) LeaderContact() error { return s.leaderContact() }

// LeaderLost is live while the node has leader contact and is cancelled, with a
// raft.ErrNoLeader cause, once it loses it; nil for a store that cannot lose it.
func (s *Server) LeaderLost() context.Context { return s.contactContext() }

// StreamLeaderLost is live until the node has been without leader contact for the
// stream grace (raft.StreamGraceTimeouts election timeouts, etcd's) and is then
// cancelled with a raft.ErrNoLeader cause; nil for a store that cannot lose contact.
// Long streams that require a leader end on it rather than on LeaderLost, so that an
// election does not end them: etcd's rule for require-leader streams.
func (s *Server) StreamLeaderLost() context.Context {
	if sc, ok := s.store.(interface{ StreamContext() context.Context }); ok {
		return sc.StreamContext()
	}
	return s.contactContext()
}

// Stopping is closed once the server shuts down: long-lived streams end then.
func (s *Server) Stopping() <-chan struct{} { return s.watchStop }

// NodeStatus reports the node's Raft state without blocking.
func (s *Server) NodeStatus() raft.Status { return s.store.Status() }

// Term is the node's current Raft term.
func (s *Server) Term() uint64 {
	if r, ok := s.store.(interface{ Raft() *hraft.Raft }); ok && r.Raft() != nil {
		return r.Raft().CurrentTerm()
	}
	return s.store.Status().Term
}

// ClusterID is the cluster's ID, once the cluster metadata is applied (false before,
// or for a store that does not expose it).
func (s *Server) ClusterID() (string, bool) {
	ms, ok := s.store.(interface{ Store() *fsm.Store })
	if !ok {
		return "", false
	}
	id, _, ok := ms.Store().ClusterMeta()
	return id, ok
}

// Revisions are the node's applied revision and compact revision (a serializable
// view: no round trip), for answers that read nothing else.
func (s *Server) Revisions(ctx context.Context) (rev, compact int64, err error) {
	v, err := s.store.View(ctx, fsm.Serializable)
	if err != nil {
		return 0, 0, err
	}
	return v.Revision(), v.CompactRevision(), nil
}

// Hidden reports whether key is one a plain keyspace leaves out: keel's own records
// and the keys of typed resources (reserved.go), which the KV API may not write.
func (s *Server) Hidden(key []byte) bool { return s.reservedKey(key) }

// RequestContext bounds the store work of one request by the configured
// RequestTimeout.
func (s *Server) RequestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// CheckRight is nil when c holds the operator right (api.Right*: compact, members,
// peers, snapshot, acl, ...) or ACLs are not enforced, and acl.ForbiddenRight
// otherwise. The core's operator methods call it; a door calls it only for an
// operation the core does not serve (the agent's operator routes).
func (s *Server) CheckRight(c Caller, right string) error { return checkRight(c.az, right) }

func checkRight(az *acl.Authorizer, right string) error {
	if az != nil && !az.Right(right) {
		return acl.ForbiddenRight(right)
	}
	return nil
}

// leaderContact is nil while the node has leader contact (always, for a store that
// cannot lose it), and says why not otherwise.
func (s *Server) leaderContact() error {
	if lc, ok := s.store.(interface{ LeaderContact() error }); ok {
		return lc.LeaderContact()
	}
	return nil
}
