package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/kv"
	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/httpapi"
	"github.com/keel-kv/keel/raft"
)

// Operator routes of one node, next to the kv API: their paths and bodies are in kv/api
// (api.PathAgentMembers and the rest), where the Go client finds them too; PUT
// /v1/agent/schema (api.PathAgentSchema) replaces this node's schema (schema.go).

// MemberInfo is one row of `keel members`.
type MemberInfo = api.MemberInfo

func (a *Agent) registerOperatorRoutes() {
	a.httpd.Handle("POST "+api.PathAgentLeave, http.HandlerFunc(a.handleLeave))
	a.httpd.Handle("GET "+api.PathAgentMembers, http.HandlerFunc(a.handleMembers))
	a.httpd.Handle("DELETE "+api.PathAgentPeers+"{id}", http.HandlerFunc(a.handleRemovePeer))
	a.httpd.Handle("POST "+api.PathAgentTransferLeader, http.HandlerFunc(a.handleTransferLeader))
	a.httpd.Handle("GET "+api.PathAgentSnapshot, http.HandlerFunc(a.handleSnapshotSave))
	a.httpd.Handle("POST "+api.PathAgentSnapshot, http.HandlerFunc(a.handleSnapshotRestore))
	a.httpd.Handle("GET "+api.PathVersions, http.HandlerFunc(a.handleVersions))
	a.httpd.Handle("PUT "+api.PathAgentSchema, http.HandlerFunc(a.handleApplySchema))
	a.registerMigrationRoutes()
	a.registerKeyMigrationRoutes()
	// /livez: the process is up and serving (Kubernetes' liveness probe); /readyz says
	// whether it can serve the API.
	a.httpd.Handle("GET "+api.PathLive, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
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
		rows[m.ID] = &MemberInfo{ID: m.ID, RaftAddr: m.Address, Suffrage: m.Suffrage.String(), Leader: m.Leader, Gossip: "none"}
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
		r.Leader = r.Leader && stillLeading(r.Gossip, err)
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

// stillLeading says whether a member this node's Raft still names leader may be shown
// as such: not when gossip has declared it dead or gone, nor when it did not answer
// the applied-index probe just now. Raft forgets a dead leader only after the heartbeat
// timeout (1 s), so `keel members` showed a killed leader as LEADER true meanwhile.
func stillLeading(gossip string, probeErr error) bool {
	switch gossip {
	case "dead", "left":
		return false
	}
	return probeErr == nil
}

func (a *Agent) handleMembers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	writeAgentJSON(w, http.StatusOK, api.MembersResponse{Members: a.MembersInfo(ctx)})
}

func (a *Agent) handleRemovePeer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := a.server.RemoveMember(ctx, httpapi.CallerOf(r), id); err != nil {
		a.httpd.WriteError(w, r, fmt.Errorf("remove %q: %w", id, err))
		return
	}
	writeAgentJSON(w, http.StatusOK, api.RemovePeerResponse{Removed: id})
}

// RemoveMember removes node id from the Raft configuration for good (RetireServer:
// with TLS its certificates are revoked): kv.ErrNotMember when it is not in it,
// kv.ErrLastVoter while the configuration has one voter (kv.Operator; DELETE
// /v1/agent/peers/ID).
func (a *Agent) RemoveMember(ctx context.Context, id string) error {
	found, voters := false, 0
	for _, m := range a.node.Status().Members {
		found = found || m.ID == id
		if m.Suffrage == hraft.Voter {
			voters++
		}
	}
	switch {
	case !found:
		return fmt.Errorf("%w: %q is not in the raft configuration", kv.ErrNotMember, id)
	case voters <= 1:
		return kv.ErrLastVoter
	}
	return a.node.RetireServer(ctx, id)
}

// DataSize is the bytes of the regular files under the node's data directory: its
// Raft log, stable store and snapshots (kv.Operator).
func (a *Agent) DataSize() (int64, error) {
	var size int64
	err := filepath.WalkDir(a.cfg.DataDir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // a file removed meanwhile (a WAL segment, an old snapshot)
			}
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
			}
		}
		return nil
	})
	return size, err
}

func (a *Agent) handleTransferLeader(w http.ResponseWriter, r *http.Request) {
	var req api.TransferLeaderRequest
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil {
			a.httpd.WriteError(w, r, bodyError(err))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := a.server.TransferLeadership(ctx, httpapi.CallerOf(r), req.ID); err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	writeAgentJSON(w, http.StatusOK, api.TransferLeaderResponse{Transferred: true, To: req.ID})
}

// TransferLeadership hands leadership to id (any voter when id is ""):
// kv.ErrNotVoter (400, what keel transfer-leader explains; etcd's bad leader
// transferee) when id is no voter of the Raft configuration (kv.Operator; POST
// /v1/agent/transfer-leader, etcd's MoveLeader).
func (a *Agent) TransferLeadership(ctx context.Context, id string) error {
	if id != "" && !slices.ContainsFunc(a.node.Status().Members, func(m raft.Member) bool {
		return m.ID == id && m.Suffrage == hraft.Voter
	}) {
		return fmt.Errorf("transfer leadership: %w: %q is not a voter of the raft configuration", kv.ErrNotVoter, id)
	}
	return a.node.TransferLeadership(ctx, id)
}

func writeAgentJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}
