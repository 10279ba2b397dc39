package raft

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	hraft "github.com/hashicorp/raft"

	"github.com/keel-kv/keel/fsm"
)

// SetCommandFormatLimit sets the newest command format (fsm.CommandFormatV*) that every
// voter can apply, as the agent learned it from gossip metadata; while this node leads
// it refuses newer ones with ErrFormatNotAgreed, so a node of an older release never
// meets a log entry it cannot decode (like Consul's ServersMeetMinimumVersion). It
// starts at fsm.MaxCommandFormat. Without gossip (Config.FormatsFromGossip false) the
// node also asks every voter itself (formats.go), and the lower of the two holds.
// Safe for concurrent use.
func (n *Node) SetCommandFormatLimit(f byte) { n.formatLimit.Store(uint32(f)) }

// CommandFormatLimit is the newest command format this node proposes: the gossip
// limit, and without gossip also what every voter answered over RPC.
func (n *Node) CommandFormatLimit() byte {
	return byte(min(n.formatLimit.Load(), n.peerFormats.limit.Load()))
}

// Apply replicates cmd and returns the state machine's result. On a follower the
// command is forwarded to the leader. Commands rejected before reaching the log
// (ErrNoLeader, ErrNotLeader) are retried until ApplyTimeout, except that a node
// without leader contact gives up with ErrNoLeader after LeaderWait (see contact.go);
// a failure whose outcome is unknown returns ErrTimeout and is never retried, so a
// write is applied at most once. A forwarded write still waiting when this node loses
// leader contact ends with ErrTimeout at once. A command in a format some voter cannot
// apply fails with ErrFormatNotAgreed. The result is the state machine's own when this
// node leads (its byte slices are shared with the store: read them, never modify them)
// and a decoded copy when the write was forwarded.
func (n *Node) Apply(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error) {
	data, err := fsm.EncodeCommand(cmd)
	if err != nil {
		return nil, err
	}
	// Bound the retries by ApplyTimeout, unless the caller's deadline is sooner anyway
	// (a request's own timeout, usually): one timer per write is enough.
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > n.cfg.ApplyTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, n.cfg.ApplyTimeout)
		defer cancel()
	}
	start := time.Now()
	for {
		var res *fsm.Result
		addr, err := n.leaderContact()
		switch {
		case err != nil:
		case addr == "":
			res, err = n.applyLocal(data)
		default:
			res, err = n.applyRemote(ctx, addr, data)
		}
		if err == nil {
			return res, nil
		}
		if errors.Is(err, errSent) {
			return nil, fmt.Errorf("%w: %v", ErrTimeout, err)
		}
		if !retriable(err) || n.giveUp(start, err) {
			return nil, err
		}
		if err := n.pause(ctx, err); err != nil {
			return nil, err
		}
	}
}

// isNoLeader: err says this node has no leader contact (or was cut off from it).
func isNoLeader(err error) bool { return errors.Is(err, ErrNoLeader) }

// retriable: the command certainly did not reach the log.
func retriable(err error) bool {
	if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) {
		return true
	}
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &oe) || (errors.As(err, &ne) && !errors.Is(err, errSent))
}

// pause waits a little before a retry; when ctx ends it returns the last error.
func (n *Node) pause(ctx context.Context, last error) error {
	select {
	case <-ctx.Done():
		if errors.Is(last, ErrNoLeader) || errors.Is(last, ErrNotLeader) {
			return ErrNoLeader
		}
		return fmt.Errorf("%w: %v", ErrNoLeader, last)
	case <-n.ctx.Done():
		return ErrShutdown
	case <-time.After(20 * time.Millisecond):
		return nil
	}
}

// applyLocal appends data to the log of this node, which must lead, and returns the
// state machine's result as it made it: a write on the leader is never encoded.
func (n *Node) applyLocal(d data) (*fsm.Result, error) {
	if n.raft.State() != hraft.Leader {
		return nil, ErrNotLeader
	}
	if limit := n.CommandFormatLimit(); len(d) > 0 && d[0] > limit {
		return nil, fmt.Errorf("%w: format %d, every voter applies up to %d", ErrFormatNotAgreed, d[0], limit)
	}
	n.counts.pending.Add(1)
	f := n.raft.Apply(d, n.cfg.ApplyTimeout)
	err := f.Error()
	n.counts.pending.Add(-1)
	if err != nil {
		n.counts.failed.Add(1)
		return nil, n.mapApplyErr(err)
	}
	res, ok := f.Response().(*fsm.Result)
	if !ok {
		return nil, fmt.Errorf("raft: unexpected apply response %T", f.Response())
	}
	return res, nil
}

// applyRemote forwards data to the leader at addr, which applies it with applyLocal
// and answers with the encoded result, leases included. A leader of a release before
// that answer refuses the request kind without applying anything; the write goes
// again as rpcApply (its result without leases), and that leader is asked so for
// oldLeaderRecheck before it is tried with leases again (it may have been upgraded).
//
// A write with a caller on ctx (WithCaller) goes as rpcApplyAs, which the leader
// checks again (caller.go); to a leader that predates it, as the node's own writes go.
func (n *Node) applyRemote(ctx context.Context, addr string, d data) (*fsm.Result, error) {
	if caller, ok := callerOf(ctx); ok {
		if res, sent, err := n.forwardAs(ctx, addr, caller, d); sent {
			return res, err
		}
	}
	kind := rpcApplyLeases
	if t, ok := n.oldLeaders.Load(addr); ok && time.Since(t.(time.Time)) < oldLeaderRecheck {
		kind = rpcApply
	}
	resp, err := n.forward(ctx, addr, kind, d)
	if kind == rpcApplyLeases && isUnknownKind(err) {
		n.oldLeaders.Store(addr, time.Now())
		resp, err = n.forward(ctx, addr, rpcApply, d)
	}
	if err != nil {
		return nil, err
	}
	return fsm.DecodeResult(resp)
}

// oldLeaderRecheck is how long a leader that refused rpcApplyLeases is sent rpcApply.
const oldLeaderRecheck = time.Minute

// mapApplyErr maps the error of a command this node appended as leader.
//
// A failed append to the leader's own log (a full disk, say) makes hashicorp/raft
// step down. Whether the entry can come back depends on the log store: a plain error
// means the write failed before the entry was readable, so it was never sent, and the
// WAL cut what the write left, durably, before answering — the entry is certainly
// not in any log, so another leader may take the write (ErrNotLeader, retried). If
// the store failed instead (the cut or an fdatasync failed), the entry may still be
// on this node's disk and be committed once it restarts and leads, and the leader
// sent it to the followers during its fdatasync (StoreLogsAsync), which may commit
// it: the outcome is unknown (ErrTimeout), never "not applied".
func (n *Node) mapApplyErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "unable to store logs") && n.wal != nil && n.wal.Failed() != nil {
		return fmt.Errorf("%w: the leader's log store failed while storing the entry, which may "+
			"come back when it restarts: %v", ErrTimeout, err)
	}
	return mapRaftErr(err)
}

func mapRaftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case strings.Contains(err.Error(), "unable to store logs"):
		// See mapApplyErr: the log store cut the entry, so it is certainly not applied.
		return fmt.Errorf("%w: leader could not store the entry: %v", ErrNotLeader, err)
	case errors.Is(err, hraft.ErrNotLeader):
		return ErrNotLeader
	case errors.Is(err, hraft.ErrRaftShutdown):
		return ErrShutdown
	case errors.Is(err, hraft.ErrLeadershipLost), errors.Is(err, hraft.ErrEnqueueTimeout),
		errors.Is(err, hraft.ErrLeadershipTransferInProgress):
		// Possibly appended: the outcome is unknown.
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return err
}
