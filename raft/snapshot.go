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
	snap := n.store.Snapshot()
	size, err = snap.WriteTo(w)
	return snap.AppliedIndex(), size, err
}

// RestoreSnapshot replaces the whole cluster's state with the snapshot in f (disaster
// recovery: hashicorp/raft installs it on the leader and then on every follower). The
// file is checked completely first, so a damaged or unreadable file changes nothing
// (fsm.ErrCorrupt, fsm.ErrNotSnapshot, fsm.ErrUnknownFormat); accept, when set, is then
// given the snapshot's cluster ID and may refuse it (a foreign backup). Only the
// leader can restore (ErrNotLeader).
func (n *Node) RestoreSnapshot(ctx context.Context, f *os.File, accept func(clusterID string) error) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	check := fsm.NewStore()
	if err := check.Restore(f); err != nil {
		return err
	}
	if accept != nil {
		id, _, _ := check.ClusterMeta()
		if err := accept(id); err != nil {
			return err
		}
	}
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if n.raft.State() != hraft.Leader {
		return fmt.Errorf("%w: send the restore to the leader", ErrNotLeader)
	}
	meta := &hraft.SnapshotMeta{Version: hraft.SnapshotVersionMax, Index: check.AppliedIndex(), Size: st.Size()}
	if err := n.raft.Restore(meta, f, n.cfg.ApplyTimeout); err != nil {
		return mapRaftErr(err)
	}
	// The restored state carries the applied index it was saved at, behind the log;
	// an empty command brings the state machine's index past the restore, so reads
	// waiting for the commit index are released at once.
	barrier, _ := fsm.EncodeCommand(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{}})
	if err := n.raft.Apply(barrier, n.cfg.ApplyTimeout).Error(); err != nil {
		return mapRaftErr(err)
	}
	n.log.Info("restored the cluster from a snapshot", "revision", check.Revision(), "bytes", st.Size())
	return nil
}
