package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keel-kv/keel/kv/api"
	"github.com/keel-kv/keel/kv/client"
	"github.com/keel-kv/keel/raft"
	"github.com/keel-kv/keel/raft/wal"
)

// A node whose Raft log is damaged in entries it may have acknowledged does not start
// (wal.ErrCorrupt): it must not vote or serve. Rebuilding it from its peers is one
// command and a restart, no file edited by hand:
//
//	keel rebuild -data-dir D -addr LIVE-MEMBER   Rebuild: the cluster removes the node
//	                                             (committed), then its Raft state moves
//	                                             to D/damaged-<time>/ and D/raft-rejoin
//	                                             is written (raft.MoveStateAside)
//	keel agent ... (as before)                   starts empty, rejoins as a non-voter,
//	                                             catches up from a snapshot and the log,
//	                                             is promoted once caught up
//
// The order is what keeps it safe: the cluster stops counting the node as a voter
// before it runs with an empty log. A data dir that lost its Raft state, or one part
// of it (the log, raft.db, a snapshot), without the rebuild does not start either
// (raft.ErrStateLost).

// RebuildPeer is what Rebuild needs of a live member's API (*client.Client has it).
type RebuildPeer interface {
	Status(ctx context.Context) (*api.StatusResponse, error)
	RemovePeer(ctx context.Context, id string) error
}

var _ RebuildPeer = (*client.Client)(nil)

// Rebuild prepares the stopped node of dataDir to be rebuilt from its peers: peer's
// cluster removes it from the Raft configuration (once that is committed), then its
// Raft state is moved aside and the data dir marked to rejoin as a non-voter (see
// above). The next start of the agent does the rest. It refuses while the node runs,
// and changes nothing on disk when the removal fails. Running it again is safe.
func Rebuild(ctx context.Context, dataDir string, peer RebuildPeer, now time.Time) (raft.RejoinRecord, error) {
	id, err := readNodeID(dataDir)
	if err != nil {
		return raft.RejoinRecord{}, err
	}
	rec := raft.RejoinRecord{NodeID: id, At: now}
	return raft.MoveStateAside(dataDir, rec, func(rec *raft.RejoinRecord) error {
		st, err := peer.Status(ctx)
		if err != nil {
			return fmt.Errorf("rebuild: ask a live member: %w", err)
		}
		if st.NodeID == id {
			return fmt.Errorf("rebuild: -addr reaches node %q itself; name a live member of its cluster", id)
		}
		if st.LeaderID == "" {
			return fmt.Errorf("rebuild: member %s knows no leader: the cluster cannot remove %q now", st.NodeID, id)
		}
		for _, m := range st.Members {
			if m.ID != id {
				rec.Peers = append(rec.Peers, m.Address)
			}
		}
		if err := peer.RemovePeer(ctx, id); err != nil && !client.IsNotFound(err) {
			return fmt.Errorf("rebuild: remove %q from the raft configuration: %w", id, err)
		}
		return waitRemoved(ctx, peer, id)
	})
}

// waitRemoved waits until the member's view of the configuration no longer lists id
// (a view refreshed from the committed change within a second).
func waitRemoved(ctx context.Context, peer RebuildPeer, id string) error {
	for i := 0; ; i++ {
		st, err := peer.Status(ctx)
		if err == nil {
			in := false
			for _, m := range st.Members {
				in = in || m.ID == id
			}
			if !in && st.LeaderID != "" {
				return nil
			}
		}
		if i == 100 {
			return fmt.Errorf("rebuild: %q still in the raft configuration after its removal", id)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rebuild: wait for the removal of %q: %w", id, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readNodeID reads the ID stored in dataDir, creating nothing.
func readNodeID(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, nodeIDFile))
	if err != nil {
		return "", fmt.Errorf("rebuild: %s is not a keel node's data dir: %w", dataDir, err)
	}
	id := strings.TrimSpace(string(b))
	if !nodeIDPattern.MatchString(id) {
		return "", fmt.Errorf("rebuild: %s holds %q, not a node id", filepath.Join(dataDir, nodeIDFile), id)
	}
	return id, nil
}

// withRebuildAdvice adds to a start that failed on damaged or lost Raft state what is
// damaged and the command that rebuilds the node; other errors pass unchanged.
func withRebuildAdvice(dataDir string, err error) error {
	var what string
	switch {
	case errors.Is(err, wal.ErrCorrupt):
		what = "This node's Raft log is damaged where a crash cannot explain it (the file, offset and cause are above):\n" +
			"entries it may have acknowledged are lost here, so it must not vote or serve. Nothing was changed on disk.\n" +
			raft.DescribeState(dataDir)
	case errors.Is(err, raft.ErrStateLost):
		what = "This node has lost Raft state it held (what is missing is said above), yet the cluster may still count it\n" +
			"as a voter: it must not vote or serve.\n"
	default:
		return err
	}
	return fmt.Errorf("%w\n\n%sRebuild it from its peers, which hold every committed entry: with this node stopped, run\n"+
		"  keel rebuild -data-dir %s -addr <HTTP address of a live member> [-token ...] [-ca-file ... -cert-file ... -key-file ...]\n"+
		"then start this agent as before. The cluster removes the node first; its Raft state is kept in %s;\n"+
		"the node rejoins as a non-voter, catches up from a snapshot and is promoted to voter once caught up.\n"+
		"See docs/operations.md, section \"Damaged log: rebuilding a node from its peers\"",
		err, what, dataDir, filepath.Join(dataDir, "damaged-<time>"))
}
