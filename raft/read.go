package raft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// View returns a view of the store. A linearizable view reflects every write
// acknowledged before the call: the node learns the leader's commit index (confirmed
// by a heartbeat round) and waits until it has applied it. Like Apply, it fails with
// ErrNoLeader after LeaderWait when the node has no leader contact.
func (n *Node) View(ctx context.Context, c fsm.Consistency) (*fsm.View, error) {
	if c == fsm.Serializable {
		return n.store.View(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	start := time.Now()
	for {
		idx, err := n.readIndex(ctx)
		if err == nil {
			return n.waitApplied(ctx, idx)
		}
		if !retriable(err) && !errors.Is(err, errSent) {
			return nil, err
		}
		if n.giveUp(start, err) {
			return nil, err
		}
		if err := n.pause(ctx, err); err != nil {
			return nil, err
		}
	}
}

func (n *Node) readIndex(ctx context.Context) (uint64, error) {
	addr, err := n.leaderContact()
	if err != nil {
		return 0, err
	}
	if addr == "" {
		return n.leaderReadIndex(ctx)
	}
	return n.reads.get(ctx)
}

// forwardReadIndex asks the leader for a read index on behalf of every read waiting
// in n.reads (readBatch.fetch), bounded by ApplyTimeout rather than one reader's
// context; on a node that has just become leader it runs the protocol itself.
func (n *Node) forwardReadIndex() (uint64, error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ApplyTimeout)
	defer cancel()
	addr, err := n.leaderContact()
	if err != nil {
		return 0, err
	}
	if addr == "" {
		return n.leaderReadIndex(ctx)
	}
	resp, err := n.forward(ctx, addr, rpcReadIndex, nil)
	if err != nil {
		return 0, err
	}
	idx, k := binary.Uvarint(resp)
	if k <= 0 {
		return 0, errors.New("raft rpc: bad read index")
	}
	return idx, nil
}

// leaderReadIndex is the read index protocol on the leader: after this term's barrier,
// take the commit index, then confirm leadership with a heartbeat round that started
// after it was taken.
func (n *Node) leaderReadIndex(ctx context.Context) (uint64, error) {
	ls := n.lead.Load()
	if ls == nil {
		return 0, ErrNotLeader
	}
	select {
	case <-ls.ready:
	case <-ctx.Done():
		return 0, fmt.Errorf("%w: waiting for the leader's first barrier", ErrNoLeader)
	}
	ci := n.raft.CommitIndex()
	if err := n.verify.run(ctx); err != nil {
		return 0, err
	}
	if n.lead.Load() != ls {
		return 0, ErrNotLeader
	}
	return ci, nil
}

// waitApplied waits until the store has applied idx and returns its view.
func (n *Node) waitApplied(ctx context.Context, idx uint64) (*fsm.View, error) {
	for {
		ch := n.fsm.appliedCh()
		if v := n.store.View(); v.AppliedIndex() >= idx {
			return v, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting to apply index %d", ErrTimeout, idx)
		case <-n.ctx.Done():
			return nil, ErrShutdown
		}
	}
}

// verifier coalesces VerifyLeader calls: a caller joins the next round to start, so
// every caller is covered by a heartbeat round that began after it asked, and a burst of
// reads costs one round.
type verifier struct {
	n       *Node
	mu      sync.Mutex
	next    *verifyRound
	running bool
}

type verifyRound struct {
	done chan struct{}
	err  error
}

func (v *verifier) run(ctx context.Context) error {
	v.mu.Lock()
	if v.next == nil {
		v.next = &verifyRound{done: make(chan struct{})}
	}
	round := v.next
	if !v.running {
		v.running = true
		go v.loop()
	}
	v.mu.Unlock()
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return fmt.Errorf("%w: confirming leadership", ErrTimeout)
	}
}

func (v *verifier) loop() {
	for {
		v.mu.Lock()
		round := v.next
		v.next = nil
		if round == nil {
			v.running = false
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		if err := v.n.raft.VerifyLeader().Error(); err != nil {
			round.err = mapRaftErr(err)
			if errors.Is(err, hraft.ErrLeadershipLost) {
				round.err = ErrNotLeader
			}
		}
		close(round.done)
	}
}

// ClusterSecret waits for the replicated cluster secret. This package never proposes
// one: the embedding agent mints it (cmd/keel/agent).
func (n *Node) ClusterSecret(ctx context.Context) ([]byte, error) {
	for {
		ch := n.fsm.appliedCh()
		if _, secret, ok := n.store.ClusterMeta(); ok {
			return secret, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-n.ctx.Done():
			return nil, ErrShutdown
		}
	}
}
