package raft

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

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
// otherwise over keel's RPC to the leader, as a forwarded write goes: a call waiting on
// a leader this node loses contact with is interrupted and tried again on the next
// leader, and a node without leader contact gives up after LeaderWait (ErrNoLeader) —
// never later than ApplyTimeout. A handler must therefore be idempotent: a call cut
// off after it was sent is repeated. Like a forwarded write, a call is run on the
// leader it reached and never forwarded again. A leader of an older release answers
// with an error.
func (n *Node) CallLeader(ctx context.Context, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	start := time.Now()
	for {
		var resp []byte
		addr, err := n.leaderContact()
		switch {
		case err != nil:
		case addr == "":
			resp, err = n.localLeaderCall(ctx, body)
		default:
			resp, err = n.forward(ctx, addr, rpcLeaderCall, body)
		}
		if err == nil {
			return resp, nil
		}
		if (!retriable(err) && !errors.Is(err, errSent)) || n.giveUp(start, err) {
			return nil, err
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
