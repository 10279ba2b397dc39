package kv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/internal/tlsutil"
	"github.com/keel-kv/keel/kv/acl"
	"github.com/keel-kv/keel/kv/api"
)

// Who may read the node's status (GET /v1/status, etcd's Maintenance.Status): one
// rule, here, for every door (statusAccess).
//
//   - ACLs not enforced (-acl-default allow, not bootstrapped): anyone, as every route.
//   - Enforced (bootstrapped, or -acl-default deny): a caller with a valid token, any
//     token, no right needed; or a node of the cluster (a verified node certificate
//     of the cluster CA, not revoked: a joining agent asks a member's Raft address
//     with it). This is etcd 3.7's rule (Status and MemberList need an authenticated
//     user, no role; v3rpc's requireAuthInfo), so a token that may run etcdctl may run
//     `etcdctl endpoint status`. Consul answers /v1/status/leader and /peers to anyone;
//     keel does not: the members' IDs and Raft addresses, the leader and the release
//     map the cluster for an attacker, and deny is the operator asking for closed.
//   - Anyone else gets the public view (publicStatus): whether the node uses TLS and
//     how its ACLs stand — what a client needs to learn that it must authenticate and
//     how. A door whose protocol has no such view (etcd's) refuses instead.
//
// Liveness and readiness (/healthz, /livez, /readyz, gRPC health) stay open: they
// tell a load balancer up or down, not who the cluster is. A token is checked against
// the node's local ACL state (a status must answer without a leader); an unknown one
// re-reads the records at the leader for at most statusAuthWait.

// ErrStatusNoToken refuses the whole status to a caller without a token while ACLs are
// enforced; it is an ErrUnauthorized (etcd's door answers it as etcd 3.7 answers a
// Status without a user: "user name is empty").
var ErrStatusNoToken = fmt.Errorf("%w: the node's status (its members, leader and release) needs a token "+
	"while ACLs are enforced", ErrUnauthorized)

// statusAuthWait bounds how long a status waits for the leader to confirm a token
// this node does not know yet.
const statusAuthWait = time.Second

// statusAccess is the status rule: nil for the whole status, ErrStatusNoToken for the
// public view, another ErrUnauthorized for a bad token. header is the request's
// Authorization header ("Bearer SECRET", "" for none), peer its TLS session.
func (s *Server) statusAccess(ctx context.Context, header string, peer func() *tls.ConnectionState) error {
	st, err := s.aclStateNow(ctx)
	if err != nil {
		return ErrStatusNoToken // fail closed: the public view
	}
	if !st.Enforced() && s.cfg.ACLDefault != ACLDeny { // never bootstrapped, or paused by etcd's auth disable
		return nil
	}
	if cs := peer(); cs != nil && len(cs.VerifiedChains) > 0 {
		if _, err := tlsutil.PeerNodeID(*cs); err == nil {
			return nil // a node of the cluster (CheckClientCert refused a revoked one)
		}
	}
	if header == "" || !st.Enforced() {
		return ErrStatusNoToken
	}
	secret, err := acl.ParseBearer(header)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnauthorized, err)
	}
	actx, cancel := context.WithTimeout(ctx, statusAuthWait)
	defer cancel()
	_, err = s.tokenAuthz(actx, st, acl.HashSecret(secret))
	return err
}

// StatusFor reports the node to a caller, as the status rule above allows: the whole
// status (Status), or the public view, or ErrUnauthorized for a bad token. header is
// the request's Authorization header ("Bearer SECRET", "" for none), peer its TLS
// session (nil on plain text).
func (s *Server) StatusFor(ctx context.Context, header string, peer func() *tls.ConnectionState) (api.StatusResponse, error) {
	switch err := s.statusAccess(ctx, header, peer); {
	case errors.Is(err, ErrStatusNoToken):
		return s.publicStatus(ctx), nil
	case err != nil:
		return api.StatusResponse{}, err
	}
	return s.status(ctx)
}

// CheckStatus is the status rule for a door whose protocol has no public view (etcd's
// Status): nil when the caller may read the whole status, else ErrUnauthorized.
func (s *Server) CheckStatus(ctx context.Context, secret string, peer func() *tls.ConnectionState) error {
	header := ""
	if secret != "" {
		header = "Bearer " + secret
	}
	return s.statusAccess(ctx, header, peer)
}

// publicStatus is what a caller without a token learns while ACLs are enforced.
func (s *Server) publicStatus(ctx context.Context) api.StatusResponse {
	resp := api.StatusResponse{TLS: s.cfg.TLS != nil, Insecure: s.cfg.Insecure, Restricted: true,
		Members: []api.Member{}}
	resp.ACL = s.aclStatus(ctx)
	return resp
}

// aclStatus is the ACL part of a status.
func (s *Server) aclStatus(ctx context.Context) *api.ACLStatus {
	a := &api.ACLStatus{Default: s.cfg.ACLDefault}
	if a.Default == "" {
		a.Default = ACLAllow
	}
	if on, err := s.ACLsEnabled(ctx); err == nil {
		a.Bootstrapped = on
	}
	return a
}

// status reports the node from local state; it never waits for a leader. Callers
// reach it through StatusFor's rule.
func (s *Server) status(ctx context.Context) (api.StatusResponse, error) {
	st := s.NodeStatus()
	resp := api.StatusResponse{
		NodeID: st.NodeID, Release: buildinfo.Version(), State: fmt.Sprint(st.State), LeaderID: st.LeaderID,
		LeaderAddr: st.LeaderAddr, Term: st.Term, AppliedIndex: st.AppliedIndex,
		CommitIndex: st.CommitIndex, LastLogIndex: st.LastLogIndex,
		Members: make([]api.Member, 0, len(st.Members)),
		TLS:     s.cfg.TLS != nil, Insecure: s.cfg.Insecure,
	}
	for _, m := range st.Members {
		if m.ID == st.NodeID {
			resp.RaftAddr = m.Address
		}
		resp.Members = append(resp.Members, api.Member{ID: m.ID, Address: m.Address,
			Suffrage: m.Suffrage.String(), Leader: m.Leader})
	}
	rev, compact, err := s.Revisions(ctx)
	if err != nil {
		return api.StatusResponse{}, fmt.Errorf("status: %w", err)
	}
	resp.Revision, resp.CompactRevision = rev, compact
	resp.ACL = s.aclStatus(ctx)
	return resp, nil
}

// readySecretWait bounds how long a readiness check waits for the cluster secret.
const readySecretWait = 100 * time.Millisecond

// ReadyCheck is one condition of the node's readiness: Err is nil when it holds (or
// a ReadyNote: it holds, with a note).
type ReadyCheck struct {
	Name string
	Err  error
}

// Note is the note of a check that holds with one (a ReadyNote).
func (c ReadyCheck) Note() (string, bool) {
	var n ReadyNote
	if errors.As(c.Err, &n) {
		return string(n), true
	}
	return "", false
}

// OK reports whether the check holds.
func (c ReadyCheck) OK() bool {
	_, noted := c.Note()
	return c.Err == nil || noted
}

// ReadyChecks evaluates every condition of the node's readiness, in a fixed order: a
// known leader, the log applied up to the commit index the node knows, the cluster
// secret, then every check added with AddReadyCheck.
func (s *Server) ReadyChecks(ctx context.Context) []ReadyCheck {
	st := s.store.Status()
	var out []ReadyCheck
	add := func(name string, err error) { out = append(out, ReadyCheck{name, err}) }
	if st.LeaderID == "" {
		add("leader", errors.New("no known leader"))
	} else {
		add("leader", nil)
	}
	if st.AppliedIndex < st.CommitIndex {
		add("applied", fmt.Errorf("applied index %d is behind commit index %d", st.AppliedIndex, st.CommitIndex))
	} else {
		add("applied", nil)
	}
	secretCtx, cancel := context.WithTimeout(ctx, readySecretWait)
	defer cancel()
	if _, err := s.tokenCodec(secretCtx); err != nil {
		add("cluster-secret", errors.New("cluster secret not yet applied"))
	} else {
		add("cluster-secret", nil)
	}
	s.ready.Lock()
	checks := append([]readyCheck(nil), s.ready.checks...)
	s.ready.Unlock()
	for _, c := range checks {
		add(c.name, c.check(ctx))
	}
	return out
}

// ReadyNote is what a ready check (AddReadyCheck) returns to pass with a note: it
// counts as passing and /readyz?verbose prints "[+]NAME ok: NOTE" (the phase of a
// key migration, say).
type ReadyNote string

func (n ReadyNote) Error() string { return string(n) }

// Ready returns nil when the node is ready, or an ErrNotReady listing every failed
// condition.
func (s *Server) Ready(ctx context.Context) error {
	var problems []string
	for _, c := range s.ReadyChecks(ctx) {
		if c.OK() {
			continue
		}
		if c.Name == "leader" || c.Name == "applied" || c.Name == "cluster-secret" {
			problems = append(problems, c.Err.Error())
		} else {
			problems = append(problems, fmt.Sprintf("%s: %v", c.Name, c.Err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrNotReady, strings.Join(problems, "; "))
	}
	return nil
}
