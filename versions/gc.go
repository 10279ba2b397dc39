package versions

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// collect is the leader's garbage collector of StorageVersion entries. An entry goes
// when its node
//
//	left gracefully (gossip status left)              at the next round
//	is dead, or absent from membership,               after GCAfter
//	is alive in a new life that does not serve it     at the next round
//	  (restarted with a schema without the resource: another incarnation, and its
//	  gossip metadata does not list the resource)
//
// A record left without entries (no node serves the resource) is deleted, and so is
// the resource's StorageState once no object of the resource is stored. Every update
// is a compare-and-swap on the revision the decision was made at, so an entry a
// restarted node registered meanwhile (a new incarnation) is never removed: its write
// moved the revision and this CAS fails.
func (m *Manager) collect(ctx context.Context, members []Member) error {
	view, err := m.cfg.Store.View(ctx, fsm.Linearizable)
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
			if why := m.stale(members, sv.Resource, e, now); why != "" && next.Remove(e.NodeID) {
				removed = true
				m.log.Info("removing storage version entry", "resource", sv.Resource, "node", e.NodeID,
					"incarnation", e.Incarnation, "reason", why)
			}
		}
		if !removed && len(next.StorageVersions) > 0 {
			continue
		}
		var value []byte
		if len(next.StorageVersions) > 0 {
			next.Recompute(now)
			value = next.encode()
		} else {
			m.log.Info("no node serves the resource any more: deleting its StorageVersion record", "resource", sv.Resource)
		}
		ok, err := m.cas(ctx, string(kv.Key), sv.Revision, value)
		if err != nil {
			return err
		}
		if ok && value == nil {
			if err := m.dropStorageState(ctx, view, sv.Resource); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropStorageState deletes the StorageState of a resource no node serves once nothing
// of it is stored: neither tagged objects (exact counts) nor, at its last heartbeat,
// untagged ones. While objects remain, the record stays: it tells a node that serves
// the resource again (and `keel upgrade check`) which versions they are in.
func (m *Manager) dropStorageState(ctx context.Context, view *fsm.View, resource string) error {
	for _, n := range TagCounts(view, resource) {
		if n > 0 {
			return nil
		}
	}
	kv, found, err := recordAt(view, StorageStateKey(resource))
	if err != nil || !found {
		return err
	}
	ss, err := storageStateAt(view, resource)
	if err != nil {
		return err
	}
	for _, n := range ss.ObjectCounts {
		if n > 0 {
			return nil
		}
	}
	_, err = m.cas(ctx, string(kv.Key), kv.ModRevision, nil)
	return err
}

// stale says why e, the entry of resource, should go ("" when it stays): its node
// left, has been dead or absent from membership for GCAfter (absence counted from
// this manager's start, so a leader that just started, whose gossip has not met
// everyone yet, removes nothing), or lives on in a new incarnation that does not
// serve resource.
func (m *Manager) stale(members []Member, resource string, e ServerStorageVersion, now time.Time) string {
	if e.NodeID == m.cfg.NodeID {
		if m.Schema().LookupKey(resource) == nil {
			return "this node no longer serves the resource"
		}
		return ""
	}
	for _, mb := range members {
		if mb.ID != e.NodeID {
			continue
		}
		switch {
		case mb.Left:
			return "the node left the cluster"
		case !mb.Alive && !mb.Since.IsZero() && now.Sub(mb.Since) >= m.cfg.GCAfter:
			return "the node has been dead for " + m.cfg.GCAfter.String()
		case mb.Alive && mb.Incarnation != 0 && e.Incarnation != 0 && mb.Incarnation != e.Incarnation &&
			!serves(mb, resource):
			return "the node restarted without the resource in its schema"
		}
		return ""
	}
	if now.Sub(m.start) >= m.cfg.GCAfter {
		return "the node is not a member"
	}
	return ""
}

// serves reports whether mb's gossip metadata lists resource.
func serves(mb Member, resource string) bool {
	_, ok := mb.Decodable[resource]
	return ok
}
