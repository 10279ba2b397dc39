package raft

import (
	"context"
	"fmt"
	"io"
	"os"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// SaveSnapshot writes a snapshot of the replicated state to w: it reflects every write
// acknowledged before the call (a linearizable read precedes it). It returns the log
// index the snapshot reflects and the bytes written.
func (n *Node) SaveSnapshot(ctx context.Context, w io.Writer) (index uint64, size int64, err error) {
	if _, err := n.View(ctx, fsm.Linearizable); err != nil {
		return 0, 0, err
	}
	// The cluster secret stays in the cluster: the saved file holds the ID only.
	snap := n.store.Snapshot()
	size, err = snap.WithIdentity(snap.ClusterID(), nil).WriteTo(w)
	return snap.AppliedIndex(), size, err
}

// RestoreSnapshot replaces the whole cluster's state with the snapshot read from r
// (disaster recovery: hashicorp/raft installs it on the leader and then on every
// follower). The snapshot is checked completely first, so a damaged or unreadable one
// changes nothing (fsm.ErrCorrupt, fsm.ErrNotSnapshot, fsm.ErrUnknownFormat); accept,
// when set, is then given the snapshot's cluster ID and may refuse it (a foreign
// backup). The restore replaces the data, never the cluster's identity: the restored
// state carries this cluster's own ID and secret, whatever the snapshot holds (a
// cluster that has none yet keeps the snapshot's). Only the leader can restore
// (ErrNotLeader).
func (n *Node) RestoreSnapshot(ctx context.Context, r io.Reader, accept func(clusterID string) error) error {
	check := fsm.NewStore()
	if err := check.Restore(r); err != nil {
		return err
	}
	snapID, snapSecret, _ := check.ClusterMeta()
	if accept != nil {
		if err := accept(snapID); err != nil {
			return err
		}
	}
	id, secret, ok := n.store.ClusterMeta()
	if !ok {
		id, secret = snapID, snapSecret
	}
	f, err := os.CreateTemp(n.cfg.DataDir, "restore-*.snap")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	size, err := check.Snapshot().WithIdentity(id, secret).WriteTo(f)
	if err != nil {
		return fmt.Errorf("raft: writing the snapshot to restore: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if n.raft.State() != hraft.Leader {
		return fmt.Errorf("%w: send the restore to the leader", ErrNotLeader)
	}
	meta := &hraft.SnapshotMeta{Version: hraft.SnapshotVersionMax, Index: check.AppliedIndex(), Size: size}
	if err := n.raft.Restore(meta, f, n.cfg.ApplyTimeout); err != nil {
		return n.mapApplyErr(err)
	}
	// Raft gives the restore a fresh index past its whole log (so fsmAdapter.Restore,
	// which refuses a snapshot older than the applied state, takes it on every node)
	// but commits no entry there; an empty command commits one past the restore, so
	// reads waiting for the commit index are released at once.
	barrier, _ := fsm.EncodeCommand(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{}})
	if err := n.raft.Apply(barrier, n.cfg.ApplyTimeout).Error(); err != nil {
		return n.mapApplyErr(err)
	}
	n.log.Info("restored the cluster from a snapshot", "revision", check.Revision(), "bytes", size)
	return nil
}
