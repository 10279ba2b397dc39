package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/keel-kv/keel/raft"
)

// Operator routes of one node, next to the kv API:
//
//	GET    /v1/agent/members           raft configuration joined with gossip state
//	DELETE /v1/agent/peers/{id}        remove a server from the raft configuration
//	POST   /v1/agent/transfer-leader   {"id": ""} hand leadership to id (or any voter)
//	POST   /v1/agent/leave             this node leaves the cluster and stops

// MemberInfo is one row of `keel members`.
type MemberInfo struct {
	ID          string `json:"id"`
	RaftAddr    string `json:"raft_addr,omitempty"`
	HTTPAddr    string `json:"http_addr,omitempty"`
	GossipAddr  string `json:"gossip_addr,omitempty"`
	Gossip      string `json:"gossip"`   // alive, dead, left, or none (no gossip)
	Suffrage    string `json:"suffrage"` // Voter, Nonvoter, or none (not in the raft configuration)
	Leader      bool   `json:"leader"`
	Release     string `json:"release,omitempty"`
	AppliedIdx  uint64 `json:"applied_index,omitempty"`
	TrailingBy  uint64 `json:"trailing_by"`
	LastContact string `json:"last_contact,omitempty"`
}

func (a *Agent) registerOperatorRoutes() {
	a.server.Handle("POST /v1/agent/leave", http.HandlerFunc(a.handleLeave))
	a.server.Handle("GET /v1/agent/members", http.HandlerFunc(a.handleMembers))
	a.server.Handle("DELETE /v1/agent/peers/{id}", http.HandlerFunc(a.handleRemovePeer))
	a.server.Handle("POST /v1/agent/transfer-leader", http.HandlerFunc(a.handleTransferLeader))
	a.server.Handle("GET /v1/agent/snapshot", http.HandlerFunc(a.handleSnapshotSave))
	a.server.Handle("POST /v1/agent/snapshot", http.HandlerFunc(a.handleSnapshotRestore))
	a.server.Handle("GET /v1/versions", http.HandlerFunc(a.handleVersions))
	a.server.Handle("GET /v1/migrations", http.HandlerFunc(a.handleMigrations))
	// /livez: the process is up and serving (Kubernetes' liveness probe); /readyz says
	// whether it can serve the API.
	a.server.Handle("GET /livez", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeAgentJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}))
}

// MembersInfo joins the raft configuration with gossip. Applied indexes and lag are
// asked of each server over the raft port (bounded by ctx); a server that does not
// answer shows no applied index.
func (a *Agent) MembersInfo(ctx context.Context) []MemberInfo {
	st := a.node.Status()
	last := a.node.LastIndex()
	rows := map[string]*MemberInfo{}
	var order []string
	for _, m := range st.Members {
		rows[m.ID] = &MemberInfo{ID: m.ID, RaftAddr: m.Address, Suffrage: m.Suffrage, Leader: m.Leader, Gossip: "none"}
		order = append(order, m.ID)
	}
	for _, g := range a.Members() {
		r, ok := rows[g.ID()]
		if !ok {
			r = &MemberInfo{ID: g.ID(), RaftAddr: g.Meta.RaftAddr, Suffrage: "none"}
			rows[g.ID()] = r
			order = append(order, g.ID())
		}
		r.HTTPAddr, r.GossipAddr, r.Gossip, r.Release = g.Meta.HTTPAddr, g.Addr, g.Status.String(), g.Meta.Release
		if !g.LastChange.IsZero() && g.Status.String() != "alive" {
			r.LastContact = time.Since(g.LastChange).Round(time.Second).String() + " ago"
		}
	}
	for _, id := range order {
		r := rows[id]
		if r.RaftAddr == "" || r.Suffrage == "none" {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		var applied uint64
		var err error
		if id == a.cfg.NodeID {
			applied = a.store.AppliedIndex()
		} else {
			applied, err = a.node.PeerAppliedIndex(pctx, r.RaftAddr)
		}
		cancel()
		if err != nil {
			continue
		}
		r.AppliedIdx = applied
		if last > applied {
			r.TrailingBy = last - applied
		}
	}
	out := make([]MemberInfo, 0, len(order))
	for _, id := range order {
		out = append(out, *rows[id])
	}
	return out
}

func (a *Agent) handleMembers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	writeAgentJSON(w, http.StatusOK, map[string]any{"members": a.MembersInfo(ctx)})
}

func (a *Agent) handleRemovePeer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	st := a.node.Status()
	found, voters := false, 0
	for _, m := range st.Members {
		found = found || m.ID == id
		if m.Suffrage == "Voter" {
			voters++
		}
	}
	switch {
	case !found:
		writeAgentError(w, http.StatusNotFound, "NotFound", fmt.Sprintf("%q is not in the raft configuration", id))
		return
	case voters <= 1:
		writeAgentError(w, http.StatusBadRequest, "BadRequest", "refusing to remove the last voter")
		return
	}
	if err := a.node.RemoveServer(ctx, id); err != nil {
		writeAgentError(w, statusOf(err), "Unavailable", err.Error())
		return
	}
	writeAgentJSON(w, http.StatusOK, map[string]any{"removed": id})
}

func (a *Agent) handleTransferLeader(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID string `json:"id"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
			writeAgentError(w, http.StatusBadRequest, "BadRequest", "body: "+err.Error())
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := a.node.TransferLeadership(ctx, req.ID); err != nil {
		writeAgentError(w, statusOf(err), "Unavailable", err.Error())
		return
	}
	writeAgentJSON(w, http.StatusOK, map[string]any{"transferred": true, "to": req.ID})
}

func statusOf(err error) int {
	if errors.Is(err, raft.ErrNoLeader) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrTimeout) ||
		errors.Is(err, raft.ErrShutdown) {
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

func writeAgentJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeAgentError(w http.ResponseWriter, code int, reason, msg string) {
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeAgentJSON(w, code, map[string]any{"code": code, "reason": reason, "message": msg})
}
