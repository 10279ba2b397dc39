package kv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/keel-kv/keel/internal/buildinfo"
	"github.com/keel-kv/keel/kv/api"
)

// handleStatus serves GET /v1/status from local state; it never waits for a leader.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseParams(r); err != nil {
		return err
	}
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
	ctx, cancel := s.requestContext(r)
	defer cancel()
	rev, compact, err := s.Revisions(ctx)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	resp.Revision, resp.CompactRevision = rev, compact
	resp.ACL = &api.ACLStatus{Default: s.cfg.ACLDefault}
	if resp.ACL.Default == "" {
		resp.ACL.Default = ACLAllow
	}
	if on, err := s.ACLsEnabled(ctx); err == nil {
		resp.ACL.Bootstrapped = on
	}
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
	if r.URL.Query().Has("verbose") {
		s.writeVerboseReady(w, ctx)
		return nil
	}
	if err := s.readiness(ctx); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
	return nil
}

// readySecretWait bounds how long a readiness probe waits for the cluster secret.
const readySecretWait = 100 * time.Millisecond

// checkResult is one condition of /readyz: nil err when it holds.
type checkResult struct {
	name string
	err  error
}

// readinessChecks evaluates every condition of /readyz, in a fixed order.
func (s *Server) readinessChecks(ctx context.Context) []checkResult {
	st := s.store.Status()
	var out []checkResult
	add := func(name string, err error) { out = append(out, checkResult{name, err}) }
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

// ReadyNote is what a ready check (AddReadyCheck) returns to pass with a note: /readyz
// counts it as passing and /readyz?verbose prints "[+]NAME ok: NOTE" (the phase of a
// key migration, say).
type ReadyNote string

func (n ReadyNote) Error() string { return string(n) }

// readyNote returns the note of a passing check's result, if it is one.
func readyNote(err error) (string, bool) {
	var n ReadyNote
	if errors.As(err, &n) {
		return string(n), true
	}
	return "", false
}

// readiness returns nil when ready, or an ErrNotReady listing every failed condition.
func (s *Server) readiness(ctx context.Context) error {
	var problems []string
	for _, c := range s.readinessChecks(ctx) {
		if _, ok := readyNote(c.err); c.err == nil || ok {
			continue
		}
		if c.name == "leader" || c.name == "applied" || c.name == "cluster-secret" {
			problems = append(problems, c.err.Error())
		} else {
			problems = append(problems, fmt.Sprintf("%s: %v", c.name, c.err))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrNotReady, strings.Join(problems, "; "))
	}
	return nil
}

// writeVerboseReady answers /readyz?verbose like Kubernetes: one [+] or [-] line per
// check, then the verdict; 200 when every check passes, else 503.
func (s *Server) writeVerboseReady(w http.ResponseWriter, ctx context.Context) {
	var b strings.Builder
	ok := true
	for _, c := range s.readinessChecks(ctx) {
		if note, isNote := readyNote(c.err); isNote {
			fmt.Fprintf(&b, "[+]%s ok: %s\n", c.name, note)
		} else if c.err == nil {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
		} else {
			ok = false
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, c.err)
		}
	}
	code := http.StatusOK
	if ok {
		b.WriteString("readyz check passed\n")
	} else {
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
		b.WriteString("readyz check failed\n")
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, b.String())
}
