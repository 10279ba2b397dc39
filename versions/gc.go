package versions

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/keel-kv/keel/fsm"
	"github.com/keel-kv/keel/raft"
)

// collect is the leader's garbage collector of StorageVersion entries: an entry goes
// when its node has been dead (or absent from membership) for GCAfter, and an object
// left without entries is deleted. Every update is a compare-and-swap on the revision
// the decision was made at, so an entry a restarted node registered meanwhile (a new
// incarnation) is never removed: its write moved the revision and this CAS fails.
func (m *Manager) collect(ctx context.Context, members []Member) error {
	view, err := m.cfg.Store.View(ctx, raft.Linearizable)
	if err != nil {
		return err
	}
	prefix := []byte(storageVersionsKey)
	kvs, _, err := view.Range(prefix, fsm.PrefixEnd(prefix), 0, 0)
	if err != nil {
		return err
	}
	now := time.Now()
	for _, kv := range kvs {
		sv, err := decodeStorageVersion(kv.Value, kv.ModRevision)
		if err != nil {
			m.log.Error("undecodable storage version object", "key", string(bytes.TrimPrefix(kv.Key, prefix)), "error", err)
			continue
		}
		next := *sv
		next.StorageVersions = slices.Clone(sv.StorageVersions)
		removed := false
		for _, e := range sv.StorageVersions {
			if m.gone(members, e, now) && next.Remove(e.NodeID) {
				removed = true
				m.log.Info("removing storage version entry of departed node", "resource", sv.Resource,
					"node", e.NodeID, "incarnation", e.Incarnation)
			}
		}
		if !removed {
			continue
		}
		var value []byte
		if len(next.StorageVersions) > 0 {
			next.Recompute(now)
			value = next.encode()
		}
		if _, err := m.cas(ctx, string(kv.Key), sv.Revision, value); err != nil {
			return err
		}
	}
	return nil
}

// gone reports whether e's node left: dead or left for GCAfter, or absent from
// membership for GCAfter since this manager started (so a leader that just started,
// whose gossip has not met everyone yet, removes nothing).
func (m *Manager) gone(members []Member, e ServerStorageVersion, now time.Time) bool {
	if e.NodeID == m.cfg.NodeID {
		return false
	}
	for _, mb := range members {
		if mb.ID != e.NodeID {
			continue
		}
		if mb.Alive {
			return false
		}
		return !mb.Since.IsZero() && now.Sub(mb.Since) >= m.cfg.GCAfter
	}
	return now.Sub(m.start) >= m.cfg.GCAfter
}
