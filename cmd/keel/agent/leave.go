package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/keel-kv/keel/kv/api"
)

// Leave departs the cluster gracefully: a leader hands leadership over, the node is
// removed from the Raft configuration, and it announces its departure by gossip so
// peers record it as left rather than failed. The process should exit afterwards
// (Left is closed).
func (a *Agent) Leave(ctx context.Context) error {
	node := a.node
	if node.IsLeader() && len(node.Status().Members) > 1 {
		if err := node.TransferLeadership(ctx, ""); err != nil {
			return fmt.Errorf("leave: hand leadership over: %w", err)
		}
		// Wait to see another leader, so the removal below goes to it.
		for node.IsLeader() {
			select {
			case <-ctx.Done():
				return fmt.Errorf("leave: still the leader: %w", ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if len(node.Status().Members) > 1 {
		if err := node.RetireServer(ctx, a.cfg.NodeID); err != nil {
			return fmt.Errorf("leave: remove from the raft configuration: %w", err)
		}
	}
	if a.versions != nil {
		// Out of the cluster, this node must not register its entries again after the
		// leader has removed them.
		a.versions.Close()
	}
	if a.gossip != nil {
		if err := a.gossip.ml.Leave(ctx, 5*time.Second); err != nil {
			a.log.Warn("leave: gossip", "error", err)
		}
	}
	a.leaveOnce.Do(func() { close(a.left) })
	a.log.Info("left the cluster")
	return nil
}

// Left is closed once Leave has completed: the node is out of the cluster and its
// process should stop.
func (a *Agent) Left() <-chan struct{} { return a.left }

// handleLeave serves POST /v1/agent/leave.
func (a *Agent) handleLeave(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := a.Leave(ctx); err != nil {
		a.httpd.WriteError(w, r, err)
		return
	}
	writeAgentJSON(w, http.StatusOK, api.LeaveResponse{NodeID: a.cfg.NodeID, Left: true})
}
