package kv

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/raft"
)

// handleStatus serves GET /v1/status from local state; it never waits for a leader.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
	st := s.store.Status()
	resp := api.StatusResponse{
		NodeID: st.NodeID, State: fmt.Sprint(st.State), LeaderID: st.LeaderID,
		LeaderAddr: st.LeaderAddr, Term: st.Term, AppliedIndex: st.AppliedIndex,
		CommitIndex: st.CommitIndex, LastLogIndex: st.LastLogIndex,
		Members: make([]api.Member, 0, len(st.Members)),
	}
	for _, m := range st.Members {
		resp.Members = append(resp.Members, api.Member{ID: m.ID, Address: m.Address,
			Suffrage: fmt.Sprint(m.Suffrage), Leader: m.Leader})
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	view, err := s.store.View(ctx, raft.Serializable)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	resp.Revision, resp.CompactRevision = view.Revision(), view.CompactRevision()
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// handleHealth serves GET /healthz: 200 while the process can answer HTTP.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
	return nil
}

// handleReady serves GET /readyz: 200 only when the node knows a leader, has the
// cluster secret, has applied its log up to the commit index it knows, and every
// added check passes; otherwise 503 with every reason.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := s.readiness(ctx); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
	return nil
}

// readySecretWait bounds how long a readiness probe waits for the cluster secret.
const readySecretWait = 100 * time.Millisecond

// readiness returns nil when ready, or an ErrNotReady listing every failed condition.
func (s *Server) readiness(ctx context.Context) error {
	var problems []string
	st := s.store.Status()
	if st.LeaderID == "" {
		problems = append(problems, "no known leader")
	}
	if st.AppliedIndex < st.CommitIndex {
		problems = append(problems, fmt.Sprintf("applied index %d is behind commit index %d",
			st.AppliedIndex, st.CommitIndex))
	}
	secretCtx, cancel := context.WithTimeout(ctx, readySecretWait)
	defer cancel()
	if _, err := s.tokenCodec(secretCtx); err != nil {
		problems = append(problems, "cluster secret not yet applied")
	}
	s.ready.Lock()
	checks := append([]readyCheck(nil), s.ready.checks...)
	s.ready.Unlock()
	for _, c := range checks {
		if err := c.check(ctx); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", c.name, err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrNotReady, strings.Join(problems, "; "))
	}
	return nil
}
