package raft

import (
	"context"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// leaderState is one term of leadership. ready closes once the term's barrier has
// applied every entry of earlier terms; only then may reads be served from the store.
//
// The barrier is an empty command rather than raft's own Barrier: the state machine sees
// it, so every index a read may wait for after it (commands, configuration changes) is
// one the store's applied index reaches. raft.Barrier entries and the term's no-op never
// reach the state machine, and a read waiting for one of those would wait forever.
type leaderState struct {
	term  uint64
	since time.Time // when this node saw it lead
	ready chan struct{}
}

// leaderLoop follows leadership changes: on winning, it runs the barrier that makes
// reads safe.
func (n *Node) leaderLoop() {
	defer n.wg.Done()
	obs := make(chan hraft.Observation, 16)
	observer := hraft.NewObserver(obs, false, func(o *hraft.Observation) bool {
		switch o.Data.(type) {
		case hraft.RaftState, hraft.LeaderObservation:
			return true
		}
		return false
	})
	var lastLeader hraft.ServerID
	n.raft.RegisterObserver(observer)
	defer n.raft.DeregisterObserver(observer)
	tick := time.NewTicker(250 * time.Millisecond) // observations can be dropped
	defer tick.Stop()
	for {
		// The leader is read rather than taken from the observation: observations
		// can be dropped, and the tick catches a change they missed. The first pass
		// runs before any wait: a lone voter may have won before the observer was
		// registered, and its reads would otherwise wait for the first tick.
		if _, id := n.raft.LeaderWithID(); id != "" && id != lastLeader {
			lastLeader = id
			n.counts.leaderChanges.Add(1)
		}
		isLeader := n.raft.State() == hraft.Leader
		cur := n.lead.Load()
		switch {
		case isLeader && (cur == nil || cur.term != n.raft.CurrentTerm()):
			ls := &leaderState{term: n.raft.CurrentTerm(), since: time.Now(), ready: make(chan struct{})}
			n.lead.Store(ls)
			go n.becomeLeader(ls)
		case !isLeader && cur != nil:
			n.lead.Store(nil)
		}
		select {
		case <-n.ctx.Done():
			n.lead.Store(nil)
			return
		case <-obs:
		case <-tick.C:
		}
	}
}

func (n *Node) becomeLeader(ls *leaderState) {
	barrier, _ := fsm.EncodeCommand(&fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{}})
	for n.ctx.Err() == nil && n.lead.Load() == ls {
		f := n.raft.Apply(barrier, n.cfg.ApplyTimeout)
		if err := f.Error(); err != nil {
			n.log.Warn("leader barrier failed", "error", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		close(ls.ready)
		n.log.Info("leader ready", "term", ls.term, "index", f.Index())
		return
	}
}

// WaitForLeader waits until the node knows a leader.
func (n *Node) WaitForLeader(ctx context.Context) error {
	for {
		if addr, _ := n.raft.LeaderWithID(); addr != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ErrNoLeader
		case <-n.ctx.Done():
			return ErrShutdown
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (n *Node) otherVoters() int {
	c := 0
	for _, m := range *n.members.Load() {
		if m.Suffrage == hraft.Voter && m.ID != n.cfg.NodeID {
			c++
		}
	}
	return c
}
