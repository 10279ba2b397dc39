package raft

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// LeaderHandler serves a request that only the leader can answer (kv's lease
// keepalives: the leader keeps the deadlines). It runs on the leader, for a request
// made on any node through CallLeader; body and the answer are opaque to raft. An error
// travels back as its message, with ErrNotLeader, ErrNoLeader, ErrTimeout,
// ErrShutdown and ErrFormatNotAgreed kept matchable with errors.Is.
type LeaderHandler func(ctx context.Context, body []byte) ([]byte, error)

// SetLeaderHandler installs the handler CallLeader reaches (at most one; the last call
// wins). Safe for concurrent use.
func (n *Node) SetLeaderHandler(h LeaderHandler) { n.leaderHandler.Store(&h) }

// errNoHandler: a leader without a handler (not yet installed, or an older release).
var errNoHandler = errors.New("raft: the leader serves no leader calls")

// CallLeader runs the leader's LeaderHandler on body: locally when this node leads,
// otherwise over keel's RPC to the leader, retrying while no leader is known (at most
// ApplyTimeout). Like a forwarded write, a call is run on the leader it reached and
// never forwarded again. A leader of an older release answers with an error.
func (n *Node) CallLeader(ctx context.Context, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	for {
		var resp []byte
		var err error
		if n.raft.State() == hraft.Leader {
			resp, err = n.localLeaderCall(ctx, body)
		} else if addr, _ := n.raft.LeaderWithID(); addr != "" && string(addr) != n.addr {
			resp, err = n.pool.call(ctx, string(addr), rpcLeaderCall, body)
		} else {
			err = ErrNoLeader
		}
		if err == nil || !retriable(err) {
			return resp, err
		}
		if err := n.pause(ctx, err); err != nil {
			return nil, err
		}
	}
}

// ApplyLeader replicates cmd only if this node leads: it is never forwarded, and on a
// follower it fails with ErrNotLeader at once. A leader's own decisions (kv's lease
// expiry and checkpoints) use it, so that a deposed leader's decision never reaches
// the log through its successor. An entry appended before this node lost leadership
// may still commit, but then it is in the log before the successor's first entry.
func (n *Node) ApplyLeader(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	d, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.applyLocal(d)
}

func (n *Node) localLeaderCall(ctx context.Context, body []byte) ([]byte, error) {
	if n.raft.State() != hraft.Leader {
		return nil, ErrNotLeader
	}
	h := n.leaderHandler.Load()
	if h == nil {
		return nil, fmt.Errorf("%w: %v", ErrNotLeader, errNoHandler)
	}
	return (*h)(ctx, body)
}

// leaderHandlerSlot holds the installed LeaderHandler.
type leaderHandlerSlot = atomic.Pointer[LeaderHandler]
