package kv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/kv/api"
)

// Status reports the node from local state (GET /v1/status); it never waits for a
// leader. It needs no token.
func (s *Server) Status(ctx context.Context) (api.StatusResponse, error) {
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
	resp.ACL = &api.ACLStatus{Default: s.cfg.ACLDefault}
	if resp.ACL.Default == "" {
		resp.ACL.Default = ACLAllow
	}
	if on, err := s.ACLsEnabled(ctx); err == nil {
		resp.ACL.Bootstrapped = on
	}
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
