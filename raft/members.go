package raft

import (
	"context"
	"errors"
	"fmt"
	"time"

	hraft "github.com/hashicorp/raft"
)

// Member is one server of the Raft configuration.
type Member struct {
	ID       string
	Address  string
	Suffrage hraft.ServerSuffrage // hraft.Voter or hraft.Nonvoter; String gives the API's name
	Leader   bool
}

// Status is a node's view of the cluster, read without blocking on the raft loop.
type Status struct {
	NodeID       string
	State        string // "Leader", "Follower", "Candidate", "Shutdown"
	LeaderID     string
	LeaderAddr   string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	LastLogIndex uint64
	Members      []Member
}

// Status reports the node's raft state. The member list is refreshed in the background,
// so it can trail a change by a second.
func (n *Node) Status() Status {
	addr, id := n.raft.LeaderWithID()
	st := Status{
		NodeID: n.cfg.NodeID, State: n.raft.State().String(), LeaderID: string(id), LeaderAddr: string(addr),
		Term: n.raft.CurrentTerm(), CommitIndex: n.raft.CommitIndex(), AppliedIndex: n.store.AppliedIndex(),
		LastLogIndex: n.raft.LastIndex(),
	}
	for _, m := range *n.members.Load() {
		m.Leader = m.ID == string(id)
		st.Members = append(st.Members, m)
	}
	return st
}

func (n *Node) membersLoop() {
	defer n.wg.Done()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		n.refreshMembers()
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (n *Node) refreshMembers() {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	var ms []Member
	for _, s := range f.Configuration().Servers {
		suffrage := hraft.Voter
		if s.Suffrage != hraft.Voter {
			suffrage = hraft.Nonvoter // keel never stages servers
		}
		ms = append(ms, Member{ID: string(s.ID), Address: string(s.Address), Suffrage: suffrage})
	}
	n.members.Store(&ms)
	n.cutNonMembers(ms)
}

// AddVoter adds (or re-addresses) a voting server; on a follower it is forwarded.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	return n.addServer(ctx, id, addr, true)
}

// AddNonvoter adds a server that replicates the log without voting.
func (n *Node) AddNonvoter(ctx context.Context, id, addr string) error {
	return n.addServer(ctx, id, addr, false)
}

func (n *Node) addServer(ctx context.Context, id, addr string, voter bool) error {
	if id == "" || addr == "" {
		return errors.New("raft: add server: id and address are required")
	}
	kind := rpcAddNonvoter
	if voter {
		kind = rpcAddVoter
	}
	return n.onLeader(ctx, kind, []byte(id+"\x00"+addr), func() error {
		f := n.raft.GetConfiguration()
		if err := f.Error(); err != nil {
			return n.mapApplyErr(err)
		}
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == id && string(s.Address) == addr && (s.Suffrage == hraft.Voter) == voter {
				return nil // already a member: joining is idempotent
			}
		}
		var fut hraft.IndexFuture
		if voter {
			fut = n.raft.AddVoter(hraft.ServerID(id), hraft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)
		} else {
			fut = n.raft.AddNonvoter(hraft.ServerID(id), hraft.ServerAddress(addr), 0, n.cfg.ApplyTimeout)
		}
		if err := fut.Error(); err != nil {
			return n.mapApplyErr(err)
		}
		n.log.Info("added server", "id", id, "address", addr, "voter", voter)
		n.refreshMembers()
		return nil
	})
}

// RemoveServer removes a server from the Raft configuration; it may join again (see
// RetireServer for a removal it cannot come back from).
func (n *Node) RemoveServer(ctx context.Context, id string) error {
	return n.onLeader(ctx, rpcRemove, []byte(id), func() error { return n.removeLocal(id) })
}

// removeLocal removes id on this node, the leader.
func (n *Node) removeLocal(id string) error {
	if err := n.raft.RemoveServer(hraft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return n.mapApplyErr(err)
	}
	n.log.Info("removed server", "id", id)
	n.refreshMembers()
	return nil
}

// TransferLeadership hands leadership to id, or to the most up-to-date voter when id
// is empty.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	return n.onLeader(ctx, rpcTransfer, []byte(id), func() error {
		var f hraft.Future
		if id == "" {
			f = n.raft.LeadershipTransfer()
		} else {
			var addr string
			for _, m := range *n.members.Load() {
				if m.ID == id {
					addr = m.Address
				}
			}
			if addr == "" {
				return fmt.Errorf("raft: transfer leadership: %q is not a member", id)
			}
			if id == n.cfg.NodeID {
				return nil
			}
			f = n.raft.LeadershipTransferToServer(hraft.ServerID(id), hraft.ServerAddress(addr))
		}
		return mapRaftErr(f.Error())
	})
}

// onLeader runs local on the leader, or sends the RPC to the leader, retrying while no
// leader is known.
func (n *Node) onLeader(ctx context.Context, kind byte, body []byte, local func() error) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ApplyTimeout)
	defer cancel()
	for {
		var err error
		if n.raft.State() == hraft.Leader {
			err = local()
		} else if addr, _ := n.raft.LeaderWithID(); addr != "" && string(addr) != n.addr {
			_, err = n.pool.call(ctx, string(addr), kind, body)
		} else {
			err = ErrNoLeader
		}
		if err == nil || !(retriable(err) || errors.Is(err, errSent)) {
			return err
		}
		if err := n.pause(ctx, err); err != nil {
			return err
		}
	}
}

// joinLoop asks the configured members to add this node until it is part of a
// configuration, with capped exponential backoff.
func (n *Node) joinLoop() {
	defer n.wg.Done()
	backoff := 100 * time.Millisecond
	body := []byte(n.cfg.NodeID + "\x00" + n.addr)
	for attempt := 1; ; attempt++ {
		if n.inConfiguration() {
			return
		}
		for _, addr := range n.cfg.Join {
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			_, err := n.pool.call(ctx, addr, rpcAddVoter, body)
			cancel()
			if err == nil {
				n.log.Info("joined the cluster", "via", addr)
				return
			}
			if attempt == 1 || attempt%10 == 0 {
				n.log.Warn("join attempt failed", "via", addr, "attempt", attempt, "error", err)
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (n *Node) inConfiguration() bool {
	for _, m := range *n.members.Load() {
		if m.ID == n.cfg.NodeID {
			return true
		}
	}
	return false
}
