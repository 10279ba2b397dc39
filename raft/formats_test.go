package raft

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keel-kv/keel/fsm"
)

// TestFormatGateWithoutGossip: with no gossip, the leader learns from the voters over
// RPC which command formats they apply. A voter of a release before that RPC (it
// answers "unknown request kind") holds the limit at format 2, so a format-3 command
// (a lease grant) is refused with ErrFormatNotAgreed and nothing is written; once the
// voter runs this release again the gate lifts.
func TestFormatGateWithoutGossip(t *testing.T) {
	c := newCluster(t, 3, nil)
	lead := c.leader()
	old := (lead + 1) % 3
	grant := &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60_000}
	waitFor(t, 5*time.Second, "the gate at the newest format", func() bool {
		return c.nodes[lead].CommandFormatLimit() == fsm.MaxCommandFormat
	})
	c.nodes[old].shutdown()
	cfg := c.cfgs[old]
	cfg.noFormatsRPC = true
	c.cfgs[old] = cfg
	c.restart(old)
	lead = c.leader()
	waitFor(t, 5*time.Second, "the gate at format 2", func() bool {
		return c.nodes[lead].CommandFormatLimit() == fsm.CommandFormatV2
	})
	rev := c.nodes[lead].Store().View().Revision()
	if _, err := c.nodes[lead].Apply(context.Background(), grant); !errors.Is(err, ErrFormatNotAgreed) {
		t.Fatalf("format-3 command with a format-2 voter: %v, want ErrFormatNotAgreed", err)
	}
	mustPut(t, c.nodes[lead], "k", "format 2 still goes") // ordinary writes are unaffected
	if got := c.nodes[lead].Store().View().Revision(); got != rev+1 {
		t.Fatalf("revision %d after a refused grant and one put, want %d", got, rev+1)
	}
	c.nodes[old].shutdown()
	cfg.noFormatsRPC = false
	c.cfgs[old] = cfg
	c.restart(old)
	waitFor(t, 5*time.Second, "the gate lifted", func() bool {
		l := c.leader()
		return c.nodes[l].CommandFormatLimit() == fsm.MaxCommandFormat
	})
	if res, err := c.nodes[c.leader()].Apply(context.Background(), grant); err != nil || res.Err != nil {
		t.Fatalf("grant once every voter applies format 3: %v %v", err, res)
	}
}

// TestFormatGateCoversV4: fsm.CommandFormatV4 (etcd's KV API: nested transactions,
// range compares ...) is newer than what a v0.9.0 voter applies (3). While the limit
// is 3 a format-4 command is refused before it is proposed, nothing written, and
// format-3 commands still go; at the newest format it applies.
func TestFormatGateCoversV4(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.nodes[c.leader()]
	etcdTxn := &fsm.Command{Type: fsm.CmdTxn, Txn: &fsm.Txn{Success: []fsm.Op{
		{Type: fsm.OpTxn, Txn: &fsm.Txn{Success: []fsm.Op{{Type: fsm.OpPut, Key: []byte("n"), Value: []byte("1")}}}}}}}
	if b, _ := fsm.EncodeCommand(etcdTxn); b[0] != fsm.CommandFormatV4 || fsm.MaxCommandFormat < fsm.CommandFormatV4 {
		t.Fatalf("nested txn encodes in format %d, this build applies up to %d", b[0], fsm.MaxCommandFormat)
	}
	n.SetCommandFormatLimit(fsm.CommandFormatV3)
	rev := n.Store().View().Revision()
	if _, err := n.Apply(context.Background(), etcdTxn); !errors.Is(err, ErrFormatNotAgreed) {
		t.Fatalf("format-4 command with the limit at 3: %v, want ErrFormatNotAgreed", err)
	}
	if got := n.Store().View().Revision(); got != rev {
		t.Fatalf("revision %d after a refused command, want %d", got, rev)
	}
	grant := &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60_000}
	if res, err := n.Apply(context.Background(), grant); err != nil || res.Err != nil {
		t.Fatalf("format-3 command with the limit at 3: %v %v", err, res)
	}
	n.SetCommandFormatLimit(fsm.MaxCommandFormat)
	if res, err := n.Apply(context.Background(), etcdTxn); err != nil || res.Err != nil || res.Responses[0].Txn == nil {
		t.Fatalf("format-4 command at the newest format: %v %+v", err, res)
	}
}

// TestFormatGateCoversV5: a lease grant with an owner (fsm.CommandFormatV5) is newer
// than what a voter of the etcd-API release applies (4): while the limit is 4 it is
// refused before it is proposed, no lease granted; the same grant without owner
// (format 3) still goes; at the newest format the owned grant applies.
func TestFormatGateCoversV5(t *testing.T) {
	c := newCluster(t, 1, nil)
	n := c.nodes[c.leader()]
	owned := &fsm.Command{Type: fsm.CmdLeaseGrant, LeaseID: 7, LeaseTTL: 60_000, LeaseOwner: "p:a"}
	n.SetCommandFormatLimit(fsm.CommandFormatV4)
	if _, err := n.Apply(context.Background(), owned); !errors.Is(err, ErrFormatNotAgreed) {
		t.Fatalf("owned grant with the limit at 4: %v, want ErrFormatNotAgreed", err)
	}
	if _, ok := n.Store().View().Lease(7); ok {
		t.Fatal("lease 7 granted by a refused command")
	}
	n.SetCommandFormatLimit(fsm.MaxCommandFormat)
	if res, err := n.Apply(context.Background(), owned); err != nil || res.Err != nil {
		t.Fatalf("owned grant at the newest format: %v %+v", err, res)
	}
	if l, _ := n.Store().View().Lease(7); l.Owner != "p:a" {
		t.Fatalf("lease 7 owner %q, want p:a", l.Owner)
	}
}
