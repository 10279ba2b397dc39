package raft

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// The command-format gate without gossip. A leader must never propose a command format
// some voter cannot apply: that voter would stop (this release) or, in releases before
// v0.9.0, skip the entry and silently diverge. With gossip the agent learns every
// voter's formats from its metadata. Without it, every node asks every voter over
// keel's RPC (rpcFormats) once a second and proposes nothing newer than the oldest
// answer:
//
//   - a voter that answers gives its newest format, remembered until it answers again
//     (a voter that is down keeps what it last said: it replays the log on return);
//   - a voter of a release before this RPC answers "unknown request kind"; those
//     releases (v0.8, 85d08eb) apply formats 1 and 2, the policy's N−1 (docs/
//     compatibility.md), so it counts as formatsBeforeRPC;
//   - a voter never heard from counts as fsm.MinCommandFormat, the safe side: newer
//     formats wait (503, retriable) until it answers.

// formatsBeforeRPC is the newest command format of every release before rpcFormats.
const formatsBeforeRPC = fsm.CommandFormatV2

// formatsPoll is how often a node asks the voters.
const formatsPoll = time.Second

type peerFormats struct {
	limit atomic.Uint32 // the oldest newest-format among the voters, as last polled
	mu    sync.Mutex
	known map[string]byte // voter ID -> the newest format it said it applies
}

func (n *Node) formatsLoop() {
	defer n.wg.Done()
	t := time.NewTicker(formatsPoll)
	defer t.Stop()
	for {
		n.pollFormats()
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollFormats asks every other voter which formats it applies and sets the limit.
func (n *Node) pollFormats() {
	limit := fsm.MaxCommandFormat
	for _, m := range *n.members.Load() {
		if m.Suffrage != hraft.Voter || m.ID == n.cfg.NodeID {
			continue
		}
		limit = min(limit, n.voterFormat(m))
	}
	if old := byte(n.peerFormats.limit.Swap(uint32(limit))); old != limit {
		n.log.Info("command format limit from the voters' answers", "format", limit)
	}
}

// voterFormat is the newest command format voter m applies, as far as is known.
func (n *Node) voterFormat(m Member) byte {
	ctx, cancel := context.WithTimeout(n.ctx, formatsPoll)
	resp, err := n.pool.call(ctx, m.Address, rpcFormats, nil)
	cancel()
	n.peerFormats.mu.Lock()
	defer n.peerFormats.mu.Unlock()
	if n.peerFormats.known == nil {
		n.peerFormats.known = map[string]byte{}
	}
	switch {
	case err == nil && len(resp) >= 2:
		n.peerFormats.known[m.ID] = resp[1]
	case isUnknownKind(err):
		n.peerFormats.known[m.ID] = formatsBeforeRPC
	}
	if f, ok := n.peerFormats.known[m.ID]; ok {
		return f
	}
	return fsm.MinCommandFormat
}

// VoterFormats returns, per voter this node has polled (itself excluded), the newest
// command format it last said it applies; empty with gossip (FormatsFromGossip) or
// before the first answers.
func (n *Node) VoterFormats() map[string]byte {
	n.peerFormats.mu.Lock()
	defer n.peerFormats.mu.Unlock()
	return maps.Clone(n.peerFormats.known)
}
