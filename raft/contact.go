package raft

import (
	"context"
	"fmt"
	"sync"
	"time"

	hraft "github.com/hashicorp/raft"
)

// Leader contact decides how long a request waits for a leader. A node has leader
// contact while it leads, or while it follows a leader it has heard from within
// HeartbeatTimeout. Without contact the node is cut off (a partition, a dead leader, an
// election under way): a request that finds it so waits at most LeaderWait for contact
// to come back and then fails with ErrNoLeader, rather than retrying until
// ApplyTimeout; and losing contact interrupts the requests this node has forwarded to
// the leader and is still waiting on.
//
// A leader cut off from a quorum is covered by hashicorp/raft's leader lease: once it
// has not heard from a quorum for LeaderLeaseTimeout it steps down and forgets itself
// as leader, its writes in flight fail (outcome unknown: ErrTimeout), and from then on
// it is a follower with no contact.
//
// With the defaults (HeartbeatTimeout 1s, LeaderLeaseTimeout 1s, LeaderWait 500ms)
// an isolated node refuses a request within LeaderWait of its arrival once the first
// second of the partition has passed.

// StreamGraceTimeouts is how many election timeouts (HeartbeatTimeout: the silence
// after which a follower stops trusting its leader and campaigns) a node may be
// without leader contact before the long streams that require a leader end
// (StreamContext). It is etcd's: its v3rpc monitorLeader looks every election timeout
// and cancels require-leader streams at the third look in a row without a leader
// (maxNoLeaderCnt 3), because reconnecting streams costs far more than refusing new
// requests, and an election usually ends within one or two timeouts. keel measures
// the silence continuously rather than in looks, so it gives the whole three: with
// the default HeartbeatTimeout of 1 s, a stream ends 3 s after contact is lost (4 s
// after the leader's last word), and survives an election of up to that long.
const StreamGraceTimeouts = 3

// contact tracks leader contact for the requests in flight.
type contact struct {
	mu     sync.Mutex
	ctx    context.Context // live while the node has contact; cancelled when it loses it
	cancel context.CancelCauseFunc
	// lostAt is when the node lost contact (zero while it has it); stream is live until
	// the node has been without it for StreamGraceTimeouts election timeouts.
	lostAt       time.Time
	stream       context.Context
	streamCancel context.CancelCauseFunc
}

// leaderContact returns the address to forward to, "" when this node leads, or an
// ErrNoLeader saying why the node has no leader contact.
func (n *Node) leaderContact() (string, error) {
	if n.raft.State() == hraft.Leader {
		return "", nil
	}
	addr, _ := n.raft.LeaderWithID()
	if addr == "" || string(addr) == n.addr {
		return "", fmt.Errorf("%w: this node knows no leader", ErrNoLeader)
	}
	last := n.raft.LastContact()
	if last.IsZero() {
		return "", fmt.Errorf("%w: never heard from leader %s", ErrNoLeader, addr)
	}
	if since := time.Since(last); since > n.cfg.HeartbeatTimeout {
		return "", fmt.Errorf("%w: no word from leader %s for %s (heartbeat timeout %s)",
			ErrNoLeader, addr, since.Round(time.Millisecond), n.cfg.HeartbeatTimeout)
	}
	return string(addr), nil
}

// LeaderContact is nil while this node leads or has heard from its leader within
// HeartbeatTimeout, and an ErrNoLeader saying why otherwise. Watches that require a
// leader end when it fails.
func (n *Node) LeaderContact() error {
	_, err := n.leaderContact()
	return err
}

// ContactContext is live while this node has leader contact, and is cancelled, with
// an ErrNoLeader cause, within a tenth of HeartbeatTimeout of losing it (at once when
// it has none now). Long requests that must not outlive the contact, as watches that
// require a leader, end on it without polling.
func (n *Node) ContactContext() context.Context { return n.contactContext() }

// StreamGrace is how long the node may be without leader contact before its long
// streams that require a leader end: StreamGraceTimeouts election timeouts.
func (n *Node) StreamGrace() time.Duration { return StreamGraceTimeouts * n.cfg.HeartbeatTimeout }

// StreamContext is live until this node has been without leader contact for
// StreamGrace, and is then cancelled with an ErrNoLeader cause (checked every tenth
// of HeartbeatTimeout). A short loss of contact, as an election, leaves it live. Long
// streams that require a leader (etcd's require-leader watches and keepalives) end on
// it, as etcd's end after its monitorLeader's grace.
func (n *Node) StreamContext() context.Context {
	n.contactContext()
	n.contact.mu.Lock()
	defer n.contact.mu.Unlock()
	return n.contact.stream
}

// contactContext checks leader contact now and returns a context that is cancelled,
// with an ErrNoLeader cause, as soon as the node loses it.
func (n *Node) contactContext() context.Context {
	_, err := n.leaderContact()
	n.contact.mu.Lock()
	defer n.contact.mu.Unlock()
	c := &n.contact
	switch {
	case err != nil && c.ctx != nil && c.ctx.Err() == nil:
		c.cancel(err)
	case err == nil && (c.ctx == nil || c.ctx.Err() != nil):
		c.ctx, c.cancel = context.WithCancelCause(n.ctx)
	}
	if c.ctx == nil { // no contact since Open
		c.ctx, c.cancel = context.WithCancelCause(n.ctx)
		c.cancel(err)
	}
	now := time.Now()
	switch {
	case err == nil:
		c.lostAt = time.Time{}
	case c.lostAt.IsZero():
		c.lostAt = now
	}
	if c.stream == nil || (err == nil && c.stream.Err() != nil) {
		c.stream, c.streamCancel = context.WithCancelCause(n.ctx)
	}
	if grace := n.StreamGrace(); err != nil && c.stream.Err() == nil && now.Sub(c.lostAt) >= grace {
		c.streamCancel(fmt.Errorf("%w: no leader contact for %s (%d election timeouts): %v",
			ErrNoLeader, now.Sub(c.lostAt).Round(time.Millisecond), StreamGraceTimeouts, err))
	}
	return c.ctx
}

// contactLoop notices a lost leader contact within a tenth of HeartbeatTimeout, so
// that forwarded requests waiting on a leader that went silent end promptly.
func (n *Node) contactLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(min(max(n.cfg.HeartbeatTimeout/10, 10*time.Millisecond), 100*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
			n.contactContext()
		}
	}
}

// forward sends one request to the leader at addr, interrupted when this node loses
// leader contact (or ctx ends) before the answer comes.
func (n *Node) forward(ctx context.Context, addr string, kind byte, body []byte) ([]byte, error) {
	cc := n.contactContext()
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(cc, func() { cancel(context.Cause(cc)) })
	defer stop()
	return n.pool.call(fctx, addr, kind, body)
}

// giveUp says whether a request that started at start and just failed with last
// should stop retrying: it has no leader contact and has waited LeaderWait for it.
func (n *Node) giveUp(start time.Time, last error) bool {
	return isNoLeader(last) && time.Since(start) >= n.cfg.LeaderWait
}
