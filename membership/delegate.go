package membership

import (
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// delegate serves memberlist's hooks for one Membership. memberlist calls the event
// and alive hooks with its node lock held, so every method here is quick, takes only
// m.mu and never calls back into memberlist.
type delegate struct {
	m *Membership
}

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.MergeDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

// NodeMeta returns the local metadata, encoded (UpdateMeta keeps it <= MetaMaxSize).
func (d *delegate) NodeMeta(limit int) []byte {
	d.m.mu.Lock()
	defer d.m.mu.Unlock()
	if len(d.m.mu.localBytes) > limit {
		// Cannot happen: EncodeMeta refuses more than MetaMaxSize, memberlist's limit.
		d.m.logger.Error("local metadata exceeds memberlist limit", "bytes", len(d.m.mu.localBytes), "limit", limit)
		return nil
	}
	return append([]byte(nil), d.m.mu.localBytes...)
}

// keel sends no user messages and no extra push/pull state.
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// NotifyAlive admits a node only if its metadata decodes, names the node itself and
// carries this cluster's label; memberlist ignores the alive message otherwise, so a
// foreign or unreadable node never becomes a member.
func (d *delegate) NotifyAlive(peer *memberlist.Node) error {
	if _, err := d.m.checkPeer(peer.Name, peer.Meta); err != nil {
		d.m.mu.Lock()
		d.m.mu.stats.PeersRejected++
		d.m.mu.Unlock()
		return err
	}
	return nil
}

// NotifyMerge refuses a join (push/pull) with a node list holding any foreign or
// unreadable node, so the join fails instead of half-merging two clusters.
func (d *delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if _, err := d.m.checkPeer(p.Name, p.Meta); err != nil {
			err = fmt.Errorf("refuse merge: %w", err)
			d.m.mu.Lock()
			d.m.mu.stats.MergesRejected++
			d.m.mu.lastMergeReject = err
			d.m.mu.Unlock()
			return err
		}
	}
	return nil
}

func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.m.logger.Warn("two nodes claim one NodeID; the newcomer is ignored until the old one is dead for DeadNodeReclaimTime",
		"node", existing.Name, "existing", existing.Address(), "other", other.Address())
}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.m.observe(n, EventJoin) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.m.observe(n, EventUpdate) }
func (d *delegate) NotifyLeave(n *memberlist.Node)  { d.m.observe(n, EventLeave) }

// checkPeer decodes and vets the metadata a peer announces.
func (m *Membership) checkPeer(name string, raw []byte) (Meta, error) {
	meta, err := DecodeMeta(raw)
	if err != nil {
		return meta, fmt.Errorf("node %q: %w", name, err)
	}
	if meta.ClusterLabel != m.cfg.ClusterLabel {
		return meta, fmt.Errorf("%w: node %q has cluster label %q, this cluster is %q",
			ErrForeignCluster, name, meta.ClusterLabel, m.cfg.ClusterLabel)
	}
	if meta.NodeID != name {
		return meta, fmt.Errorf("%w: node %q announces NodeID %q", ErrInvalidMeta, name, meta.NodeID)
	}
	if err := meta.Validate(); err != nil {
		return meta, fmt.Errorf("node %q: %w", name, err)
	}
	return meta, nil
}

// observe records what memberlist reported about n and queues the event. kind is
// EventLeave for any departure; it becomes EventFailed unless the node's last
// metadata said it was leaving or memberlist saw the node announce its own departure
// (StateLeft: the dead message came from the node itself — a peer that missed the
// Leaving update on a busy machine still tells a leave from a failure).
func (m *Membership) observe(n *memberlist.Node, kind EventType) {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		m.logger.Error("member with unreadable metadata", "node", n.Name, "error", err)
		return
	}
	status := StatusAlive
	if kind == EventLeave {
		status = StatusLeft
		if !meta.Leaving && n.State != memberlist.StateLeft {
			status, kind = StatusDead, EventFailed
		}
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	mem := &Member{Meta: meta, Addr: n.Address(), Status: status, LastChange: now}
	if prev, ok := m.mu.members[n.Name]; ok && prev.Status == status {
		mem.LastChange = prev.LastChange
	}
	m.mu.members[n.Name] = mem
	m.enqueueLocked(kind, *mem)
	if kind != EventUpdate {
		m.logger.Info("member "+kind.String(), "node", n.Name, "addr", mem.Addr, "status", status,
			"incarnation", meta.Incarnation, "release", meta.Release)
	}
}
