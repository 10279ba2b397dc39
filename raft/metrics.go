package raft

import (
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"
)

// Observer receives the node's timings as they happen, for an exporter (the agent's
// /metrics); package raft keeps no metrics library of its own. Its methods are called
// concurrently from raft's goroutines — the WAL's writer, the FSM goroutine,
// replication — and must neither block nor call back into the Node.
type Observer interface {
	// WALSynced: one fdatasync of a batch of the log took d.
	WALSynced(d time.Duration)
	// BatchApplied: the state machine applied a batch of entries, entries long, in d
	// (keel's "backend commit": the store publishes the batch's view at its end).
	BatchApplied(entries int, d time.Duration)
	// AppendEntries: the leader's AppendEntries RPC to peer (its server ID) took d and
	// ended with err; heartbeat says it carried no entries (its time is the round
	// trip, with no disk write on the follower's side).
	AppendEntries(peer string, heartbeat bool, d time.Duration, err error)
}

// nopObserver is the Observer of a Config that names none.
type nopObserver struct{}

func (nopObserver) WALSynced(time.Duration)                          {}
func (nopObserver) BatchApplied(int, time.Duration)                  {}
func (nopObserver) AppendEntries(string, bool, time.Duration, error) {}

// Counters are the node's counts since Open, for an exporter. Each is read atomically
// on its own; together they are not one snapshot.
type Counters struct {
	// LeaderChanges counts the times this node saw a new leader (etcd's
	// leader_changes_seen): the first one after Open included.
	LeaderChanges uint64
	// ProposalsPending is the writes this node, as leader, has in the log and not yet
	// applied; ProposalsFailed counts those that failed (lost leadership, timeout,
	// shutdown).
	ProposalsPending int64
	ProposalsFailed  uint64
}

// Counters returns the node's counters now.
func (n *Node) Counters() Counters {
	return Counters{
		LeaderChanges:    n.counts.leaderChanges.Load(),
		ProposalsPending: n.counts.pending.Load(),
		ProposalsFailed:  n.counts.failed.Load(),
	}
}

// PeerContact returns, while this node leads, when each other server last answered
// an AppendEntries (server ID → time); servers never heard from since this node began
// leading are missing. A follower returns nil: it sends no AppendEntries.
func (n *Node) PeerContact() map[string]time.Time {
	ls := n.lead.Load()
	if ls == nil {
		return nil
	}
	out := map[string]time.Time{}
	n.peerContact.Range(func(k, v any) bool {
		if at := v.(time.Time); at.After(ls.since) {
			out[k.(string)] = at
		}
		return true
	})
	return out
}

// timedTransport is the network transport with each AppendEntries timed: the time
// goes to the Observer and a success to the peer's contact time. Embedding the
// pointer keeps every optional interface of the transport (pre-vote, close).
type timedTransport struct {
	*hraft.NetworkTransport
	obs     Observer
	contact *sync.Map // server ID → time.Time of the last successful AppendEntries
}

func (t timedTransport) AppendEntries(id hraft.ServerID, target hraft.ServerAddress,
	args *hraft.AppendEntriesRequest, resp *hraft.AppendEntriesResponse) error {
	start := time.Now()
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	now := time.Now()
	t.obs.AppendEntries(string(id), len(args.Entries) == 0, now.Sub(start), err)
	if err == nil {
		t.contact.Store(string(id), now)
	}
	return err
}
